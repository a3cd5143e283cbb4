//===- runtime/exec/WirePack.h - An edge's wire tensors as one message ----===//
//
// Coalescing: the wire tensors (runtime/exec/TensorMeta.h) of all the values
// one edge carries in one microbatch, or of all the gradients it carries back,
// cross as one message instead of one message each. Both sides derive the
// same layout from what both already know (the wire tensors' dtypes and
// sizes, from the values' metadata), so nothing but the payload crosses:
//   - no non-empty wire tensor: no message;
//   - one: that tensor itself, as before (no packing copy);
//   - two or more: one uint8 buffer on the payloads' device, each tensor at
//     the next offset that is a multiple of kPackAlignment bytes (so every
//     dtype's view is aligned), in order. The sender copies each tensor
//     into its slice; the receiver receives the buffer and its wire tensors
//     are carved out of it in place (they share its storage, each with its
//     own version counter, so a consumer that writes one in place changes
//     only its own bytes).
// Empty wire tensors never cross; both sides allocate them alone.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_WIREPACK_H
#define PPC_RUNTIME_EXEC_WIREPACK_H

#include "runtime/exec/TensorMeta.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ppc {

/// Where packed wire tensors start: a multiple of every element size and of
/// a cache line.
constexpr int64_t kPackAlignment = 64;

/// Where each wire tensor lies in a packed message.
struct PackLayout {
  /// Per wire tensor, its byte offset, or -1 for an empty one (not sent).
  std::vector<int64_t> offsets;
  /// The packed buffer's size in bytes.
  int64_t bytes = 0;
  /// Wire tensors with elements.
  int nonEmpty = 0;
};

/// The layout of a message carrying `shapes`. Errors: the sizes overflow
/// ("... needs more than 2^63 bytes"); `shapes` come from validated
/// metadata, each value below kMaxValueBytes.
llvm::Expected<PackLayout> packLayout(llvm::ArrayRef<WireShape> shapes,
                                      const llvm::Twine &what);

/// One message's tensors: `wire`, every wire tensor in order (on the
/// receiving side, views of `crossing` where packed), and `crossing`, what
/// goes over the transport: nothing, one wire tensor itself, or the packed
/// buffer.
struct WireMessage {
  std::vector<at::Tensor> wire;
  std::vector<at::Tensor> crossing;
};

/// The tensors to send for `wire` (contiguous, on `device`): with `coalesce`
/// the layout above; without, each non-empty wire tensor as its own message
/// (for measurement: PPC_COALESCE=0, docs/runtime.md). Errors: "cannot
/// prepare WHAT: ..." (the buffer's allocation or a copy).
llvm::Expected<std::vector<at::Tensor>>
packMessage(llvm::ArrayRef<at::Tensor> wire, c10::Device device, bool coalesce,
            const llvm::Twine &what);

/// Receive buffers on `device` for a message carrying `shapes` (laid out as
/// packMessage() lays them out with the same `coalesce`). Errors: "cannot
/// allocate WHAT: ...".
llvm::Expected<WireMessage> allocateMessage(llvm::ArrayRef<WireShape> shapes,
                                            c10::Device device, bool coalesce,
                                            const llvm::Twine &what);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_WIREPACK_H
