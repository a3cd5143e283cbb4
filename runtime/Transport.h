//===- runtime/Transport.h - Point-to-point messages between ranks -*- C++
//-*-===//
//
// The runtime moves tensors between ranks through this interface only. The
// Gloo transport (CPU tensors) is always built. The CUDA transport
// (--device cuda, compiled when LibTorch has CUDA and NCCL: PPC_HAVE_NCCL)
// sends tensors on cuda:LOCAL_RANK over NCCL and CPU tensors over Gloo: the
// start-up agreement, metadata headers, gathers and barriers are CPU
// messages on every transport, so metadata never touches a device, and a
// payload goes wherever its tensor lives. Both sides of a message must
// therefore put it on the same device (the executor puts payloads on
// device(), headers on the CPU).
//
// Every blocking call waits at most the transport's timeout and fails with
// an error naming the peer: "lost rank 2 (timed out after 60 s waiting for
// ...)" or "lost rank 2 (Connection closed by peer ...)".
//
// Messages are matched by tag. A tag names a channel (channel 0: start-up
// agreement; channel e+1: boundary edge e of the schedule) and the message's
// sequence number within that channel and peer: the k-th message rank A
// sends to rank B on channel c has tag k * channelCount + c, and B's k-th
// receive from A on channel c asks for that tag. Both sides derive the order
// of each channel's messages from the same schedule (microbatch order per
// edge), so metadata and tensors can never be paired with the wrong value,
// and a disagreement is a clear timeout.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRANSPORT_H
#define PPC_RUNTIME_TRANSPORT_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace ppc {

struct LaunchEnv;

enum class DeviceKind { CPU, CUDA };

class Transport {
public:
  virtual ~Transport() = default;

  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// The device payload tensors (boundary values, gradients) live on:
  /// the CPU for Gloo, cuda:LOCAL_RANK for the CUDA transport. CPU tensors
  /// can be sent on any transport.
  virtual c10::Device device() const = 0;

  /// Sets the number of channels (at least 1; channel 0 is the start-up
  /// channel). Call before any message on channels above 0.
  void setChannelCount(int count) { channelCount_ = count < 1 ? 1 : count; }

  /// Starts sending `tensor` (contiguous, on device() or the CPU) to `peer` as
  /// the next message of `channel`. The tensor is kept alive until the send
  /// completes. `what` describes the message for errors. Errors: "lost
  /// rank P (...)", a tag past INT32_MAX.
  virtual llvm::Error send(const at::Tensor &tensor, int peer, int channel,
                           const llvm::Twine &what) = 0;

  /// Receives into `tensor` (contiguous, preallocated with the expected
  /// size, on the device the sender's tensor was on) the next message of
  /// `channel` from `peer`, blocking up to the timeout; when that message's
  /// receive was posted (postRecv), `tensor` must be the tensor it was
  /// posted with. Errors: "lost rank P (...)", "internal error: ..." for a
  /// tensor other than the posted one.
  virtual llvm::Error recv(at::Tensor &tensor, int peer, int channel,
                           const llvm::Twine &what) = 0;

  /// Starts receiving into `tensor` (as recv() takes it) the next message
  /// of `channel` from `peer` before it is needed, so that the message can
  /// arrive while this rank computes: a later recv() of the same tensor on
  /// that channel and peer waits for it instead of asking anew. Receives
  /// of one channel and peer must be posted in their message order, and
  /// recv() takes the posted ones first, in that order. Posting is a hint:
  /// a transport may ignore it (the default does; NCCL links do), and
  /// recv() then receives as usual. Errors: a tag past INT32_MAX, "lost
  /// rank P (...)".
  virtual llvm::Error postRecv(const at::Tensor &tensor, int peer, int channel,
                               const llvm::Twine &what) {
    return llvm::Error::success();
  }

  /// Waits for every send started so far. Errors: "lost rank P (...)".
  virtual llvm::Error flushSends() = 0;

  /// One direction of a channel: (channel, sending rank, receiving rank).
  using Link = std::tuple<int, int, int>;

  /// Connects, before the first message, what the `links` need (every rank
  /// passes the same list, in the same order). Gloo needs nothing. The CUDA
  /// transport connects each link this rank is part of, in list order, and
  /// moves one element over it: connecting blocks both ranks until both
  /// arrive, so connecting on first use, in whatever order each rank's
  /// schedule first uses its links, could deadlock where one list order
  /// cannot. Links left out connect on first use. Errors: "lost rank P
  /// (...)".
  virtual llvm::Error connectLinks(const std::vector<Link> &links) {
    return llvm::Error::success();
  }

  /// Number of point-to-point messages sent so far.
  int64_t messagesSent() const { return messagesSent_; }

  /// Every rank passes `values` (same length on all ranks); every rank gets
  /// the element-wise minimum. Built from point-to-point messages through
  /// rank 0, so a failure names the lost rank. Errors: "lost rank P (...)".
  llvm::Error agreeMin(std::vector<int64_t> &values);

  /// Rank `root` sends `bytes` to every other rank, which receive them into
  /// `bytes`. At most 64 MiB; `what` names the bytes in errors. Errors:
  /// "lost rank P (...)", "WHAT take N bytes; the limit is 67108864", a peer
  /// announcing more than the limit.
  llvm::Error
  broadcastBytes(std::string &bytes, int root,
                 const std::string &what = "the microbatch signatures");

  /// Every rank sends `bytes` to rank `root`, which receives all of them in
  /// `gathered` (indexed by rank, its own included); other ranks leave
  /// `gathered` alone. Limits and errors as broadcastBytes().
  llvm::Error gatherBytes(const std::string &bytes, int root,
                          std::vector<std::string> &gathered,
                          const std::string &what);

  /// Returns once every rank has called it. Errors: "lost rank P (...)".
  llvm::Error barrier();

private:
  /// One message of bytes on channel 0: its length, then the data.
  llvm::Error sendBytes(const std::string &bytes, int peer,
                        const std::string &what);
  llvm::Expected<std::string> recvBytes(int peer, const std::string &what);

protected:
  Transport(int rank, int worldSize, std::chrono::milliseconds timeout)
      : rank_(rank), worldSize_(worldSize), timeout_(timeout) {}

  /// The next tag for messages to / from `peer` on `channel`.
  llvm::Expected<int> nextTag(bool sending, int peer, int channel);

  int rank_;
  int worldSize_;
  std::chrono::milliseconds timeout_;
  int64_t messagesSent_ = 0;

private:
  int channelCount_ = 1;
  std::map<std::tuple<bool, int, int>, int64_t> sequence_;
};

/// Meets the other ranks at env.masterAddr:env.masterPort and connects a
/// process group for `device`. The rendezvous store is served by rank 0, or
/// by the launcher when env.launcherHostsStore. The steps, all within about
/// `timeout` (a blocking c10d call that outlives it is abandoned):
///   1. connect to the store (rank 0: serve it);
///   2. claim the store for env.jobToken, or find that another job holds it;
///   3. announce this rank, refusing a rank that another process claimed;
///   4. wait until every rank has announced itself;
///   5. connect the process group (Gloo or NCCL) through the store.
/// Errors: "MASTER_PORT P is taken on this machine ...", "lost rank R
/// (never reached the rendezvous at HOST:PORT within T s)", "lost rank 0
/// (the rendezvous store at HOST:PORT did not answer within T s)",
/// "another job (job token 'X') holds the rendezvous at HOST:PORT ...",
/// "RANK=R joined the rendezvous at HOST:PORT twice ...", "rendezvous at
/// HOST:PORT failed (...)", and for DeviceKind::CUDA those of
/// checkCudaDevice(), before any rendezvous.
llvm::Expected<std::unique_ptr<Transport>>
connectTransport(const LaunchEnv &env, DeviceKind device,
                 std::chrono::milliseconds timeout);

/// Checks that this rank can put its stages on cuda:LOCAL_RANK. Errors,
/// each one line: "--device cuda: this ppc's LibTorch (1.13) is a CPU-only
/// build, without CUDA; ..."; "--device cuda: this ppc was built without
/// NCCL, ..."; "--device cuda: rank R sees no GPU (CUDA_VISIBLE_DEVICES=
/// '...'); ..."; "--device cuda: LOCAL_WORLD_SIZE=2 ranks on this machine
/// need a GPU each (rank 1 would use cuda:1), but it has 1; ...".
llvm::Error checkCudaDevice(const LaunchEnv &env);

/// A rendezvous store served by this process for workers it starts (they
/// get TORCHELASTIC_USE_AGENT_STORE=True, as under torchrun). It binds its
/// port, 0 = any free one, on all interfaces and holds it until destroyed,
/// so no other process can take the port between choosing and using it.
class StoreHost {
public:
  /// Errors: "MASTER_PORT P is taken on this machine ...", "cannot serve
  /// the rendezvous on port P (...)".
  static llvm::Expected<std::unique_ptr<StoreHost>> start(int port);
  ~StoreHost();
  /// The port it listens on.
  int port() const;

private:
  struct Impl;
  explicit StoreHost(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace ppc

#endif // PPC_RUNTIME_TRANSPORT_H
