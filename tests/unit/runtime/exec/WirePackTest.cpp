//===- tests/unit/runtime/exec/WirePackTest.cpp ---------------------------===//
//
// An edge's values as one message.
//
// Tests that packMessage() and allocateMessage() agree on one layout: the
// tensors packed on one side come out bitwise on the other as views of the
// one buffer, every view aligned, empty tensors and lone tensors never
// packed, and a write into one view changes no other.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/WirePack.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

using namespace ppc;

namespace {
/// Wire tensors of several dtypes and sizes, one of them empty, one 0-dim.
std::vector<at::Tensor> sampleWire() {
  return {at::arange(3, at::kByte),         at::randn({2, 5}, at::kDouble),
          at::zeros({0, 4}, at::kFloat),    at::tensor({1, 0, 1}).to(at::kBool),
          at::full({}, 7, at::kLong),       at::randn({3}, at::kFloat),
          at::randn({2}, at::kComplexFloat)};
}

std::vector<WireShape> shapesOf(const std::vector<at::Tensor> &wire) {
  std::vector<WireShape> shapes;
  for (const at::Tensor &t : wire)
    shapes.push_back({t.scalar_type(), t.sizes().vec()});
  return shapes;
}

/// The bytes of `t` (contiguous).
std::vector<uint8_t> bytesOf(const at::Tensor &t) {
  const auto *p = static_cast<const uint8_t *>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.nbytes());
}
} // namespace

TEST(WirePackTest, LayoutAlignsEveryTensorAndSkipsEmptyOnes) {
  auto layout = packLayout(shapesOf(sampleWire()), "edge");
  ASSERT_TRUE(static_cast<bool>(layout)) << llvm::toString(layout.takeError());
  EXPECT_EQ(layout->offsets,
            (std::vector<int64_t>{0, 64, -1, 192, 256, 320, 384}));
  EXPECT_EQ(layout->bytes, 384 + 16);
  EXPECT_EQ(layout->nonEmpty, 6);
  for (int64_t offset : layout->offsets)
    EXPECT_EQ(offset < 0 ? 0 : offset % kPackAlignment, 0);
}

TEST(WirePackTest, LayoutRefusesSizesThatOverflow) {
  int64_t huge = int64_t(1) << 40;
  auto layout = packLayout({{at::kFloat, {huge, huge}}}, "edge 0");
  ASSERT_FALSE(static_cast<bool>(layout));
  EXPECT_EQ(llvm::toString(layout.takeError()),
            "cannot lay out edge 0: it needs more than 2^63 bytes");
  layout = packLayout({{at::kByte, {std::numeric_limits<int64_t>::max() - 8}},
                       {at::kByte, {1}}},
                      "edge 1");
  ASSERT_FALSE(static_cast<bool>(layout));
  llvm::consumeError(layout.takeError());
}

TEST(WirePackTest, PackedTensorsArriveBitwiseAsViewsOfOneBuffer) {
  std::vector<at::Tensor> wire = sampleWire();
  auto sent = packMessage(wire, at::kCPU, /*coalesce=*/true, "edge");
  ASSERT_TRUE(static_cast<bool>(sent)) << llvm::toString(sent.takeError());
  ASSERT_EQ(sent->size(), 1u);
  auto got = allocateMessage(shapesOf(wire), at::kCPU, true, "edge");
  ASSERT_TRUE(static_cast<bool>(got)) << llvm::toString(got.takeError());
  ASSERT_EQ(got->crossing.size(), 1u);
  ASSERT_EQ(got->crossing[0].nbytes(), (*sent)[0].nbytes());
  // What the transport does: the receive buffer gets the sent bytes.
  got->crossing[0].copy_((*sent)[0]);
  ASSERT_EQ(got->wire.size(), wire.size());
  const auto *base = static_cast<const uint8_t *>(got->crossing[0].data_ptr());
  for (size_t i = 0; i < wire.size(); ++i) {
    const at::Tensor &t = got->wire[i];
    EXPECT_EQ(t.scalar_type(), wire[i].scalar_type()) << i;
    EXPECT_EQ(t.sizes(), wire[i].sizes()) << i;
    EXPECT_TRUE(t.is_contiguous()) << i;
    EXPECT_EQ(bytesOf(t), bytesOf(wire[i])) << i;
    if (t.numel() == 0)
      continue;
    // A view: inside the receive buffer, at an aligned offset.
    auto offset = static_cast<const uint8_t *>(t.data_ptr()) - base;
    EXPECT_EQ(offset % kPackAlignment, 0) << i;
    EXPECT_GE(offset, 0) << i;
    EXPECT_LE(offset + static_cast<int64_t>(t.nbytes()),
              static_cast<int64_t>(got->crossing[0].nbytes()))
        << i;
  }
}

TEST(WirePackTest, AWriteIntoOneViewChangesNoOther) {
  std::vector<at::Tensor> wire = {at::ones({4}), at::ones({4})};
  auto got = allocateMessage(shapesOf(wire), at::kCPU, true, "edge");
  ASSERT_TRUE(static_cast<bool>(got));
  got->crossing[0].zero_();
  int64_t version = got->wire[1]._version();
  got->wire[0].add_(1);
  EXPECT_TRUE(got->wire[0].equal(at::ones({4})));
  EXPECT_TRUE(got->wire[1].equal(at::zeros({4})));
  // Each view has its own version counter: an in-place write into one does
  // not make autograd reject another that a graph saved.
  EXPECT_EQ(got->wire[1]._version(), version);
}

TEST(WirePackTest, ALoneTensorCrossesAsItself) {
  at::Tensor x = at::randn({3, 2});
  std::vector<at::Tensor> wire = {at::zeros({0}), x};
  auto sent = packMessage(wire, at::kCPU, true, "edge");
  ASSERT_TRUE(static_cast<bool>(sent));
  ASSERT_EQ(sent->size(), 1u);
  EXPECT_TRUE((*sent)[0].is_same(x));
  auto got = allocateMessage(shapesOf(wire), at::kCPU, true, "edge");
  ASSERT_TRUE(static_cast<bool>(got));
  ASSERT_EQ(got->crossing.size(), 1u);
  EXPECT_TRUE(got->crossing[0].is_same(got->wire[1]));
  EXPECT_EQ(got->wire[0].numel(), 0);
}

TEST(WirePackTest, NothingCrossesForEmptyTensorsOnly) {
  std::vector<at::Tensor> wire = {at::zeros({0}), at::zeros({2, 0}, at::kLong)};
  auto sent = packMessage(wire, at::kCPU, true, "edge");
  ASSERT_TRUE(static_cast<bool>(sent));
  EXPECT_TRUE(sent->empty());
  auto got = allocateMessage(shapesOf(wire), at::kCPU, true, "edge");
  ASSERT_TRUE(static_cast<bool>(got));
  EXPECT_TRUE(got->crossing.empty());
  EXPECT_EQ(got->wire.size(), 2u);
}

TEST(WirePackTest, WithoutCoalescingEachTensorIsAMessage) {
  std::vector<at::Tensor> wire = sampleWire();
  auto sent = packMessage(wire, at::kCPU, /*coalesce=*/false, "edge");
  ASSERT_TRUE(static_cast<bool>(sent));
  ASSERT_EQ(sent->size(), 6u);
  EXPECT_TRUE((*sent)[1].is_same(wire[1]));
  auto got = allocateMessage(shapesOf(wire), at::kCPU, false, "edge");
  ASSERT_TRUE(static_cast<bool>(got));
  EXPECT_EQ(got->crossing.size(), 6u);
  EXPECT_EQ(got->wire.size(), wire.size());
}
