//===- runtime/link/NcclLink.cpp - CUDA tensors over NCCL -----------------===//
//
// This file implements the NCCL link (--device cuda, compiled when LibTorch
// has CUDA and NCCL: PPC_HAVE_NCCL): the payload link for tensors on
// cuda:LOCAL_RANK. CPU tensors (the start-up agreement, metadata headers,
// gathers, barriers) stay on the control link.
//
// NCCL matches point-to-point messages by their order on a communicator,
// not by tag, and a send blocks its stream until the peer posts the
// receive. One communicator for both directions of a pair would deadlock
// 1F1B (each side sends before it receives), and one for several channels
// would pair messages that the two sides order differently. So every
// (channel, sender, receiver) gets a two-rank ProcessGroupNCCL of its own
// (through the rendezvous store; connected by connect() at start-up, else on
// first use): within it both sides see the channel's messages in schedule
// order, exactly as the tags order them on Gloo. Receives are not posted
// ahead: NCCL matches them by order on their group.
//
// What runs where (ProcessGroupNCCL's pointToPoint, in LibTorch 1.13 and
// 2.x alike):
//   - Compute: every stage's kernels, the wire copies (toWire's .to() and
//     .contiguous(), the packing of an edge's tensors into one buffer,
//     runtime/exec/WirePack.h) and the allocation of receive buffers run on the
//     thread's current CUDA stream, the compute stream.
//   - Communication: each group owns an NCCL stream. A send or receive first
//     makes that stream wait on an event recorded on the compute stream (so
//     it sees the packed buffer, and a receive buffer's memory is no longer
//     used by earlier kernels), then runs ncclSend / ncclRecv there; the
//     tensor is recorded on the NCCL stream, so the caching allocator keeps
//     its memory until the transfer ends even after ppc drops it.
//   - A send never waits on the host: send() returns once the operation is
//     queued, and the compute stream goes on to the next microbatch while
//     the NCCL stream transfers (their overlap shows in bench/gpu-check.sh).
//     The host waits for sends only when kMaxPending are in flight
//     (C10dWork.h) and in flushSends() at the end of a step.
//   - A receive is polled from the host until it completes, within the
//     timeout, so a lost peer is named (every wait has a deadline); then
//     Work::wait() makes the compute stream wait on the NCCL stream's end
//     event (it never blocks the host: TORCH_NCCL_BLOCKING_WAIT is not set).
//     Because the receive's stream waited on the compute stream, the host
//     returns from a receive only after the kernels queued before it ran:
//     this is the one place a rank's host meets its GPU in a step, besides
//     reading the step's loss once (Executor.cpp) and copying inputs in and
//     outputs out (RankContext.cpp).
//
//===----------------------------------------------------------------------===//
#ifdef PPC_HAVE_NCCL
#include "runtime/link/C10dWork.h"
#include "runtime/link/Link.h"
#include "runtime/platform/Duration.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <map>

namespace ppc {

namespace {

class NcclLink : public Link {
public:
  NcclLink(int rank, std::chrono::milliseconds timeout,
           c10::intrusive_ptr<c10d::Store> store, c10::Device device)
      : rank_(rank), timeout_(timeout), store_(std::move(store)),
        device_(device), sends_(timeout, WorkWait::Polled) {}

  ~NcclLink() override {
    // After a failure (its own, or the job's: abandon()), or with sends
    // nobody received, a graceful shutdown could wait for a lost peer:
    // abort instead.
    bool abort = failed_ || !sends_.done();
    for (auto &entry : groups_)
      compat::closeNcclGroup(*entry.second, abort);
  }

  bool carries(const at::Tensor &tensor, int) const override {
    return tensor.is_cuda();
  }

  llvm::Error send(const at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    auto group = groupFor(m.channel, rank_, m.peer, what);
    if (!group)
      return group.takeError();
    std::vector<at::Tensor> tensors{ncclView(tensor)};
    return noteFailure(sends_.start(m.peer, what, [&] {
      return (*group)->send(tensors, /*dstRank=*/1, /*tag=*/0);
    }));
  }

  llvm::Error recv(at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    auto group = groupFor(m.channel, m.peer, rank_, what);
    if (!group)
      return group.takeError();
    std::vector<at::Tensor> tensors{ncclView(tensor)};
    return noteFailure(
        finishRecv(m.peer, timeout_, what, WorkWait::Polled, [&] {
          return (*group)->recv(tensors, /*srcRank=*/0, /*tag=*/0);
        }));
  }

  void abandon() override { failed_ = true; }

  llvm::Error
  flushSends(std::chrono::steady_clock::time_point deadline) override {
    return noteFailure(sends_.flush(deadline));
  }

  /// Connects each route this rank is part of, in list order, and moves one
  /// element over it: connecting blocks both ranks until both arrive, so
  /// connecting on first use, in whatever order each rank's schedule first
  /// uses its routes, could deadlock where one list order cannot.
  llvm::Error connect(const std::vector<Transport::Route> &routes) override {
    for (const Transport::Route &route : routes) {
      // Named copies: lambdas cannot capture structured bindings in C++17.
      const int channel = std::get<0>(route), from = std::get<1>(route),
                to = std::get<2>(route);
      if (from != rank_ && to != rank_)
        continue;
      int peer = from == rank_ ? to : from;
      std::string what =
          llvm::formatv("the NCCL connection of channel {0} from rank {1} to "
                        "rank {2}",
                        channel, from, to);
      auto group = groupFor(channel, from, to, what);
      if (!group)
        return group.takeError();
      bool done = false;
      if (llvm::Error err = guardPeer(peer, timeout_, what, [&] {
            std::vector<at::Tensor> one{at::zeros(
                {1}, at::TensorOptions().dtype(at::kFloat).device(device_))};
            compat::WorkPtr work = from == rank_ ? (*group)->send(one, 1, 0)
                                                 : (*group)->recv(one, 0, 0);
            done = pollWork(work, deadlineAfter(timeout_));
          }))
        return noteFailure(std::move(err));
      if (!done)
        return noteFailure(lostRankTimedOut(peer, timeout_, what));
    }
    return llvm::Error::success();
  }

private:
  /// Passes `err` on, remembering a failure for the destructor.
  llvm::Error noteFailure(llvm::Error err) {
    if (err)
      failed_ = true;
    return err;
  }

  /// NCCL has no complex types: a complex tensor travels as its real view
  /// (the same memory, so a receive fills the buffer).
  static at::Tensor ncclView(const at::Tensor &t) {
    return t.is_complex() ? at::view_as_real(t) : t;
  }

  /// The two-rank group of messages from `from` to `to` on `channel`
  /// (group rank 0 sends, 1 receives). Errors: LostRankError.
  llvm::Expected<compat::NcclGroup *> groupFor(int channel, int from, int to,
                                               const llvm::Twine &what) {
    auto key = std::make_tuple(channel, from, to);
    auto it = groups_.find(key);
    if (it != groups_.end())
      return it->second.get();
    int peer = from == rank_ ? to : from;
    std::string prefix =
        llvm::formatv("ppc/nccl/{0}/{1}-{2}/", channel, from, to);
    c10::intrusive_ptr<compat::NcclGroup> group;
    if (llvm::Error err = guardPeer(peer, timeout_, what, [&] {
          // NCCL's watchdog aborts the process when an operation outlives
          // the group's timeout; give it more than ppc's own waits, which
          // then report the peer first.
          group = compat::makeNcclGroup(compat::makePrefixStore(prefix, store_),
                                        from == rank_ ? 0 : 1, 2,
                                        timeout_ + std::chrono::seconds(30));
        }))
      return err;
    compat::NcclGroup *raw = group.get();
    groups_.emplace(key, std::move(group));
    return raw;
  }

  int rank_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::Device device_;
  PendingSends sends_;
  std::map<std::tuple<int, int, int>, c10::intrusive_ptr<compat::NcclGroup>>
      groups_;
  bool failed_ = false;
};

} // namespace

llvm::Expected<std::unique_ptr<Link>> makeNcclLink(const LinkSetup &setup) {
  if (setup.device != DeviceKind::CUDA || !setup.store)
    return nullptr;
  c10::Device cuda = computeDevice(DeviceKind::CUDA, setup.localRank);
  // Allocations and NCCL's streams without an explicit device go to this
  // rank's GPU.
  if (llvm::Error err = torchCall("cannot select " + cuda.str(), [&] {
        c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(cuda);
      }))
    return err;
  return std::make_unique<NcclLink>(setup.rank, setup.timeout, setup.store,
                                    cuda);
}

} // namespace ppc
#endif // PPC_HAVE_NCCL
