//===- tests/unit/runtime/generate/PromptTest.cpp -------------------------===//
//
// The checks of a decoding prompt and their exact messages.
//
//===----------------------------------------------------------------------===//
#include "runtime/generate/Prompt.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

using namespace ppc;

namespace {
std::string promptError(const at::Tensor &prompt, int64_t batch) {
  llvm::Error err = checkPrompt(prompt, batch);
  return err ? llvm::toString(std::move(err)) : "";
}

std::string rangeError(const at::Tensor &tokens, int64_t vocab) {
  llvm::Error err = checkTokenRange(tokens, vocab);
  return err ? llvm::toString(std::move(err)) : "";
}
} // namespace

TEST(PromptTest, AcceptsGroupsOfTheProgramsBatch) {
  EXPECT_EQ(promptError(at::zeros({4, 3}, at::kLong), 2), "");
  EXPECT_EQ(promptError(at::zeros({1, 1}, at::kLong), 1), "");
  // Any layout: a transposed view is still [B, P].
  EXPECT_EQ(promptError(at::zeros({3, 4}, at::kLong).t(), 2), "");
}

TEST(PromptTest, RefusesWhatIsNoPrompt) {
  EXPECT_EQ(promptError(at::Tensor(), 2),
            "expected a tensor of token ids, got none");
  EXPECT_EQ(promptError(at::zeros({2, 3}), 2),
            "expected int64 token ids, got float32");
  EXPECT_EQ(promptError(at::zeros({2, 3}, at::kInt), 2),
            "expected int64 token ids, got int32");
  EXPECT_EQ(promptError(at::zeros({2, 3, 4}, at::kLong), 2),
            "expected a [batch, length] tensor, got int64[2,3,4]");
  EXPECT_EQ(promptError(at::zeros({6}, at::kLong), 2),
            "expected a [batch, length] tensor, got int64[6]");
  EXPECT_EQ(promptError(at::zeros({0, 5}, at::kLong), 2),
            "expected at least one row and one token, got int64[0,5]");
  EXPECT_EQ(promptError(at::zeros({2, 0}, at::kLong), 2),
            "expected at least one row and one token, got int64[2,0]");
  EXPECT_EQ(promptError(at::zeros({5, 3}, at::kLong), 2),
            "5 rows are not a multiple of the program's batch size 2");
  EXPECT_EQ(promptError(at::zeros({1, 3}, at::kLong), 2),
            "1 row is not a multiple of the program's batch size 2");
}

TEST(PromptTest, TokenIdsStayInTheVocabulary) {
  at::Tensor tokens = at::arange(12, at::kLong).view({4, 3});
  EXPECT_EQ(rangeError(tokens, 12), "");
  EXPECT_EQ(rangeError(tokens, 11),
            "token id 11 at row 3, position 2 is outside the vocabulary "
            "(0..10)");
  tokens.index_put_({1, 1}, -1);
  EXPECT_EQ(rangeError(tokens, 11),
            "token id -1 at row 1, position 1 is outside the vocabulary "
            "(0..10)");
  // Row order on a transposed view: the first bad id of row 0.
  at::Tensor t = at::tensor({0, 1, 500, 0}, at::kLong).view({2, 2}).t();
  EXPECT_EQ(rangeError(t, 128),
            "token id 500 at row 0, position 1 is outside the vocabulary "
            "(0..127)");
}
