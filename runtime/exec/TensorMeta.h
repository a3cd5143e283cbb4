//===- runtime/exec/TensorMeta.h - Metadata of boundary values --*- C++ -*-===//
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
// Metadata comes from outside (a peer's header, a meta cache file, a user
// meta file), so every decoder validates it before anything is allocated
// from it: allowed dtypes only, bounded ndim, sizes >= 0, element counts and
// bytes computed with overflow checks and capped, strides of the right
// length and non-negative, bounded element counts for lists and int[]s
// (docs/runtime.md, "Trust model").
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_TENSORMETA_H
#define PPC_RUNTIME_EXEC_TENSORMETA_H

#include "lib/Error.h"
#include "lib/Manifest.h"
#include "lib/ValueWalk.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ppc {

/// Caps on metadata read from outside (docs/runtime.md, "Trust model").
/// Dimensions of one tensor.
constexpr int64_t kMaxMetaNdim = 64;
/// Bytes of one value (all its tensors together): 64 GiB.
constexpr int64_t kMaxValueBytes = int64_t(1) << 36;
/// Tensors in one Tensor[] or Tuple[Tensor] value.
constexpr int64_t kMaxValueTensors = 4096;
/// Elements of one int[] value.
constexpr int64_t kMaxIntListLength = int64_t(1) << 20;

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

/// The dtypes ppc carries between ranks, by name: those of lib/DTypes.def
/// ("float32", "int64", "bfloat16", ...). Other dtypes are refused wherever
/// metadata is read.
std::optional<c10::ScalarType> parseDtype(llvm::StringRef name);
/// The name of an allowed dtype; c10's spelling for any other.
std::string dtypeName(c10::ScalarType dtype);
bool isAllowedDtype(c10::ScalarType dtype);

/// Checks metadata read from outside against the caps above. Errors: "a
/// Tensor record with 2 tensors", "dtype 7 is not one ppc carries",
/// "negative size -1 in float32[-1,4]", "float32[1000000000,1000000] needs
/// more than 64 GiB", "strides [1] do not match sizes [2,3]", "int[] of
/// length 2000000 exceeds 1048576", ...
llvm::Error validateMeta(const ValueMeta &meta);

/// Checks `value` against `meta`. Errors (prefixed with `what`, e.g.
/// "stage 2 input 'x'"): "expected float32[2,64], got float32[2,63]".
/// Strides are not compared: values are handed over contiguous.
llvm::Error checkValue(const c10::IValue &value, const ValueMeta &meta,
                       const llvm::Twine &what);

/// A value a stage produced contradicts metadata that did not come from
/// this run's own inference (a cache, the user, a peer's header): the
/// executor's error for it, so that whoever supplied the metadata can
/// react by type (MetaSettler removes a meta cache that lied).
class MetaMismatchError
    : public llvm::ErrorInfo<MetaMismatchError, TypedError> {
public:
  static char ID;
  explicit MetaMismatchError(std::string message)
      : message_(std::move(message)) {}
  std::string describe() const override { return message_; }

private:
  std::string message_;
};

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

/// The JSON form of docs/runtime.md ("meta" in caches and user files).
llvm::json::Value metaToJSON(const ValueMeta &meta);

/// The one reader of that form, for llvm::json::ObjectMapper: reads the
/// fields and reports type errors and unknown kinds and dtypes to `path`.
/// Sizes may be -1 (an open batch dimension) and strides may be left out;
/// resolveMeta() finishes and validates the result.
bool fromJSON(const llvm::json::Value &json, TensorMeta &out,
              llvm::json::Path path);
bool fromJSON(const llvm::json::Value &json, ValueMeta &out,
              llvm::json::Path path);

/// Replaces sizes of -1 by `batchSize` (when it is non-negative), fills left
/// out strides with contiguous ones, and validates (validateMeta()).
/// Errors: validateMeta's.
llvm::Error resolveMeta(ValueMeta &meta, int64_t batchSize);

/// Reads `json` into a T with fromJSON; errors say where, e.g. "expected
/// integer at entries[0].values[1].stage" with `rootName` "entries".
template <typename T>
llvm::Expected<T> readJSON(const llvm::json::Value &json,
                           llvm::StringRef rootName) {
  T out;
  llvm::json::Path::Root root(rootName);
  if (!fromJSON(json, out, root))
    return root.getError();
  return out;
}

/// readJSON + resolveMeta for one value's metadata. Errors are prefixed
/// with `where` ("meta cache 'x': entries[0].values[2].meta: ...").
llvm::Expected<ValueMeta> metaFromJSON(const llvm::json::Value &json,
                                       const llvm::Twine &where,
                                       int64_t batchSize = -1);

/// The tensors that carry `value` (of kind `kind`) between ranks, on
/// `device` (see the file comment). Errors: LibTorch fails (out of memory,
/// a device copy), "cannot prepare V: ..." with `what` naming the value.
llvm::Expected<std::vector<at::Tensor>> toWire(const c10::IValue &value,
                                               ValueKind kind,
                                               c10::Device device,
                                               const llvm::Twine &what);
/// The dtype and sizes of one wire tensor.
struct WireShape {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
};
/// The wire tensors of a value with metadata `meta` (validated), in order:
/// what allocateWire() allocates.
std::vector<WireShape> wireShapes(const ValueMeta &meta);
/// Empty receive buffers for a value with metadata `meta`, on `device`.
/// `meta` must have passed validateMeta(). Errors: the allocation fails
/// ("cannot allocate V: ...").
llvm::Expected<std::vector<at::Tensor>> allocateWire(const ValueMeta &meta,
                                                     c10::Device device,
                                                     const llvm::Twine &what);
/// Rebuilds a value from its received wire tensors. Errors: LibTorch fails
/// reading a scalar back ("cannot read V: ...").
llvm::Expected<c10::IValue> fromWire(std::vector<at::Tensor> wire,
                                     const ValueMeta &meta,
                                     const llvm::Twine &what);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_TENSORMETA_H
