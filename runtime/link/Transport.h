//===- runtime/link/Transport.h - Point-to-point messages between ranks ---===//
//
// The runtime moves tensors between ranks through this class only. A
// transport composes links (runtime/link/Link.h, listed in Links.def): one
// control link (Gloo between processes; the loopback hub between threads
// in tests) and the payload links this rank's setup provides. Each message
// goes over the first payload link that carries it (a CUDA tensor: the NCCL
// link), else over the control link. The start-up agreement, metadata
// headers, gathers and barriers are CPU tensors, so metadata never touches a
// device, and a payload goes wherever its tensor lives: both sides of a
// message must put it on the same device (the executor puts payloads on its
// plan's device, headers on the CPU).
//
// Every blocking call waits at most the transport's timeout and fails with
// a LostRankError naming the peer ("lost rank R (...)").
//
// Messages are matched by tag, and only the transport computes tags. A tag
// names a channel (channel 0: start-up agreement and collectives; channel
// e+1: boundary edge e of the schedule; one more when training, for the
// tied gradients: runtime/link/Collectives.h) and the message's sequence number
// within that channel and peer: the k-th message rank A sends to rank B on
// channel c has tag k * channelCount + c, and B's k-th receive from A on
// channel c asks for that tag. Both sides derive the order of each
// channel's messages from the same schedule (microbatch order per edge), so
// metadata and tensors can never be paired with the wrong value, and a
// disagreement is a clear timeout.
//
// Collectives built on these messages: runtime/link/Collectives.h. Meeting the
// other ranks and making a transport for a job: runtime/link/Rendezvous.h.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_TRANSPORT_H
#define PPC_RUNTIME_LINK_TRANSPORT_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace ppc {

class Link;
struct LinkSetup;

class Transport {
public:
  /// One direction of a channel: (channel, sending rank, receiving rank).
  using Route = std::tuple<int, int, int>;

  /// A transport over the links that `setup` provides (the first control
  /// link of Links.def that accepts it, and every payload link that does).
  /// Errors: a link's own; no control link accepts the setup.
  static llvm::Expected<std::unique_ptr<Transport>>
  create(const LinkSetup &setup);

  /// Closes the links, payload links first; when one has reported an error,
  /// each is told first that the job failed (Link::abandon), so that none
  /// waits for its peers. Then drops the transport's hold on the rendezvous
  /// store (LinkSetup::store), waiting at most kStoreDropBound, or the
  /// timeout when shorter: the last hold on a served store stops the
  /// server, which in LibTorch 1.13 waits for any request under way to be
  /// read whole, for ever if its client was stopped (SIGSTOP) mid-request.
  /// Past the bound the server is left to end with the process.
  ~Transport();

  static constexpr std::chrono::milliseconds kStoreDropBound{2000};

  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }
  /// The job's rank of transport rank `rank`: itself unless the transport
  /// connects a group of the job (LinkSetup::globalRanks). Every
  /// LostRankError of this transport names the job's rank.
  int globalRank(int rank) const;
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Sets the number of channels (at least 1; channel 0 is the start-up
  /// channel). Call before any message on channels above 0.
  void setChannelCount(int count) { channelCount_ = count < 1 ? 1 : count; }

  /// Starts sending `tensor` (contiguous, on the CPU or this rank's compute
  /// device) to `peer` as the next message of `channel`. The tensor is kept
  /// alive until the send completes; do not modify it before flushSends().
  /// `what` describes the message for errors. Errors: LostRankError, a tag
  /// past INT32_MAX.
  llvm::Error send(const at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what);

  /// Receives into `tensor` (contiguous, preallocated with the expected
  /// size, on the device the sender's tensor was on) the next message of
  /// `channel` from `peer`, blocking up to the timeout; when that message's
  /// receive was posted (postRecv), `tensor` must be the tensor it was
  /// posted with. Errors: LostRankError, an internal error for a tensor
  /// other than the posted one.
  llvm::Error recv(at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what);

  /// Reserves the next message of `channel` from `peer` for `tensor` (as
  /// recv() takes it) before it is needed, so that the message can arrive
  /// while this rank computes: a later recv() of the same tensor on that
  /// channel and peer takes it. Receives of one channel and peer must be
  /// posted in their message order, and recv() takes the posted ones first,
  /// in that order. Whether the receive starts early is up to the link (Gloo
  /// starts it; NCCL receives in recv()). Errors: a tag past INT32_MAX,
  /// LostRankError.
  llvm::Error postRecv(const at::Tensor &tensor, int peer, int channel,
                       const llvm::Twine &what);

  /// Waits for every send started so far, one deadline for all of them.
  /// Errors: LostRankError.
  llvm::Error flushSends();

  /// Connects, before the first message, what the `routes` need (every rank
  /// passes the same list, in the same order): each link connects the ones
  /// it needs to (NCCL: each route this rank is part of, in list order).
  /// Routes left out connect on first use. Errors: LostRankError.
  llvm::Error connectRoutes(const std::vector<Route> &routes);

  /// Number of point-to-point messages sent so far, over every link.
  int64_t messagesSent() const { return messagesSent_; }

  /// The name (Links.def) of the link that carries `tensor` to or from
  /// `peer`: "shm", "gloo", "nccl", "loopback".
  llvm::StringRef linkName(const at::Tensor &tensor, int peer) const;

  /// The links that messages sent or received so far took, payload links
  /// first, joined by '+' ("shm", "shm+gloo", "gloo"); "" before any.
  std::string linksUsed() const;

private:
  Transport(int rank, int worldSize, std::chrono::milliseconds timeout);

  /// The link that carries `tensor` to or from `peer`: the policy.
  Link &linkFor(const at::Tensor &tensor, int peer);
  /// Its index in payload_, or -1 for the control link.
  int payloadIndexFor(const at::Tensor &tensor, int peer) const;
  /// linkFor(), noting the link as used.
  Link &useLinkFor(const at::Tensor &tensor, int peer);

  /// `err`, a link's, with a LostRankError's transport rank replaced by
  /// the job's; notes that a link has failed.
  llvm::Error named(llvm::Error err);

  /// The next tag for messages to / from `peer` on `channel`.
  llvm::Expected<int> nextTag(bool sending, int peer, int channel);

  int rank_;
  int worldSize_;
  std::vector<int> globalRanks_;
  std::chrono::milliseconds timeout_;
  int64_t messagesSent_ = 0;
  int channelCount_ = 1;
  std::map<std::tuple<bool, int, int>, int64_t> sequence_;
  /// Receives posted per (peer, channel), in message order: their tag and
  /// tensor.
  struct Posted {
    int tag;
    at::Tensor tensor;
  };
  std::map<std::pair<int, int>, std::deque<Posted>> posted_;
  /// The control link, and the payload links in Links.def order. The
  /// destructor closes the payload links (NCCL's shutdown) first.
  std::unique_ptr<Link> control_;
  std::vector<std::unique_ptr<Link>> payload_;
  /// Their Links.def names, and whether a message has used each.
  const char *controlName_ = "";
  std::vector<const char *> payloadNames_;
  bool controlUsed_ = false;
  std::vector<bool> payloadUsed_;
  /// Whether a link has returned an error (named()).
  bool linkFailed_ = false;
  /// The transport's hold on LinkSetup::store (a c10d::Store, its type
  /// erased to keep c10d out of this header), dropped last.
  std::shared_ptr<const void> store_;
};

} // namespace ppc

#endif // PPC_RUNTIME_LINK_TRANSPORT_H
