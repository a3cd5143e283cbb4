//===- tests/unit/runtime/TensorMetaTest.cpp - Boundary metadata ----------===//
#include "runtime/TensorMeta.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

using namespace ppc;

namespace {
std::string errorOf(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

std::vector<ValueMeta> sampleMetas() {
  std::vector<ValueMeta> metas;
  metas.push_back(ValueMeta::of(at::zeros({2, 3, 4}), ValueKind::Tensor));
  metas.push_back(
      ValueMeta::of(at::zeros({4, 3}).t(), ValueKind::Tensor)); // strided
  c10::List<at::Tensor> list;
  list.push_back(at::zeros({1}, at::kLong));
  list.push_back(at::zeros({0, 5}, at::kBool));
  metas.push_back(ValueMeta::of(list, ValueKind::TensorList));
  metas.push_back(
      ValueMeta::of(c10::ivalue::Tuple::create({at::zeros({3}, at::kDouble)}),
                    ValueKind::TensorTuple));
  metas.push_back(ValueMeta::of(c10::IValue(int64_t(7)), ValueKind::Int));
  metas.push_back(ValueMeta::of(c10::IValue(2.5), ValueKind::Float));
  metas.push_back(ValueMeta::of(c10::IValue(true), ValueKind::Bool));
  metas.push_back(
      ValueMeta::of(c10::List<int64_t>({1, 2, 3}), ValueKind::IntList));
  metas.push_back(ValueMeta::of(at::zeros({}), ValueKind::Tensor)); // 0-dim
  return metas;
}
} // namespace

TEST(TensorMetaTest, HeaderRoundTrip) {
  std::vector<ValueMeta> metas = sampleMetas();
  std::vector<int64_t> words = encodeHeader(1, 3, 2, metas);
  EXPECT_EQ(words[0], 0x7070634d);
  auto decoded = decodeHeader(words, 1, 3, 2, metas.size());
  ASSERT_TRUE(static_cast<bool>(decoded))
      << llvm::toString(decoded.takeError());
  EXPECT_EQ(*decoded, metas);
}

TEST(TensorMetaTest, HeaderLayoutIsFixed) {
  // One float32 [2,3] tensor from stage 0 to stage 1, microbatch 0.
  std::vector<int64_t> words = encodeHeader(
      0, 1, 0, {ValueMeta::of(at::zeros({2, 3}), ValueKind::Tensor)});
  std::vector<int64_t> expected{
      0x7070634d, 1, 0, 1, 0, 1,     // magic .. value count
      0,          1,                 // kind Tensor, 1 tensor
      6,          0, 2, 2, 3, 3, 1}; // float32, no grad, [2,3], strides
  EXPECT_EQ(words, expected);
}

TEST(TensorMetaTest, HeaderErrors) {
  std::vector<ValueMeta> metas = sampleMetas();
  std::vector<int64_t> words = encodeHeader(1, 3, 2, metas);
  auto wrongEdge = decodeHeader(words, 0, 3, 2, metas.size());
  EXPECT_EQ(errorOf(wrongEdge.takeError()),
            "metadata header from stage 0 to stage 3: got the header of stage "
            "1 to stage "
            "3, microbatch 2 (expected microbatch 2)");
  std::vector<int64_t> truncated(words.begin(), words.end() - 3);
  auto cut = decodeHeader(truncated, 1, 3, 2, metas.size());
  EXPECT_EQ(errorOf(cut.takeError()), "metadata header from stage 1 to stage "
                                      "3: metadata header: truncated record");
  std::vector<int64_t> garbage{1, 2, 3, 4, 5, 6};
  EXPECT_EQ(
      errorOf(decodeHeader(garbage, 1, 3, 2, 1).takeError()),
      "metadata header from stage 1 to stage 3: not a ppc metadata header");
  words[6] = 99; // the first record's kind
  EXPECT_EQ(errorOf(decodeHeader(words, 1, 3, 2, metas.size()).takeError()),
            "metadata header from stage 1 to stage 3: metadata header: unknown "
            "kind 99")
      << words[6];
}

TEST(TensorMetaTest, JSONRoundTrip) {
  for (const ValueMeta &m : sampleMetas()) {
    auto back = metaFromJSON(metaToJSON(m), "test");
    ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(*back, m) << m.str();
  }
}

TEST(TensorMetaTest, UserJSONMayLeaveBatchOpen) {
  auto parsed = llvm::json::parse(
      R"({"kind": "Tensor", "tensors": [{"dtype": "float32", "sizes": [-1, 8]}]})");
  ASSERT_TRUE(static_cast<bool>(parsed));
  auto meta = metaFromJSON(*parsed, "user", 3);
  ASSERT_TRUE(static_cast<bool>(meta)) << llvm::toString(meta.takeError());
  EXPECT_EQ(meta->str(), "float32[3,8]");
  EXPECT_EQ(meta->tensors[0].strides, (std::vector<int64_t>{8, 1}));
  auto bad =
      llvm::json::parse(R"({"kind": "Tensor", "tensors": [{"dtype": "f32",
                                   "sizes": [1]}]})");
  EXPECT_EQ(errorOf(metaFromJSON(*bad, "user").takeError()),
            "user: tensors[0]: unknown dtype 'f32'");
}

TEST(TensorMetaTest, CheckValueNamesExpectedAndActual) {
  ValueMeta meta = ValueMeta::of(at::zeros({2, 64}), ValueKind::Tensor);
  EXPECT_EQ(errorOf(checkValue(at::zeros({2, 64}), meta, "stage 2 input 'x'")),
            "");
  EXPECT_EQ(errorOf(checkValue(at::zeros({2, 63}), meta, "stage 2 input 'x'")),
            "stage 2 input 'x': expected float32[2,64], got float32[2,63]");
  EXPECT_EQ(errorOf(checkValue(at::zeros({2, 64}, at::kLong), meta, "v")),
            "v: expected float32[2,64], got int64[2,64]");
  EXPECT_EQ(errorOf(checkValue(c10::IValue(int64_t(3)), meta, "v")),
            "v: expected float32[2,64], got Int");
}

TEST(TensorMetaTest, WireRoundTrip) {
  std::vector<c10::IValue> values{
      at::arange(6).reshape({2, 3}).t(), c10::IValue(int64_t(-4)),
      c10::IValue(0.25), c10::IValue(true), c10::List<int64_t>({5, 6})};
  std::vector<ValueKind> kinds{ValueKind::Tensor, ValueKind::Int,
                               ValueKind::Float, ValueKind::Bool,
                               ValueKind::IntList};
  for (size_t i = 0; i < values.size(); ++i) {
    ValueMeta meta = ValueMeta::of(values[i], kinds[i]);
    std::vector<at::Tensor> sent = toWire(values[i], kinds[i]);
    std::vector<at::Tensor> buffers =
        allocateWire(meta, c10::Device(c10::kCPU));
    ASSERT_EQ(sent.size(), buffers.size());
    for (size_t k = 0; k < sent.size(); ++k) {
      ASSERT_EQ(sent[k].sizes(), buffers[k].sizes());
      ASSERT_TRUE(sent[k].is_contiguous());
      buffers[k].copy_(sent[k]);
    }
    c10::IValue back = fromWire(buffers, meta);
    if (values[i].isTensor())
      EXPECT_TRUE(at::equal(back.toTensor(), values[i].toTensor()));
    else
      EXPECT_EQ(back, values[i]);
  }
}
