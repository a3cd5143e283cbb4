//===- runtime/link/Collectives.h -----------------------------------------===//
//
// Collectives from point-to-point messages.
//
// The small collectives the pipeline and the trainer need, built on a
// Transport's point-to-point messages. They deliberately avoid Gloo's own
// collectives: a collective that fails cannot say which rank it lost, a
// point-to-point message can, so every failure here is the LostRankError of
// the message that failed. Every rank of the job (or of the all-reduce's
// set) must call the same collective with the same arguments, in the same
// order: the messages are matched by their order on their channel.
//
// agreeMin, broadcastBytes, gatherBytes and barrier use channel 0; the
// all-reduce of tied gradients takes a channel of its own
// (allReduceChannel(), runtime/schedule/Schedule.h).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_COLLECTIVES_H
#define PPC_RUNTIME_LINK_COLLECTIVES_H

#include "runtime/link/Transport.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ppc {

/// Every rank passes `values` (same length on all ranks); every rank gets
/// the element-wise minimum, through rank 0. Errors: LostRankError.
llvm::Error agreeMin(Transport &transport, std::vector<int64_t> &values);

/// Rank `root` sends `bytes` to every other rank, which receive them into
/// `bytes`. At most 64 MiB; `what` names the bytes in errors. Without
/// `waitForSends` the root returns once its sends have started (a later
/// flushSends() waits for them), so that it is not held until every peer
/// has posted its receive, which is when Gloo completes a send. Errors:
/// LostRankError, bytes over the limit, a peer announcing more than the
/// limit.
llvm::Error broadcastBytes(Transport &transport, std::string &bytes, int root,
                           const std::string &what, bool waitForSends = true);

/// Every rank sends `bytes` to rank `root`, which receives all of them in
/// `gathered` (indexed by rank, its own included); other ranks leave
/// `gathered` alone. Limits and errors as broadcastBytes().
llvm::Error gatherBytes(Transport &transport, const std::string &bytes,
                        int root, std::vector<std::string> &gathered,
                        const std::string &what);

/// Returns once every rank has called it. Errors: LostRankError.
llvm::Error barrier(Transport &transport);

/// Every rank of `ranks` (sorted, this rank among them) passes `tensor`;
/// each gets the sum in `tensor`, the very same tensor on all of them: the
/// lowest rank adds the others' tensors in rank order and sends the total
/// back, on `channel`. The lowest rank's sends may still be in flight on
/// return: flushSends() waits for them. Errors: LostRankError.
llvm::Error allReduceSum(Transport &transport, at::Tensor &tensor,
                         const std::vector<int> &ranks, int channel,
                         const llvm::Twine &what);

} // namespace ppc

#endif // PPC_RUNTIME_LINK_COLLECTIVES_H
