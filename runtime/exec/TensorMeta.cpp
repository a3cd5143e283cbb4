//===- runtime/exec/TensorMeta.cpp - Metadata of boundary values ----------===//
//
// This file implements metadata capture, comparison and validation, the
// int64 header codec, the JSON form used by the meta cache and user meta
// files, and the mapping between values and the tensors that carry them.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/TensorMeta.h"

#include "lib/Error.h"
#include "lib/Stage.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <ATen/ATen.h>

namespace ppc {

namespace {
constexpr int64_t kHeaderMagic = 0x7070634d; // "ppcM"
constexpr int64_t kHeaderVersion = 1;

std::string intsStr(llvm::ArrayRef<int64_t> ints) {
  return "[" +
         llvm::join(
             llvm::map_range(ints, [](int64_t i) { return std::to_string(i); }),
             ",") +
         "]";
}
} // namespace

std::optional<c10::ScalarType> parseDtype(llvm::StringRef name) {
  using T = c10::ScalarType;
  return llvm::StringSwitch<std::optional<T>>(name)
#define PPC_DTYPE(Name, Type) .Case(Name, T::Type)
#include "lib/DTypes.def"
      .Default(std::nullopt);
}

/// The spelling of an allowed dtype; empty for any other.
static llvm::StringRef allowedDtypeName(c10::ScalarType dtype) {
  switch (dtype) {
#define PPC_DTYPE(Name, Type)                                                  \
  case c10::ScalarType::Type:                                                  \
    return Name;
#include "lib/DTypes.def"
  default:
    return "";
  }
}

bool isAllowedDtype(c10::ScalarType dtype) {
  return !allowedDtypeName(dtype).empty();
}

std::string dtypeName(c10::ScalarType dtype) {
  llvm::StringRef name = allowedDtypeName(dtype);
  return name.empty() ? std::string(c10::toString(dtype)) : name.str();
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
  return dtypeName(dtype) + intsStr(sizes);
}

ValueMeta ValueMeta::of(const c10::IValue &value, ValueKind kind) {
  ValueMeta m;
  m.kind = kind;
  forEachTensor(value, kind, [&](const at::Tensor &t) {
    m.tensors.push_back(TensorMeta::of(t));
  });
  if (kind == ValueKind::IntList)
    m.length = static_cast<int64_t>(value.toIntList().size());
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

char MetaMismatchError::ID;

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

/// Checks one tensor's metadata; `bytes` accumulates the value's bytes.
static llvm::Error validateTensor(const TensorMeta &t, int64_t &bytes) {
  if (!isAllowedDtype(t.dtype))
    return makeError(llvm::formatv("dtype {0} is not one ppc carries",
                                   static_cast<int64_t>(t.dtype))
                         .str());
  int64_t ndim = static_cast<int64_t>(t.sizes.size());
  if (ndim > kMaxMetaNdim)
    return makeError(llvm::formatv("{0} dimensions exceed the limit of {1}",
                                   ndim, kMaxMetaNdim)
                         .str());
  for (int64_t s : t.sizes)
    if (s < 0)
      return makeError(
          llvm::formatv("negative size {0} in {1}", s, t.str()).str());
  if (t.strides.size() != t.sizes.size())
    return makeError("strides " + intsStr(t.strides) + " do not match sizes " +
                     intsStr(t.sizes));
  for (int64_t s : t.strides)
    if (s < 0)
      return makeError("negative stride in " + t.str() + " (strides " +
                       intsStr(t.strides) + ")");
  // Elements and bytes with overflow checks: sizes from a peer or a file
  // must not wrap around into a small (or negative) allocation.
  // A zero size makes the tensor empty, but LibTorch still multiplies all
  // sizes (and the element size) when it allocates, so the product of the
  // other sizes must not overflow either (fuzz_meta_header found
  // [1,4294967296000000003,1099511902653906944,0]).
  const bool empty = llvm::is_contained(t.sizes, 0);
  int64_t product = static_cast<int64_t>(c10::elementSize(t.dtype));
  bool overflow = false;
  for (int64_t s : t.sizes)
    if (s != 0)
      overflow |= static_cast<bool>(llvm::MulOverflow(product, s, product));
  if (overflow && empty)
    return makeError(t.str() + " has sizes whose product overflows");
  int64_t tensorBytes = empty ? 0 : product;
  if (overflow || llvm::AddOverflow(bytes, tensorBytes, bytes) ||
      bytes > kMaxValueBytes)
    return makeError(t.str() + " needs more than 64 GiB");
  return llvm::Error::success();
}

llvm::Error validateMeta(const ValueMeta &meta) {
  int64_t count = static_cast<int64_t>(meta.tensors.size());
  if (!isTensorKind(meta.kind) && count != 0)
    return makeError(llvm::formatv("a {0} record with {1} tensors",
                                   kindName(meta.kind), count)
                         .str());
  if (meta.kind == ValueKind::Tensor && count != 1)
    return makeError(
        llvm::formatv("a Tensor record with {0} tensors", count).str());
  if (count > kMaxValueTensors)
    return makeError(llvm::formatv("{0} tensors in one value exceed the "
                                   "limit of {1}",
                                   count, kMaxValueTensors)
                         .str());
  if (meta.length < 0 || meta.length > kMaxIntListLength ||
      (meta.kind != ValueKind::IntList && meta.length != 0))
    return makeError(llvm::formatv("an int[] length of {0} (at most {1})",
                                   meta.length, kMaxIntListLength)
                         .str());
  int64_t bytes = 0;
  for (const TensorMeta &t : meta.tensors)
    if (llvm::Error err = validateTensor(t, bytes))
      return err;
  return llvm::Error::success();
}

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

namespace {
/// Reads words of a header, never past its end.
struct WordReader {
  llvm::ArrayRef<int64_t> words;
  size_t &pos;

  bool take(int64_t &out) {
    if (pos >= words.size())
      return false;
    out = words[pos++];
    return true;
  }
  /// Takes `n` words into `out`; `n` was bounded by the caller.
  bool take(int64_t n, std::vector<int64_t> &out) {
    if (n < 0 || static_cast<uint64_t>(n) > words.size() - pos)
      return false;
    out.assign(words.begin() + pos, words.begin() + pos + n);
    pos += n;
    return true;
  }
};

llvm::Error truncatedRecord() {
  return makeError("metadata header: truncated record");
}

/// One tensor entry of a record: dtype, requires_grad, ndim, sizes, strides.
llvm::Expected<TensorMeta> decodeTensor(WordReader &in) {
  int64_t dtype, grad, ndim;
  if (!in.take(dtype) || !in.take(grad) || !in.take(ndim))
    return truncatedRecord();
  if (dtype < 0 || dtype >= static_cast<int64_t>(c10::ScalarType::NumOptions) ||
      !isAllowedDtype(static_cast<c10::ScalarType>(dtype)))
    return makeError(
        llvm::formatv("metadata header: unknown dtype {0}", dtype).str());
  if (ndim < 0 || ndim > kMaxMetaNdim)
    return makeError(
        llvm::formatv("metadata header: bad rank {0}", ndim).str());
  TensorMeta t;
  t.dtype = static_cast<c10::ScalarType>(dtype);
  t.requiresGrad = grad != 0;
  if (!in.take(ndim, t.sizes) || !in.take(ndim, t.strides))
    return truncatedRecord();
  return t;
}
} // namespace

llvm::Expected<ValueMeta> decodeMeta(llvm::ArrayRef<int64_t> words,
                                     size_t &pos) {
  WordReader in{words, pos};
  int64_t kind, count;
  if (!in.take(kind) || !in.take(count))
    return truncatedRecord();
  if (kind < 0 || kind > kindCode(ValueKind::IntList))
    return makeError(
        llvm::formatv("metadata header: unknown kind {0}", kind).str());
  if (count < 0)
    return makeError(
        llvm::formatv("metadata header: negative count {0}", count).str());
  ValueMeta meta;
  meta.kind = static_cast<ValueKind>(kind);
  if (meta.kind == ValueKind::IntList)
    meta.length = count;
  else if (isTensorKind(meta.kind)) {
    // Bound the count before reserving anything for it.
    if (count > kMaxValueTensors)
      return makeError(llvm::formatv("metadata header: {0} tensors in one "
                                     "value exceed the limit of {1}",
                                     count, kMaxValueTensors)
                           .str());
    for (int64_t i = 0; i < count; ++i) {
      auto t = decodeTensor(in);
      if (!t)
        return t.takeError();
      meta.tensors.push_back(std::move(*t));
    }
  } else if (count != 0)
    return makeError(llvm::formatv("metadata header: a {0} record with count "
                                   "{1}",
                                   kindName(meta.kind), count)
                         .str());
  if (llvm::Error err = validateMeta(meta))
    return withContext(std::move(err), "metadata header");
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
  // A tensor kind always writes "tensors" (the reader requires it), even
  // for an empty Tensor[].
  if (isTensorKind(meta.kind)) {
    llvm::json::Array tensors;
    for (const TensorMeta &t : meta.tensors)
      tensors.push_back(llvm::json::Object{{"dtype", dtypeName(t.dtype)},
                                           {"sizes", t.sizes},
                                           {"strides", t.strides},
                                           {"requires_grad", t.requiresGrad}});
    o["tensors"] = std::move(tensors);
  }
  return o;
}

bool fromJSON(const llvm::json::Value &json, TensorMeta &out,
              llvm::json::Path path) {
  llvm::json::ObjectMapper o(json, path);
  std::string dtype;
  if (!o || !o.map("dtype", dtype) || !o.map("sizes", out.sizes) ||
      !o.mapOptional("strides", out.strides) ||
      !o.mapOptional("requires_grad", out.requiresGrad))
    return false;
  std::optional<c10::ScalarType> parsed = parseDtype(dtype);
  if (!parsed) {
    path.field("dtype").report("unknown dtype (ppc carries uint8, int8, "
                               "int16, int32, int64, float16, float32, "
                               "float64, complex64, complex128, bool and "
                               "bfloat16)");
    return false;
  }
  out.dtype = *parsed;
  // Bound what the JSON may make us hold before resolveMeta() looks closer.
  if (static_cast<int64_t>(out.sizes.size()) > kMaxMetaNdim) {
    path.field("sizes").report("too many dimensions (at most 64)");
    return false;
  }
  return true;
}

bool fromJSON(const llvm::json::Value &json, ValueMeta &out,
              llvm::json::Path path) {
  llvm::json::ObjectMapper o(json, path);
  std::string kind;
  if (!o || !o.map("kind", kind))
    return false;
  std::optional<ValueKind> parsed = parseKind(kind);
  if (!parsed) {
    path.field("kind").report("unknown kind (expected Tensor, Tensor[], "
                              "Tuple[Tensor], int, float, bool or int[])");
    return false;
  }
  out.kind = *parsed;
  if (out.kind == ValueKind::IntList && !o.map("length", out.length))
    return false;
  if (!isTensorKind(out.kind))
    return true;
  const llvm::json::Array *tensors = json.getAsObject()->getArray("tensors");
  if (tensors && static_cast<int64_t>(tensors->size()) > kMaxValueTensors) {
    path.field("tensors").report("too many tensors in one value (at most "
                                 "4096)");
    return false;
  }
  return o.map("tensors", out.tensors);
}

llvm::Error resolveMeta(ValueMeta &meta, int64_t batchSize) {
  for (TensorMeta &t : meta.tensors) {
    if (batchSize >= 0)
      std::replace(t.sizes.begin(), t.sizes.end(), int64_t(-1), batchSize);
    if (t.strides.empty() && !t.sizes.empty() &&
        llvm::none_of(t.sizes, [](int64_t s) { return s < 0; })) {
      t.strides.assign(t.sizes.size(), 1);
      for (size_t d = t.sizes.size() - 1; d > 0; --d)
        if (llvm::MulOverflow(t.strides[d], std::max<int64_t>(t.sizes[d], 1),
                              t.strides[d - 1]))
          return makeError(t.str() + " needs more than 64 GiB");
    }
  }
  return validateMeta(meta);
}

llvm::Expected<ValueMeta> metaFromJSON(const llvm::json::Value &json,
                                       const llvm::Twine &where,
                                       int64_t batchSize) {
  auto meta = readJSON<ValueMeta>(json, "meta");
  if (!meta)
    return withContext(meta.takeError(), where);
  if (llvm::Error err = resolveMeta(*meta, batchSize))
    return withContext(std::move(err), where);
  return meta;
}

llvm::Expected<std::vector<at::Tensor>> toWire(const c10::IValue &value,
                                               ValueKind kind,
                                               c10::Device device,
                                               const llvm::Twine &what) {
  return torchCall("cannot prepare " + what, [&] {
    std::vector<at::Tensor> out;
    switch (kind) {
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
    case ValueKind::IntList:
      out.push_back(at::tensor(value.toIntList().vec(), at::kLong));
      break;
    default:
      out = tensorsOf(value, kind);
      for (at::Tensor &t : out)
        t = t.contiguous();
    }
    for (at::Tensor &t : out)
      t = t.to(device);
    return out;
  });
}

std::vector<WireShape> wireShapes(const ValueMeta &meta) {
  switch (meta.kind) {
  case ValueKind::Int:
  case ValueKind::Bool:
    return {{at::kLong, {1}}};
  case ValueKind::Float:
    return {{at::kDouble, {1}}};
  case ValueKind::IntList:
    return {{at::kLong, {meta.length}}};
  default:
    break;
  }
  std::vector<WireShape> out;
  for (const TensorMeta &t : meta.tensors)
    out.push_back({t.dtype, t.sizes});
  return out;
}

llvm::Expected<std::vector<at::Tensor>> allocateWire(const ValueMeta &meta,
                                                     c10::Device device,
                                                     const llvm::Twine &what) {
  return torchCall("cannot allocate " + what, [&] {
    std::vector<at::Tensor> out;
    auto opts = at::TensorOptions().device(device);
    for (const WireShape &shape : wireShapes(meta))
      out.push_back(at::empty(shape.sizes, opts.dtype(shape.dtype)));
    return out;
  });
}

llvm::Expected<c10::IValue> fromWire(std::vector<at::Tensor> wire,
                                     const ValueMeta &meta,
                                     const llvm::Twine &what) {
  return torchCall("cannot read " + what, [&]() -> c10::IValue {
    switch (meta.kind) {
    case ValueKind::Int:
      return wire.at(0).cpu().item<int64_t>();
    case ValueKind::Bool:
      return wire.at(0).cpu().item<int64_t>() != 0;
    case ValueKind::Float:
      return wire.at(0).cpu().item<double>();
    case ValueKind::IntList: {
      at::Tensor t = wire.at(0).cpu();
      return c10::List<int64_t>(std::vector<int64_t>(
          t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()));
    }
    default:
      for (size_t i = 0; i < wire.size(); ++i)
        if (meta.tensors.at(i).requiresGrad &&
            at::isFloatingType(wire[i].scalar_type()))
          wire[i].requires_grad_(true);
      return valueOfTensors(meta.kind, std::move(wire));
    }
  });
}

} // namespace ppc
