//===- runtime/TensorMeta.cpp - Metadata of boundary values ---------------===//
//
// This file implements metadata capture, comparison, the int64 header codec,
// the JSON form used by the meta cache and user meta files, and the mapping
// between values and the tensors that carry them.
//
//===----------------------------------------------------------------------===//
#include "runtime/TensorMeta.h"

#include "lib/Error.h"
#include "lib/Stage.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

namespace ppc {

namespace {
constexpr int64_t kHeaderMagic = 0x7070634d; // "ppcM"
constexpr int64_t kHeaderVersion = 1;

struct DtypeSpelling {
  c10::ScalarType dtype;
  const char *name;
};
constexpr DtypeSpelling kDtypes[] = {
    {c10::ScalarType::Byte, "uint8"},
    {c10::ScalarType::Char, "int8"},
    {c10::ScalarType::Short, "int16"},
    {c10::ScalarType::Int, "int32"},
    {c10::ScalarType::Long, "int64"},
    {c10::ScalarType::Half, "float16"},
    {c10::ScalarType::Float, "float32"},
    {c10::ScalarType::Double, "float64"},
    {c10::ScalarType::ComplexFloat, "complex64"},
    {c10::ScalarType::ComplexDouble, "complex128"},
    {c10::ScalarType::Bool, "bool"},
    {c10::ScalarType::BFloat16, "bfloat16"},
};

std::string sizesStr(llvm::ArrayRef<int64_t> sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    out += (i ? "," : "") + std::to_string(sizes[i]);
  return out + "]";
}
} // namespace

std::string dtypeName(c10::ScalarType dtype) {
  for (const auto &d : kDtypes)
    if (d.dtype == dtype)
      return d.name;
  return c10::toString(dtype);
}

llvm::Expected<c10::ScalarType> parseDtype(llvm::StringRef name) {
  for (const auto &d : kDtypes)
    if (name == d.name)
      return d.dtype;
  return makeError("unknown dtype '" + name + "'");
}

TensorMeta TensorMeta::of(const at::Tensor &t) {
  TensorMeta m;
  m.dtype = t.scalar_type();
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.requiresGrad = t.requires_grad();
  return m;
}

std::string TensorMeta::str() const {
  return dtypeName(dtype) + sizesStr(sizes);
}

ValueMeta ValueMeta::of(const c10::IValue &value, ValueKind kind) {
  ValueMeta m;
  m.kind = kind;
  switch (kind) {
  case ValueKind::Tensor:
    m.tensors.push_back(TensorMeta::of(value.toTensor()));
    break;
  case ValueKind::TensorList:
    for (const c10::IValue &e : value.toListRef())
      m.tensors.push_back(TensorMeta::of(e.toTensor()));
    break;
  case ValueKind::TensorTuple:
    for (const c10::IValue &e : value.toTupleRef().elements())
      m.tensors.push_back(TensorMeta::of(e.toTensor()));
    break;
  case ValueKind::IntList:
    m.length = static_cast<int64_t>(value.toIntList().size());
    break;
  case ValueKind::Int:
  case ValueKind::Float:
  case ValueKind::Bool:
    break;
  }
  return m;
}

std::string ValueMeta::str() const {
  switch (kind) {
  case ValueKind::Tensor:
    return tensors.empty() ? "Tensor" : tensors[0].str();
  case ValueKind::TensorList:
  case ValueKind::TensorTuple: {
    std::string out = kind == ValueKind::TensorList ? "[" : "(";
    for (size_t i = 0; i < tensors.size(); ++i)
      out += (i ? "," : "") + tensors[i].str();
    return out + (kind == ValueKind::TensorList ? "]" : ")");
  }
  case ValueKind::IntList:
    return "int[" + std::to_string(length) + "]";
  default:
    return kindName(kind).str();
  }
}

llvm::Error checkValue(const c10::IValue &value, const ValueMeta &meta,
                       const llvm::Twine &what) {
  auto mismatch = [&](const std::string &actual) {
    return makeError(what + ": expected " + meta.str() + ", got " + actual);
  };
  if (!hasKind(value, meta.kind))
    return mismatch(value.tagKind());
  ValueMeta actual = ValueMeta::of(value, meta.kind);
  bool same = actual.length == meta.length &&
              actual.tensors.size() == meta.tensors.size();
  for (size_t i = 0; same && i < actual.tensors.size(); ++i)
    same = actual.tensors[i].dtype == meta.tensors[i].dtype &&
           actual.tensors[i].sizes == meta.tensors[i].sizes;
  if (!same)
    return mismatch(actual.str());
  return llvm::Error::success();
}

static int64_t kindCode(ValueKind kind) { return static_cast<int64_t>(kind); }

void encodeMeta(const ValueMeta &meta, std::vector<int64_t> &out) {
  out.push_back(kindCode(meta.kind));
  out.push_back(meta.kind == ValueKind::IntList
                    ? meta.length
                    : static_cast<int64_t>(meta.tensors.size()));
  for (const TensorMeta &t : meta.tensors) {
    out.push_back(static_cast<int64_t>(t.dtype));
    out.push_back(t.requiresGrad ? 1 : 0);
    out.push_back(static_cast<int64_t>(t.sizes.size()));
    out.insert(out.end(), t.sizes.begin(), t.sizes.end());
    out.insert(out.end(), t.strides.begin(), t.strides.end());
  }
}

llvm::Expected<ValueMeta> decodeMeta(llvm::ArrayRef<int64_t> words,
                                     size_t &pos) {
  auto take = [&](int64_t &out) {
    if (pos >= words.size())
      return false;
    out = words[pos++];
    return true;
  };
  auto truncated = [] {
    return makeError("metadata header: truncated record");
  };
  int64_t kind, count;
  if (!take(kind) || !take(count))
    return truncated();
  if (kind < 0 || kind > kindCode(ValueKind::IntList))
    return makeError(
        llvm::formatv("metadata header: unknown kind {0}", kind).str());
  if (count < 0)
    return makeError(
        llvm::formatv("metadata header: negative count {0}", count).str());
  ValueMeta meta;
  meta.kind = static_cast<ValueKind>(kind);
  bool hasTensors = meta.kind == ValueKind::Tensor ||
                    meta.kind == ValueKind::TensorList ||
                    meta.kind == ValueKind::TensorTuple;
  if (meta.kind == ValueKind::IntList)
    meta.length = count;
  if (!hasTensors)
    return meta;
  if (meta.kind == ValueKind::Tensor && count != 1)
    return makeError(
        llvm::formatv("metadata header: a Tensor record with {0} tensors",
                      count)
            .str());
  for (int64_t i = 0; i < count; ++i) {
    TensorMeta t;
    int64_t dtype, grad, ndim;
    if (!take(dtype) || !take(grad) || !take(ndim))
      return truncated();
    if (dtype < 0 || dtype >= static_cast<int64_t>(c10::ScalarType::NumOptions))
      return makeError(
          llvm::formatv("metadata header: unknown dtype {0}", dtype).str());
    if (ndim < 0 || ndim > 64)
      return makeError(
          llvm::formatv("metadata header: bad rank {0}", ndim).str());
    t.dtype = static_cast<c10::ScalarType>(dtype);
    t.requiresGrad = grad != 0;
    t.sizes.resize(ndim);
    t.strides.resize(ndim);
    for (auto &s : t.sizes)
      if (!take(s))
        return truncated();
    for (auto &s : t.strides)
      if (!take(s))
        return truncated();
    for (int64_t s : t.sizes)
      if (s < 0)
        return makeError("metadata header: negative size");
    meta.tensors.push_back(std::move(t));
  }
  return meta;
}

std::vector<int64_t> encodeHeader(int producer, int consumer, int microbatch,
                                  llvm::ArrayRef<ValueMeta> values) {
  std::vector<int64_t> out{kHeaderMagic, kHeaderVersion,
                           producer,     consumer,
                           microbatch,   static_cast<int64_t>(values.size())};
  for (const ValueMeta &v : values)
    encodeMeta(v, out);
  return out;
}

llvm::Expected<std::vector<ValueMeta>>
decodeHeader(llvm::ArrayRef<int64_t> words, int producer, int consumer,
             int microbatch, size_t valueCount) {
  std::string where = llvm::formatv(
      "metadata header from stage {0} to stage {1}", producer, consumer);
  if (words.size() < 6 || words[0] != kHeaderMagic)
    return makeError(where + ": not a ppc metadata header");
  if (words[1] != kHeaderVersion)
    return makeError(llvm::formatv("{0}: version {1}, expected {2}", where,
                                   words[1], kHeaderVersion)
                         .str());
  if (words[2] != producer || words[3] != consumer || words[4] != microbatch)
    return makeError(
        llvm::formatv("{0}: got the header of stage {1} to stage {2}, "
                      "microbatch {3} (expected microbatch {4})",
                      where, words[2], words[3], words[4], microbatch)
            .str());
  if (words[5] != static_cast<int64_t>(valueCount))
    return makeError(llvm::formatv("{0}: {1} values, expected {2}", where,
                                   words[5], valueCount)
                         .str());
  std::vector<ValueMeta> values;
  size_t pos = 6;
  for (size_t i = 0; i < valueCount; ++i) {
    auto meta = decodeMeta(words, pos);
    if (!meta)
      return withContext(meta.takeError(), where);
    values.push_back(std::move(*meta));
  }
  if (pos != words.size())
    return makeError(where + ": trailing words");
  return values;
}

llvm::json::Value metaToJSON(const ValueMeta &meta) {
  llvm::json::Object o{{"kind", kindName(meta.kind)}};
  if (meta.kind == ValueKind::IntList)
    o["length"] = meta.length;
  if (!meta.tensors.empty()) {
    llvm::json::Array tensors;
    for (const TensorMeta &t : meta.tensors) {
      llvm::json::Array sizes, strides;
      for (int64_t s : t.sizes)
        sizes.push_back(s);
      for (int64_t s : t.strides)
        strides.push_back(s);
      tensors.push_back(llvm::json::Object{{"dtype", dtypeName(t.dtype)},
                                           {"sizes", std::move(sizes)},
                                           {"strides", std::move(strides)},
                                           {"requires_grad", t.requiresGrad}});
    }
    o["tensors"] = std::move(tensors);
  }
  return o;
}

llvm::Expected<ValueMeta> metaFromJSON(const llvm::json::Value &json,
                                       const llvm::Twine &where,
                                       int64_t batchSize) {
  auto fail = [&](const llvm::Twine &message) {
    return makeError(where + ": " + message);
  };
  const llvm::json::Object *o = json.getAsObject();
  if (!o)
    return fail("expected an object");
  auto kindText = o->getString("kind");
  if (!kindText)
    return fail("missing 'kind'");
  auto kind = parseKind(*kindText);
  if (!kind)
    return fail("unknown kind '" + *kindText + "'");
  ValueMeta meta;
  meta.kind = *kind;
  if (meta.kind == ValueKind::IntList) {
    auto length = o->getInteger("length");
    if (!length || *length < 0)
      return fail("int[] needs a non-negative 'length'");
    meta.length = *length;
  }
  bool hasTensors = meta.kind == ValueKind::Tensor ||
                    meta.kind == ValueKind::TensorList ||
                    meta.kind == ValueKind::TensorTuple;
  if (!hasTensors)
    return meta;
  const llvm::json::Array *tensors = o->getArray("tensors");
  if (!tensors)
    return fail("missing 'tensors'");
  if (meta.kind == ValueKind::Tensor && tensors->size() != 1)
    return fail("a Tensor needs exactly one entry in 'tensors'");
  for (size_t i = 0; i < tensors->size(); ++i) {
    std::string at = llvm::formatv("tensors[{0}]", i);
    const llvm::json::Object *t = (*tensors)[i].getAsObject();
    if (!t)
      return fail(at + ": expected an object");
    TensorMeta tm;
    auto dtype = t->getString("dtype");
    if (!dtype)
      return fail(at + ": missing 'dtype'");
    auto parsed = parseDtype(*dtype);
    if (!parsed)
      return withContext(parsed.takeError(), where + ": " + at);
    tm.dtype = *parsed;
    auto readInts = [&](llvm::StringRef key, std::vector<int64_t> &out,
                        bool required) -> llvm::Error {
      const llvm::json::Array *a = t->getArray(key);
      if (!a)
        return required ? fail(at + ": missing '" + key + "'")
                        : llvm::Error::success();
      for (const llvm::json::Value &v : *a) {
        auto i = v.getAsInteger();
        if (!i)
          return fail(at + ": '" + key + "' must hold integers");
        out.push_back(*i);
      }
      return llvm::Error::success();
    };
    if (llvm::Error err = readInts("sizes", tm.sizes, true))
      return std::move(err);
    if (llvm::Error err = readInts("strides", tm.strides, false))
      return std::move(err);
    for (int64_t &s : tm.sizes) {
      if (s == -1 && batchSize >= 0)
        s = batchSize;
      if (s < 0)
        return fail(at + ": negative size");
    }
    if (tm.strides.empty()) {
      tm.strides.assign(tm.sizes.size(), 1);
      for (int64_t d = static_cast<int64_t>(tm.sizes.size()) - 2; d >= 0; --d)
        tm.strides[d] =
            tm.strides[d + 1] * std::max<int64_t>(tm.sizes[d + 1], 1);
    }
    if (tm.strides.size() != tm.sizes.size())
      return fail(at + ": 'strides' and 'sizes' differ in length");
    tm.requiresGrad = t->getBoolean("requires_grad").getValueOr(false);
    meta.tensors.push_back(std::move(tm));
  }
  return meta;
}

std::vector<at::Tensor> toWire(const c10::IValue &value, ValueKind kind) {
  std::vector<at::Tensor> out;
  switch (kind) {
  case ValueKind::Tensor:
    out.push_back(value.toTensor().contiguous());
    break;
  case ValueKind::TensorList:
    for (const c10::IValue &e : value.toListRef())
      out.push_back(e.toTensor().contiguous());
    break;
  case ValueKind::TensorTuple:
    for (const c10::IValue &e : value.toTupleRef().elements())
      out.push_back(e.toTensor().contiguous());
    break;
  case ValueKind::Int:
    out.push_back(at::tensor({value.toInt()}, at::kLong));
    break;
  case ValueKind::Float:
    out.push_back(at::tensor({value.toDouble()}, at::kDouble));
    break;
  case ValueKind::Bool:
    out.push_back(
        at::tensor({static_cast<int64_t>(value.toBool())}, at::kLong));
    break;
  case ValueKind::IntList: {
    auto list = value.toIntList();
    std::vector<int64_t> v(list.begin(), list.end());
    out.push_back(at::tensor(v, at::kLong));
    break;
  }
  }
  return out;
}

std::vector<at::Tensor> allocateWire(const ValueMeta &meta,
                                     c10::Device device) {
  std::vector<at::Tensor> out;
  auto opts = at::TensorOptions().device(device);
  switch (meta.kind) {
  case ValueKind::Tensor:
  case ValueKind::TensorList:
  case ValueKind::TensorTuple:
    for (const TensorMeta &t : meta.tensors)
      out.push_back(at::empty(t.sizes, opts.dtype(t.dtype)));
    break;
  case ValueKind::Int:
  case ValueKind::Bool:
    out.push_back(at::empty({1}, opts.dtype(at::kLong)));
    break;
  case ValueKind::Float:
    out.push_back(at::empty({1}, opts.dtype(at::kDouble)));
    break;
  case ValueKind::IntList:
    out.push_back(at::empty({meta.length}, opts.dtype(at::kLong)));
    break;
  }
  return out;
}

c10::IValue fromWire(std::vector<at::Tensor> wire, const ValueMeta &meta) {
  auto setGrad = [&](size_t i) {
    if (meta.tensors[i].requiresGrad &&
        at::isFloatingType(wire[i].scalar_type()))
      wire[i].requires_grad_(true);
  };
  switch (meta.kind) {
  case ValueKind::Tensor:
    setGrad(0);
    return wire[0];
  case ValueKind::TensorList: {
    c10::List<at::Tensor> list;
    for (size_t i = 0; i < wire.size(); ++i) {
      setGrad(i);
      list.push_back(wire[i]);
    }
    return list;
  }
  case ValueKind::TensorTuple: {
    std::vector<c10::IValue> elems;
    for (size_t i = 0; i < wire.size(); ++i) {
      setGrad(i);
      elems.emplace_back(wire[i]);
    }
    return c10::ivalue::Tuple::create(std::move(elems));
  }
  case ValueKind::Int:
    return wire[0].cpu().item<int64_t>();
  case ValueKind::Bool:
    return wire[0].cpu().item<int64_t>() != 0;
  case ValueKind::Float:
    return wire[0].cpu().item<double>();
  case ValueKind::IntList: {
    at::Tensor t = wire[0].cpu();
    std::vector<int64_t> v(t.data_ptr<int64_t>(),
                           t.data_ptr<int64_t>() + t.numel());
    return c10::List<int64_t>(v);
  }
  }
  return {};
}

} // namespace ppc
