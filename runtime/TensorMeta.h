//===- runtime/TensorMeta.h - Metadata of boundary values -------*- C++ -*-===//
//
// The shape metadata the runtime infers, sends, caches and checks. A
// ValueMeta describes one boundary value: its kind and, for tensors, dtype,
// sizes, strides and requires_grad. Metadata travels between ranks as a
// fixed-layout int64 header (docs/runtime.md, "Metadata header"): no pickled
// objects and no tensor data, so any language can read it.
//
// Values travel as "wire tensors": a Tensor as itself (made contiguous), a
// list or tuple as its elements in order, an int/float/bool as a one-element
// int64/float64/bool tensor, an int[] as one int64 tensor. Wire tensors
// with no elements are not sent; both sides know them from the metadata.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TENSORMETA_H
#define PPC_RUNTIME_TENSORMETA_H

#include "lib/Manifest.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ppc {

struct TensorMeta {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  bool requiresGrad = false;

  static TensorMeta of(const at::Tensor &t);
  bool operator==(const TensorMeta &o) const {
    return dtype == o.dtype && sizes == o.sizes && strides == o.strides &&
           requiresGrad == o.requiresGrad;
  }
  /// "float32[2,64]".
  std::string str() const;
};

struct ValueMeta {
  ValueKind kind = ValueKind::Tensor;
  /// One for Tensor, the elements of a list/tuple, none for scalars/int[].
  std::vector<TensorMeta> tensors;
  /// The length of an int[].
  int64_t length = 0;

  /// The metadata of `value`, which must have kind `kind` (hasKind()).
  static ValueMeta of(const c10::IValue &value, ValueKind kind);
  bool operator==(const ValueMeta &o) const {
    return kind == o.kind && tensors == o.tensors && length == o.length;
  }
  bool operator!=(const ValueMeta &o) const { return !(*this == o); }
  /// "float32[2,64]", "(float32[2],int64[3])", "int", "int[3]".
  std::string str() const;
};

/// The metadata of all values one rank knows for one microbatch signature:
/// (stage, output) -> metadata.
using MetaTable = std::map<std::pair<int, int>, ValueMeta>;

/// dtype spellings: "float32", "int64", "bool", ... Errors on unknown names.
std::string dtypeName(c10::ScalarType dtype);
llvm::Expected<c10::ScalarType> parseDtype(llvm::StringRef name);

/// Checks `value` against `meta`. Errors (prefixed with `what`, e.g.
/// "stage 2 input 'x'"): "expected float32[2,64], got float32[2,63]".
/// Strides are not compared: values are handed over contiguous.
llvm::Error checkValue(const c10::IValue &value, const ValueMeta &meta,
                       const llvm::Twine &what);

/// Appends one value's record to a header (docs/runtime.md).
void encodeMeta(const ValueMeta &meta, std::vector<int64_t> &out);
/// Decodes one record starting at `pos`, advancing it. Errors: a truncated
/// or malformed record ("metadata header: ...").
llvm::Expected<ValueMeta> decodeMeta(llvm::ArrayRef<int64_t> words,
                                     size_t &pos);

/// A whole header for the values on one edge producer -> consumer.
std::vector<int64_t> encodeHeader(int producer, int consumer, int microbatch,
                                  llvm::ArrayRef<ValueMeta> values);
/// Decodes a header and checks it is the one expected (magic, version, the
/// edge, the microbatch and the value count). Errors: "metadata header
/// from stage 1 to stage 2: ...".
llvm::Expected<std::vector<ValueMeta>>
decodeHeader(llvm::ArrayRef<int64_t> words, int producer, int consumer,
             int microbatch, size_t valueCount);

llvm::json::Value metaToJSON(const ValueMeta &meta);
/// Errors name `where` ("meta cache: entries[0].values[2]: ...").
/// `batchSize`, when non-negative, replaces sizes of -1 (user-given
/// metadata may leave the microbatch dimension open).
llvm::Expected<ValueMeta> metaFromJSON(const llvm::json::Value &json,
                                       const llvm::Twine &where,
                                       int64_t batchSize = -1);

/// The tensors that carry `value` between ranks (see the file comment).
std::vector<at::Tensor> toWire(const c10::IValue &value, ValueKind kind);
/// Empty receive buffers for a value with metadata `meta`, on `device`.
std::vector<at::Tensor> allocateWire(const ValueMeta &meta, c10::Device device);
/// Rebuilds a value from its received wire tensors.
c10::IValue fromWire(std::vector<at::Tensor> wire, const ValueMeta &meta);

} // namespace ppc

#endif // PPC_RUNTIME_TENSORMETA_H
