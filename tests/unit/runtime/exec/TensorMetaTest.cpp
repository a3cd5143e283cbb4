//===- tests/unit/runtime/exec/TensorMetaTest.cpp - Boundary metadata -----===//
#include "runtime/exec/TensorMeta.h"
#include "tests/unit/runtime/exec/MetaBuilders.h"

#include "llvm/Support/FormatVariadic.h"

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

// Found by fuzz_user_meta: an empty Tensor[] was written without "tensors",
// which the reader requires, so a cache holding one read back as corrupt.
TEST(TensorMetaTest, EmptyTensorListRoundTrips) {
  ValueMeta empty;
  empty.kind = ValueKind::TensorList;
  auto back = metaFromJSON(metaToJSON(empty), "test");
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(*back, empty);
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
            "user: unknown dtype (ppc carries uint8, int8, int16, int32, "
            "int64, float16, float32, float64, complex64, complex128, bool "
            "and bfloat16) at meta.tensors[0].dtype");
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
  const c10::Device cpu(c10::kCPU);
  std::vector<c10::IValue> values{
      at::arange(6).reshape({2, 3}).t(), c10::IValue(int64_t(-4)),
      c10::IValue(0.25), c10::IValue(true), c10::List<int64_t>({5, 6})};
  std::vector<ValueKind> kinds{ValueKind::Tensor, ValueKind::Int,
                               ValueKind::Float, ValueKind::Bool,
                               ValueKind::IntList};
  for (size_t i = 0; i < values.size(); ++i) {
    ValueMeta meta = ValueMeta::of(values[i], kinds[i]);
    auto sent = toWire(values[i], kinds[i], cpu, "v");
    auto buffers = allocateWire(meta, cpu, "v");
    ASSERT_TRUE(sent && buffers);
    ASSERT_EQ(sent->size(), buffers->size());
    for (size_t k = 0; k < sent->size(); ++k) {
      ASSERT_EQ((*sent)[k].sizes(), (*buffers)[k].sizes());
      ASSERT_TRUE((*sent)[k].is_contiguous());
      (*buffers)[k].copy_((*sent)[k]);
    }
    auto back = fromWire(*buffers, meta, "v");
    ASSERT_TRUE(static_cast<bool>(back));
    if (values[i].isTensor())
      EXPECT_TRUE(at::equal(back->toTensor(), values[i].toTensor()));
    else
      EXPECT_EQ(*back, values[i]);
  }
}

namespace {

ValueMeta valueMeta(ValueKind kind, std::vector<TensorMeta> tensors,
                    int64_t length = 0) {
  ValueMeta m;
  m.kind = kind;
  m.tensors = std::move(tensors);
  m.length = length;
  return m;
}

/// One value of every kind, with its record written by hand from
/// docs/runtime.md ("Metadata header"), independent of the encoder.
struct KindCase {
  c10::IValue value;
  ValueKind kind;
  ValueMeta meta;
  std::vector<int64_t> record;
};

std::vector<KindCase> kindCases() {
  using T = c10::ScalarType;
  c10::List<at::Tensor> list;
  list.push_back(at::zeros({1}, at::kLong));
  list.push_back(at::zeros({0, 5}, at::kBool));
  c10::impl::GenericList generic(c10::TensorType::get());
  generic.push_back(at::zeros({2}, at::kInt));
  return {
      {at::zeros({2, 3}),
       ValueKind::Tensor,
       valueMeta(ValueKind::Tensor, {tensorMeta(T::Float, {2, 3}, {3, 1})}),
       {0, 1, 6, 0, 2, 2, 3, 3, 1}},
      {at::zeros({4, 3}).t(),
       ValueKind::Tensor,
       valueMeta(ValueKind::Tensor, {tensorMeta(T::Float, {3, 4}, {1, 3})}),
       {0, 1, 6, 0, 2, 3, 4, 1, 3}},
      {at::zeros({}, at::kHalf),
       ValueKind::Tensor,
       valueMeta(ValueKind::Tensor, {tensorMeta(T::Half, {}, {})}),
       {0, 1, 5, 0, 0}},
      {list,
       ValueKind::TensorList,
       valueMeta(ValueKind::TensorList, {tensorMeta(T::Long, {1}, {1}),
                                         tensorMeta(T::Bool, {0, 5}, {5, 1})}),
       {1, 2, 4, 0, 1, 1, 1, 11, 0, 2, 0, 5, 5, 1}},
      {generic,
       ValueKind::TensorList,
       valueMeta(ValueKind::TensorList, {tensorMeta(T::Int, {2}, {1})}),
       {1, 1, 3, 0, 1, 2, 1}},
      {c10::ivalue::Tuple::create(
           {at::zeros({3}, at::kDouble), at::zeros({1}, at::kBFloat16)}),
       ValueKind::TensorTuple,
       valueMeta(ValueKind::TensorTuple, {tensorMeta(T::Double, {3}, {1}),
                                          tensorMeta(T::BFloat16, {1}, {1})}),
       {2, 2, 7, 0, 1, 3, 1, 15, 0, 1, 1, 1}},
      {c10::IValue(int64_t(7)),
       ValueKind::Int,
       valueMeta(ValueKind::Int, {}),
       {3, 0}},
      {c10::IValue(2.5),
       ValueKind::Float,
       valueMeta(ValueKind::Float, {}),
       {4, 0}},
      {c10::IValue(true),
       ValueKind::Bool,
       valueMeta(ValueKind::Bool, {}),
       {5, 0}},
      {c10::List<int64_t>({1, 2, 3}),
       ValueKind::IntList,
       valueMeta(ValueKind::IntList, {}, 3),
       {6, 3}},
  };
}
} // namespace

TEST(TensorMetaTest, HeaderOfEveryKindMatchesTheDocs) {
  for (const KindCase &c : kindCases()) {
    SCOPED_TRACE(c.meta.str());
    EXPECT_EQ(ValueMeta::of(c.value, c.kind), c.meta);
    std::vector<int64_t> expected{0x7070634d, 1, 2, 5, 3, 1};
    expected.insert(expected.end(), c.record.begin(), c.record.end());
    EXPECT_EQ(encodeHeader(2, 5, 3, {c.meta}), expected);
    auto decoded = decodeHeader(expected, 2, 5, 3, 1);
    ASSERT_TRUE(static_cast<bool>(decoded))
        << llvm::toString(decoded.takeError());
    EXPECT_EQ(decoded->at(0), c.meta);
  }
  // requires_grad is word 1 of a tensor entry.
  ValueMeta grad = valueMeta(
      ValueKind::Tensor, {tensorMeta(c10::ScalarType::Float, {2}, {1}, true)});
  EXPECT_EQ(
      encodeHeader(0, 1, 0, {grad}),
      (std::vector<int64_t>{0x7070634d, 1, 0, 1, 0, 1, 0, 1, 6, 1, 1, 2, 1}));
}

TEST(TensorMetaTest, WireLayoutOfEveryKindMatchesTheDocs) {
  const c10::Device cpu(c10::kCPU);
  auto wire = [&](const c10::IValue &v, ValueKind kind) {
    auto w = toWire(v, kind, cpu, "v");
    EXPECT_TRUE(static_cast<bool>(w));
    return w ? *w : std::vector<at::Tensor>();
  };
  auto same = [](const std::vector<at::Tensor> &got,
                 const std::vector<at::Tensor> &expected) {
    if (got.size() != expected.size())
      return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].scalar_type() != expected[i].scalar_type() ||
          !got[i].is_contiguous() || !at::equal(got[i], expected[i]))
        return false;
    return true;
  };
  // int and bool: one int64; float: one float64; int[]: one int64 tensor.
  EXPECT_TRUE(same(wire(c10::IValue(int64_t(-4)), ValueKind::Int),
                   {at::tensor({int64_t(-4)}, at::kLong)}));
  EXPECT_TRUE(same(wire(c10::IValue(true), ValueKind::Bool),
                   {at::tensor({int64_t(1)}, at::kLong)}));
  EXPECT_TRUE(same(wire(c10::IValue(0.25), ValueKind::Float),
                   {at::tensor({0.25}, at::kDouble)}));
  EXPECT_TRUE(same(wire(c10::List<int64_t>({5, 6}), ValueKind::IntList),
                   {at::tensor({int64_t(5), int64_t(6)}, at::kLong)}));
  // A tensor travels as itself, made contiguous.
  at::Tensor t = at::arange(6).reshape({2, 3}).t();
  EXPECT_TRUE(same(wire(t, ValueKind::Tensor),
                   {at::tensor({0, 3, 1, 4, 2, 5}, at::kLong).view({3, 2})}));
  // Lists (typed or generic) and tuples travel as their elements.
  c10::impl::GenericList generic(c10::TensorType::get());
  generic.push_back(at::ones({2}));
  generic.push_back(at::zeros({1}, at::kLong));
  EXPECT_TRUE(same(wire(generic, ValueKind::TensorList),
                   {at::ones({2}), at::zeros({1}, at::kLong)}));
  EXPECT_TRUE(same(wire(c10::ivalue::Tuple::create({at::ones({1}), t}),
                        ValueKind::TensorTuple),
                   {at::ones({1}), t.contiguous()}));
  // The receiver's buffers have the same shapes and dtypes.
  for (const KindCase &c : kindCases()) {
    auto buffers = allocateWire(c.meta, cpu, "v");
    ASSERT_TRUE(static_cast<bool>(buffers));
    std::vector<at::Tensor> sent = wire(c.value, c.kind);
    ASSERT_EQ(buffers->size(), sent.size()) << c.meta.str();
    for (size_t k = 0; k < sent.size(); ++k) {
      EXPECT_EQ((*buffers)[k].sizes(), sent[k].sizes()) << c.meta.str();
      EXPECT_EQ((*buffers)[k].scalar_type(), sent[k].scalar_type());
    }
  }
}

TEST(TensorMetaTest, JSONFormMatchesTheDocs) {
  ValueMeta m =
      valueMeta(ValueKind::Tensor,
                {tensorMeta(c10::ScalarType::Float, {2, 64}, {64, 1})});
  EXPECT_EQ(llvm::formatv("{0}", metaToJSON(m)).str(),
            R"({"kind":"Tensor","tensors":[{"dtype":"float32",)"
            R"("requires_grad":false,"sizes":[2,64],"strides":[64,1]}]})");
  EXPECT_EQ(
      llvm::formatv("{0}", metaToJSON(valueMeta(ValueKind::IntList, {}, 4)))
          .str(),
      R"({"kind":"int[]","length":4})");
  EXPECT_EQ(
      llvm::formatv("{0}", metaToJSON(valueMeta(ValueKind::Float, {}))).str(),
      R"({"kind":"float"})");
  for (const KindCase &c : kindCases()) {
    auto back = metaFromJSON(metaToJSON(c.meta), "test");
    ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(*back, c.meta);
  }
}

namespace {
std::string decodeError(std::vector<int64_t> record) {
  size_t pos = 0;
  auto meta = decodeMeta(record, pos);
  return meta ? std::string("no error") : llvm::toString(meta.takeError());
}

std::string jsonError(llvm::StringRef text, int64_t batch = -1) {
  auto json = llvm::json::parse(text);
  if (!json)
    return "bad test JSON: " + llvm::toString(json.takeError());
  auto meta = metaFromJSON(*json, "m", batch);
  return meta ? std::string("no error") : llvm::toString(meta.takeError());
}
} // namespace

TEST(TensorMetaTest, HostileHeadersAreRefusedBeforeAllocating) {
  // [1000000000, 1000000] float32 is 4e15 bytes.
  EXPECT_EQ(decodeError({0, 1, 6, 0, 2, 1000000000, 1000000, 1000000, 1}),
            "metadata header: float32[1000000000,1000000] needs more than 64 "
            "GiB");
  // 2^62 * 4 overflows int64.
  EXPECT_EQ(decodeError({0, 1, 6, 0, 2, int64_t(1) << 62, 4, 4, 1}),
            "metadata header: float32[4611686018427387904,4] needs more than "
            "64 GiB");
  // Empty, yet LibTorch multiplies every size when it allocates
  // (fuzz_meta_header).
  EXPECT_EQ(decodeError({0, 1, 6, 0, 3, int64_t(1) << 62, 4, 0, 0, 0, 0}),
            "metadata header: float32[4611686018427387904,4,0] has sizes whose "
            "product overflows");
  EXPECT_EQ(decodeError({0, 1, 6, 0, 2, -1, int64_t(1) << 62, 1, 1}),
            "metadata header: negative size -1 in "
            "float32[-1,4611686018427387904]");
  EXPECT_EQ(decodeError({0, 1, 6, 0, 1, 2, -1}),
            "metadata header: negative stride in float32[2] (strides [-1])");
  EXPECT_EQ(decodeError({0, 1, 6, 0, 65}), "metadata header: bad rank 65");
  EXPECT_EQ(decodeError({0, 1, 8, 0, 1, 2, 1}), // complex32: not carried
            "metadata header: unknown dtype 8");
  EXPECT_EQ(decodeError({0, 1, 99, 0, 1, 2, 1}),
            "metadata header: unknown dtype 99");
  EXPECT_EQ(decodeError({1, 1 << 20}), "metadata header: 1048576 tensors in "
                                       "one value exceed the limit of 4096");
  EXPECT_EQ(decodeError({6, (1 << 20) + 1}),
            "metadata header: an int[] length of 1048577 (at most 1048576)");
  EXPECT_EQ(decodeError({0, 2, 6, 0, 0, 6, 0, 0}),
            "metadata header: a Tensor record with 2 tensors");
  EXPECT_EQ(decodeError({3, 5}), "metadata header: a int record with count 5");
  // A size count larger than the words left is a truncated record, not a
  // huge allocation.
  EXPECT_EQ(decodeError({0, 1, 6, 0, 64, 1}),
            "metadata header: truncated record");
  // Two tensors of 40 GiB each: each fits, the value does not.
  EXPECT_EQ(decodeError({1, 2, 0, 0, 1, int64_t(40) << 30, 1, 0, 0, 1,
                         int64_t(40) << 30, 1}),
            "metadata header: uint8[42949672960] needs more than 64 GiB");
  EXPECT_EQ(decodeError({1, 1, 0, 0, 1, int64_t(40) << 30, 1}), "no error");
}

TEST(TensorMetaTest, HostileJSONIsRefusedBeforeAllocating) {
  EXPECT_EQ(jsonError(R"({"kind": "Tensor", "tensors": [{"dtype": "float32",
                          "sizes": [1000000000, 1000000]}]})"),
            "m: float32[1000000000,1000000] needs more than 64 GiB");
  EXPECT_EQ(jsonError(R"({"kind": "Tensor", "tensors": [{"dtype": "float32",
                          "sizes": [-1, 4611686018427387904]}]})"),
            "m: negative size -1 in float32[-1,4611686018427387904]");
  EXPECT_EQ(jsonError(R"({"kind": "Tensor", "tensors": [{"dtype": "float32",
                          "sizes": [-1, 4611686018427387904]}]})",
                      2),
            "m: float32[2,4611686018427387904] needs more than 64 GiB");
  EXPECT_EQ(jsonError(R"({"kind": "Tensor", "tensors": [{"dtype": "qint8",
                          "sizes": [1]}]})"),
            "m: unknown dtype (ppc carries uint8, int8, int16, int32, int64, "
            "float16, float32, float64, complex64, complex128, bool and "
            "bfloat16) at meta.tensors[0].dtype");
  EXPECT_EQ(jsonError(R"({"kind": "Tensor", "tensors": [{"dtype": "float32",
                          "sizes": [2, 3], "strides": [1]}]})"),
            "m: strides [1] do not match sizes [2,3]");
  EXPECT_EQ(jsonError(R"({"kind": "Tensor", "tensors": [{"dtype": "float32",
                          "sizes": ["2"]}]})"),
            "m: expected integer at meta.tensors[0].sizes[0]");
  EXPECT_EQ(jsonError(R"({"kind": "Tensor", "tensors": []})"),
            "m: a Tensor record with 0 tensors");
  EXPECT_EQ(jsonError(R"({"kind": "int[]", "length": 4000000000})"),
            "m: an int[] length of 4000000000 (at most 1048576)");
  EXPECT_EQ(jsonError(R"({"kind": "Dict"})"),
            "m: unknown kind (expected Tensor, Tensor[], Tuple[Tensor], int, "
            "float, bool or int[]) at meta.kind");
  EXPECT_EQ(jsonError(R"({"kind": "int", "tensors": 3})"), "no error");
  EXPECT_EQ(jsonError(R"([])"), "m: expected object when parsing meta");
}
