//===- tests/unit/runtime/exec/LossTest.cpp - Microbatch losses -----------===//
//
// The losses of runtime/exec/Loss.h over microbatches add up to the loss
// over the whole batch, computed here as transformers and torch compute it,
// wherever the padding labels fall.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

using namespace ppc;
namespace F = torch::nn::functional;

namespace {
/// Logits [4, 6, 10] and labels [4, 6] whose padding (-100) is spread
/// unevenly: row 0 has none, row 3 all but its first two labels.
struct Batch {
  at::Tensor logits, labels;
  Batch() {
    at::manual_seed(7);
    logits = at::randn({4, 6, 10});
    labels = at::randint(0, 10, {4, 6}, at::kLong);
    labels.index_put_({1, at::indexing::Slice(4)}, -100);
    labels.index_put_({2, at::indexing::Slice(5)}, -100);
    labels.index_put_({3, at::indexing::Slice(2)}, -100);
  }
};

at::Tensor value(const llvm::Expected<at::Tensor> &t) { return *t; }

/// The microbatches' losses (rows split in two), each times its weight,
/// summed as the trainer weighs them: 1 over the batch's tokens.
double splitLoss(const LossFunction &loss, const Batch &b) {
  int64_t tokens = loss.tokens(b.labels);
  double sum = 0;
  for (int64_t start : {0, 1}) {
    int64_t rows = start == 0 ? 1 : 3;
    auto part = loss(b.logits.narrow(0, start, rows),
                     b.labels.narrow(0, start, rows), "mb");
    EXPECT_TRUE(bool(part)) << llvm::toString(part.takeError());
    sum += part->item<double>() / double(tokens);
  }
  return sum;
}

std::string errorOf(llvm::Expected<at::Tensor> t) {
  return t ? std::string() : llvm::toString(t.takeError());
}
} // namespace

TEST(LossTest, CrossEntropyOverTheLastDimensionIsTheMeanOverEveryToken) {
  Batch b;
  LossFunction loss{LossKind::CrossEntropy};
  ASSERT_TRUE(loss.sumsTokens(b.labels));
  EXPECT_EQ(loss.tokens(b.labels), 24 - 2 - 1 - 4);
  // transformers: logits.view(-1, V), labels.view(-1), ignore_index=-100.
  double want =
      F::cross_entropy(b.logits.reshape({-1, 10}), b.labels.reshape({-1}))
          .item<double>();
  EXPECT_NEAR(splitLoss(loss, b), want, 1e-6 * std::abs(want));
  // The mean of the microbatches' means is not it.
  double halves = 0;
  for (auto [start, rows] : {std::pair{0, 1}, std::pair{1, 3}})
    halves +=
        F::cross_entropy(b.logits.narrow(0, start, rows).reshape({-1, 10}),
                         b.labels.narrow(0, start, rows).reshape({-1}))
            .item<double>() *
        rows / 4;
  EXPECT_GT(std::abs(halves - want), 1e-3);
}

TEST(LossTest, CausalLMShiftsTheLabelsAsTransformersDoes) {
  Batch b;
  LossFunction loss{LossKind::CausalLM};
  // Each row's first label never counts; row 0 ends unpadded.
  EXPECT_EQ(loss.tokens(b.labels), (6 - 1) + (4 - 1) + (5 - 1) + (2 - 1));
  // transformers' ForCausalLMLoss: pad the labels with -100, drop the first.
  at::Tensor shifted =
      at::constant_pad_nd(b.labels, {0, 1}, -100).narrow(1, 1, 6);
  double want =
      F::cross_entropy(b.logits.reshape({-1, 10}), shifted.reshape({-1}))
          .item<double>();
  EXPECT_NEAR(splitLoss(loss, b), want, 1e-6 * std::abs(want));
  // Another ignore index: -100 is then a label out of range.
  LossFunction other{LossKind::CausalLM, 3};
  EXPECT_EQ(other.tokens(at::tensor({3, 1, 3, 2}, at::kLong).reshape({1, 4})),
            2);
}

TEST(LossTest, ClassIndicesInDimensionOneAndRowLosses) {
  at::manual_seed(3);
  at::Tensor images = at::randn({2, 5, 3, 3});
  at::Tensor pixels = at::randint(0, 5, {2, 3, 3}, at::kLong);
  LossFunction ce{LossKind::CrossEntropy};
  EXPECT_NEAR(value(ce(images, pixels, "mb")).item<double>() / 18,
              F::cross_entropy(images, pixels).item<double>(), 1e-6);
  // Probabilities are a row loss: the mean, as torch computes it.
  at::Tensor probs = at::softmax(at::randn({4, 5}), 1);
  at::Tensor scores = at::randn({4, 5});
  EXPECT_FALSE(ce.sumsTokens(probs));
  EXPECT_NEAR(value(ce(scores, probs, "mb")).item<double>(),
              F::cross_entropy(scores, probs).item<double>(), 1e-6);
  LossFunction mse{LossKind::MSE};
  EXPECT_FALSE(mse.sumsTokens(at::zeros({4}, at::kLong)));
  EXPECT_NEAR(value(mse(scores, probs, "mb")).item<double>(),
              F::mse_loss(scores, probs).item<double>(), 1e-6);
  // bf16 logits are scored in float32.
  at::Tensor half = scores.to(at::kBFloat16);
  at::Tensor got = value(ce(half, at::tensor({0, 1, 2, 3}, at::kLong), "mb"));
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  // float64 logits stay float64.
  got = value(
      ce(scores.to(at::kDouble), at::tensor({0, 1, 2, 3}, at::kLong), "mb"));
  EXPECT_EQ(got.scalar_type(), at::kDouble);
}

TEST(LossTest, ShapesThatDoNotFitAreOneLine) {
  LossFunction ce{LossKind::CrossEntropy}, lm{LossKind::CausalLM},
      mse{LossKind::MSE};
  at::Tensor logits = at::zeros({2, 32, 100});
  EXPECT_EQ(errorOf(ce(logits, at::zeros({2, 31}, at::kLong), "mb 0")),
            "mb 0: the output is float32[2,32,100], the target int64[2,31]; "
            "cross_entropy needs class scores in the output's last dimension "
            "(or dimension 1) and a target of the output's shape without it");
  EXPECT_EQ(errorOf(lm(logits, at::zeros({2, 32}), "mb 0")),
            "mb 0: the output is float32[2,32,100], the target float32[2,32]"
            "; causal_lm needs logits [B, T, V] and integer labels [B, T]");
  EXPECT_EQ(errorOf(lm(at::zeros({2, 100}), at::zeros({2}, at::kLong), "mb")),
            "mb: the output is float32[2,100], the target int64[2]; causal_lm "
            "needs logits [B, T, V] and integer labels [B, T]");
  EXPECT_EQ(errorOf(mse(at::zeros({2, 4}), at::zeros({2, 3}), "mb")),
            "mb: the output is float32[2,4], the target float32[2,3]; mse "
            "needs equal shapes");
  // A label out of range is torch's own error, after `what`.
  std::string range =
      errorOf(ce(at::zeros({2, 4}), at::tensor({0, 9}, at::kLong), "mb"));
  EXPECT_EQ(range.rfind("mb: ", 0), 0u) << range;
  EXPECT_NE(range.find("out of bounds"), std::string::npos) << range;
}
