//===- tests/unit/runtime/exec/MicrobatchTest.cpp - Microbatch splitting --===//
#include "runtime/exec/Microbatch.h"
#include "lib/Error.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

using namespace ppc;

namespace {
/// The rows of each microbatch splitMicrobatches makes of a batch of `batch`.
std::vector<int64_t> splitSizes(int64_t batch, int count) {
  auto mbs = splitMicrobatches({at::zeros({batch, 1})}, 1, count);
  EXPECT_TRUE(static_cast<bool>(mbs)) << llvm::toString(mbs.takeError());
  std::vector<int64_t> sizes;
  for (const auto &mb : *mbs)
    sizes.push_back(mb[0].toTensor().size(0));
  return sizes;
}
} // namespace

TEST(MicrobatchTest, SizesFollowTensorSplit) {
  // torch.tensor_split: the first B % M microbatches get one more row.
  EXPECT_EQ(splitSizes(5, 3), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(splitSizes(10, 8), (std::vector<int64_t>{2, 2, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(splitSizes(6, 3), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(splitSizes(7, 7), (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(splitSizes(1, 1), (std::vector<int64_t>{1}));
}

TEST(MicrobatchTest, MicrobatchesAreRowsOfTheInput) {
  at::Tensor x = at::arange(10).reshape({5, 2});
  auto mbs = splitMicrobatches({x}, 1, 2);
  ASSERT_TRUE(static_cast<bool>(mbs));
  EXPECT_TRUE(
      at::equal((*mbs)[0][0].toTensor(),
                at::tensor({0, 1, 2, 3, 4, 5}, at::kLong).view({3, 2})));
  EXPECT_TRUE(at::equal((*mbs)[1][0].toTensor(),
                        at::tensor({6, 7, 8, 9}, at::kLong).view({2, 2})));
}

TEST(MicrobatchTest, SplitAndConcatRoundTrip) {
  at::Tensor x = at::randn({5, 4});
  at::Tensor y = at::arange(10).reshape({5, 2});
  auto mbs = splitMicrobatches({x, y}, 2, 3);
  ASSERT_TRUE(static_cast<bool>(mbs));
  ASSERT_EQ(mbs->size(), 3u);
  EXPECT_EQ(Signature::of((*mbs)[0]).text, "float32[2,4];int64[2,2]");
  EXPECT_EQ(Signature::of((*mbs)[0]).rows, 2);
  Signature last = Signature::of((*mbs)[2]);
  EXPECT_EQ(last.text, "float32[1,4];int64[1,2]");
  EXPECT_EQ(last.rows, 1);
  // A peer's signature: the rows come from the text, and none is -1.
  EXPECT_EQ(Signature::parse(last.text).rows, 1);
  EXPECT_EQ(Signature::parse("Int").rows, -1);
  EXPECT_EQ(Signature::parse("float32[]").rows, -1);
  std::vector<c10::IValue> parts;
  for (auto &mb : *mbs)
    parts.push_back(mb[0]);
  auto joined = concatMicrobatches(parts, ValueKind::Tensor, 0);
  ASSERT_TRUE(static_cast<bool>(joined));
  EXPECT_TRUE(at::equal(joined->toTensor(), x));
}

TEST(MicrobatchTest, ConcatTuples) {
  std::vector<c10::IValue> parts{
      c10::ivalue::Tuple::create({at::ones({1, 2}), at::zeros({1})}),
      c10::ivalue::Tuple::create({at::ones({2, 2}), at::zeros({2})})};
  auto joined = concatMicrobatches(parts, ValueKind::TensorTuple, 0);
  ASSERT_TRUE(static_cast<bool>(joined));
  EXPECT_EQ(joined->toTupleRef().elements()[0].toTensor().size(0), 3);
  auto bad = concatMicrobatches({c10::IValue(int64_t(1))}, ValueKind::Int, 1);
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "model output 1 is a int; only tensors (and lists/tuples of "
            "tensors) can be "
            "concatenated");
}

// One microbatch's output carved out of a coalesced receive buffer comes
// back compact: torch.save writes a tensor's whole storage.
TEST(MicrobatchTest, OneViewOfALargerBufferIsCopied) {
  at::Tensor buffer = at::arange(64, at::kFloat);
  at::Tensor view = buffer.slice(0, 16, 24).view({2, 4});
  for (ValueKind kind : {ValueKind::Tensor, ValueKind::TensorTuple}) {
    c10::IValue part = kind == ValueKind::Tensor
                           ? c10::IValue(view)
                           : c10::IValue(c10::ivalue::Tuple::create({view}));
    auto joined = concatMicrobatches({part}, kind, 0);
    ASSERT_TRUE(static_cast<bool>(joined));
    at::Tensor t = kind == ValueKind::Tensor
                       ? joined->toTensor()
                       : joined->toTupleRef().elements()[0].toTensor();
    EXPECT_TRUE(at::equal(t, view));
    EXPECT_EQ(t.storage().nbytes(), t.nbytes());
  }
  // A tensor that is its whole storage is returned as it is.
  at::Tensor whole = at::ones({2, 4});
  auto same = concatMicrobatches({c10::IValue(whole)}, ValueKind::Tensor, 0);
  ASSERT_TRUE(static_cast<bool>(same));
  EXPECT_TRUE(same->toTensor().is_same(whole));
}

TEST(MicrobatchTest, Errors) {
  auto err = [](llvm::Expected<std::vector<std::vector<c10::IValue>>> r) {
    return r ? std::string() : llvm::toString(r.takeError());
  };
  EXPECT_EQ(err(splitMicrobatches({at::zeros({5})}, 2, 1)),
            "the model takes 2 inputs, got 1");
  EXPECT_EQ(err(splitMicrobatches({at::zeros({5}), at::zeros({4})}, 2, 1)),
            "model inputs have different batch sizes (5 and 4)");
  EXPECT_EQ(err(splitMicrobatches({at::zeros({5})}, 1, 8)),
            "microbatches 8 exceeds the batch size 5");
  EXPECT_EQ(err(splitMicrobatches({at::zeros({})}, 1, 1)),
            "input 0 has no batch dimension (it is a 0-dim tensor)");
  EXPECT_EQ(err(splitMicrobatches({at::zeros({5})}, 1, 0)),
            "microbatches 0 is not an integer in 1..65536");
}

// Tests that an option out of range names its field by type, and keeps its
// type under added context, so that the CLI can name its flag.
TEST(MicrobatchTest, OptionErrorsNameTheField) {
  llvm::Error err = withContext(
      splitMicrobatches({at::zeros({5})}, 1, 8).takeError(), "batch 2");
  std::string field, problem, context;
  llvm::handleAllErrors(
      std::move(err),
      [&](const OptionError &e) {
        field = e.field();
        problem = e.problem();
        context = e.context();
      },
      [&](const llvm::ErrorInfoBase &e) { ADD_FAILURE() << e.message(); });
  EXPECT_EQ(field, "microbatches");
  EXPECT_EQ(problem, "8 exceeds the batch size 5");
  EXPECT_EQ(context, "batch 2: ");
}
