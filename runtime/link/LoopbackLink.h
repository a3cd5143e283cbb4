//===- runtime/link/LoopbackLink.h - Ranks as threads of one process ------===//
//
// The loopback link connects ranks that run as threads of one process,
// through a LoopbackHub they share: a send copies the tensor into the hub
// (so it completes at once), a receive waits for its message up to the
// timeout. It lets unit tests run the executor, the collectives and the
// trainer on 2-4 ranks in milliseconds, and count exactly what crossed.
//
// A test makes one hub for the job and gives it to every rank's transport
// (LinkSetup::loopback, Transport::create()). A rank whose transport is
// destroyed, or that the test closes, is gone: its peers' receives of
// messages it never sent, and their sends to it, fail at once with a
// LostRankError naming it, as a closed connection does on Gloo.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_LOOPBACKLINK_H
#define PPC_RUNTIME_LINK_LOOPBACKLINK_H

#include "runtime/link/Link.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace ppc {

class LoopbackHub {
public:
  explicit LoopbackHub(int worldSize);

  int worldSize() const { return static_cast<int>(closed_.size()); }

  /// Marks `rank` gone (see the file comment).
  void close(int rank);

  /// Messages `rank` has sent through the hub so far.
  int64_t messagesFrom(int rank) const;

  /// Copies `tensor` into the hub as message `m` from `from`. Errors:
  /// LostRankError when the receiver is gone.
  llvm::Error deliver(int from, const Message &m, const at::Tensor &tensor,
                      const llvm::Twine &what);

  /// Moves message `m` for `to` into `tensor` (same dtype and number of
  /// elements), waiting up to `timeout`. Errors: LostRankError when the
  /// sender is gone or silent; a message of another dtype or size.
  llvm::Error take(int to, const Message &m, at::Tensor &tensor,
                   std::chrono::milliseconds timeout, const llvm::Twine &what);

private:
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  /// Messages not yet received, by (sender, receiver, tag).
  std::map<std::tuple<int, int, int>, at::Tensor> mail_;
  std::vector<bool> closed_;
  std::vector<int64_t> sent_;
};

} // namespace ppc

#endif // PPC_RUNTIME_LINK_LOOPBACKLINK_H
