//===- runtime/link/Link.h - One way of moving tensors between ranks ------===//
//
// A link moves tensors between two ranks of a job: Gloo over TCP, NCCL
// between GPUs, or an in-process hub for tests (Links.def lists them). Only
// runtime/link/Transport.cpp talks to links; it picks one per message
// (Transport.h says how) and gives every message its address:
//   - `peer`: the rank on the other side;
//   - `channel`: the ordered stream the message belongs to. Messages of one
//     (peer, channel) are delivered in the order they were sent;
//   - `tag`: unique per (sender, receiver, channel, sequence number),
//     computed by the transport. A link matching by tag (Gloo, loopback)
//     matches on it; a link matching by order (NCCL) may ignore it.
//
// Contract of every link:
//   - send() starts a send and may return before it completes; the link
//     keeps the tensor alive (it shares its storage) until then, and the
//     caller must not modify it until flushSends() returns.
//   - recv() blocks until the message has arrived in the caller's tensor
//     (contiguous, preallocated with the sender's size and dtype) or the
//     link's timeout passes.
//   - postRecv() is a hint: it may start a receive early, to be finished by
//     the recv() of the same address with the same tensor; a link may ignore
//     it and receive in recv() instead.
//   - connect() sets up, before the first message, what the link needs for
//     the given routes; every rank passes the same list in the same order.
//   - Every failure to hear from or reach a peer within the timeout is a
//     LostRankError naming that peer (see lostRank()); nothing a link does
//     throws.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_LINK_H
#define PPC_RUNTIME_LINK_LINK_H

#include "lib/Error.h"
#include "runtime/link/Transport.h"
#include "runtime/platform/DeviceKind.h"
#include "runtime/platform/TorchCompat.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace ppc {

class LoopbackHub;

/// A peer that did not answer within the timeout, or whose connection
/// failed. Its message reads "lost rank R (...)".
class LostRankError : public llvm::ErrorInfo<LostRankError, TypedError> {
public:
  static char ID;
  LostRankError(int rank, std::string message, bool timedOut = false)
      : rank_(rank), message_(std::move(message)), timedOut_(timedOut) {}
  /// The rank that was lost.
  int rank() const { return rank_; }
  /// Whether the rank sent nothing within the timeout (lostRankTimedOut()),
  /// rather than failing or exiting.
  bool timedOut() const { return timedOut_; }
  std::string describe() const override { return message_; }

private:
  int rank_;
  std::string message_;
  bool timedOut_;
};

/// The one constructor of LostRankError messages: "lost rank R (DETAIL)".
llvm::Error lostRank(int rank, const llvm::Twine &detail);

/// A peer that sent nothing within `timeout` while this rank waited for
/// `what`.
llvm::Error lostRankTimedOut(int peer, std::chrono::milliseconds timeout,
                             const llvm::Twine &what);

/// A LibTorch exception raised while talking to `peer`, as a lost rank:
/// a timeout, or the cause (its first line, without Gloo's source prefix).
llvm::Error lostRankFrom(int peer, std::chrono::milliseconds timeout,
                         const llvm::Twine &what, const std::exception &e);

/// Runs `fn` and turns an exception into a LostRankError for `peer`.
template <typename Fn>
llvm::Error guardPeer(int peer, std::chrono::milliseconds timeout,
                      const llvm::Twine &what, Fn &&fn) {
  try {
    fn();
    return llvm::Error::success();
  } catch (const std::exception &e) {
    return lostRankFrom(peer, timeout, what, e);
  }
}

/// "3" or "2.5": a timeout in seconds, as errors print it.
std::string secondsText(std::chrono::milliseconds timeout);

/// Where a message goes: see the file comment.
struct Message {
  int peer = 0;
  int channel = 0;
  int tag = 0;
};

/// Which link carries CPU tensors between ranks (RunOptions::link): auto
/// (shared memory to co-located peers, Gloo to the others), or one of the
/// policies of Links.def: gloo (never shared memory) or shm (every peer must
/// be co-located).
enum class LinkPolicy {
  Auto,
#define PPC_LINK_POLICY(ENUMERATOR, NAME, HELP) ENUMERATOR,
#include "runtime/link/Links.def"
};

/// The policy named `name` (one of linkPolicyNames()), or none.
std::optional<LinkPolicy> linkPolicyNamed(llvm::StringRef name);
/// "auto", or the policy's link name in Links.def.
llvm::StringRef linkPolicyName(LinkPolicy policy);
/// Every policy's name, auto first, then in Links.def order: the choices
/// of --link and PPC_LINK.
std::vector<std::string> linkPolicyNames();
/// The names as an English list, "auto, gloo or shm" (errors).
std::string linkPolicyList();
/// Each name with its help, "auto (...), gloo (...) or shm (...)" (--link's
/// help).
std::string linkPolicyHelp();

/// What a link's factory may build on; each factory takes what it needs and
/// declines (returns no link) when its part is missing.
struct LinkSetup {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  std::chrono::milliseconds timeout{60000};
  /// The device this rank computes on.
  DeviceKind device = DeviceKind::CPU;
  /// The rendezvous store (absent in-process).
  c10::intrusive_ptr<c10d::Store> store;
  /// The Gloo group connected through the store (absent in-process).
  c10::intrusive_ptr<compat::GlooGroup> glooGroup;
  /// The in-process hub of ranks running as threads (tests).
  std::shared_ptr<LoopbackHub> loopback;
  /// Which links may carry CPU tensors (the shared-memory link's factory
  /// reads it).
  LinkPolicy link = LinkPolicy::Auto;
  /// Replaces this rank's host identity in the shared-memory link's
  /// co-location test (LaunchEnv::hostId, PPC_HOST_ID); empty: the
  /// machine's own.
  std::string hostId;
  /// The job's rank of each of the transport's ranks, when the transport
  /// connects a group of the job (runtime/link/Rendezvous.h, RankGroup): the
  /// transport's errors name those. Empty: ranks are the job's.
  std::vector<int> globalRanks;
};

class Link {
public:
  virtual ~Link() = default;

  /// Whether this link carries `tensor` to or from `peer`. Only asked of
  /// payload links (Links.def); the control link carries everything else.
  virtual bool carries(const at::Tensor &tensor, int peer) const = 0;

  /// Starts sending `tensor` (contiguous) as message `m`.
  virtual llvm::Error send(const at::Tensor &tensor, const Message &m,
                           const llvm::Twine &what) = 0;

  /// Starts receiving message `m` into `tensor` early (a hint).
  virtual llvm::Error postRecv(const at::Tensor &tensor, const Message &m,
                               const llvm::Twine &what) {
    return llvm::Error::success();
  }

  /// Receives message `m` into `tensor`, finishing a posted receive of `m`.
  virtual llvm::Error recv(at::Tensor &tensor, const Message &m,
                           const llvm::Twine &what) = 0;

  /// Waits until `deadline` for every send started so far.
  virtual llvm::Error
  flushSends(std::chrono::steady_clock::time_point deadline) = 0;

  /// Connects what `routes` need before their first message.
  virtual llvm::Error connect(const std::vector<Transport::Route> &routes) {
    return llvm::Error::success();
  }

  /// The job has failed (a link reported an error): the destructor, which
  /// follows, must not wait for anything a peer would do, such as taking
  /// the last messages.
  virtual void abandon() {}
};

/// The factories of Links.def, each in its link's file.
#define PPC_LINK(NAME, ROLE, FACTORY)                                          \
  llvm::Expected<std::unique_ptr<Link>> FACTORY(const LinkSetup &setup);
#include "runtime/link/Links.def"

} // namespace ppc

#endif // PPC_RUNTIME_LINK_LINK_H
