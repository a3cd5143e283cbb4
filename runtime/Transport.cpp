//===- runtime/Transport.cpp - Point-to-point messages between ranks ------===//
//
// This file implements the rendezvous (a c10d::TCPStore served by rank 0),
// the Gloo transport, the NCCL transport (only with PPC_HAVE_NCCL), and the
// small agreement protocols built from point-to-point messages.
//
// The agreement protocols (agreeMin, broadcastBytes, barrier) deliberately
// avoid Gloo collectives: a collective that fails cannot say which rank it
// lost, a point-to-point message can.
//
//===----------------------------------------------------------------------===//
#include "runtime/Transport.h"

#include "lib/Error.h"
#include "runtime/LaunchEnv.h"
#include "runtime/TorchCompat.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

/// The most bytes broadcastBytes() and gatherBytes() move per rank; far above
/// any real signature list, far below what would exhaust memory.
constexpr uint64_t kMaxBroadcastBytes = 64ull << 20;

/// Sends in flight per transport before send() waits for the oldest: keeps
/// memory bounded when a receiver falls behind.
constexpr size_t kMaxPendingSends = 64;

/// "3" or "2.5": a timeout in seconds for messages.
std::string secondsText(std::chrono::milliseconds timeout) {
  return timeout.count() % 1000 == 0
             ? std::to_string(timeout.count() / 1000)
             : llvm::formatv("{0:f1}", timeout.count() / 1000.0).str();
}

/// The time left until `deadline`, at least 1 ms (0 means "no timeout" to
/// c10d and Gloo).
std::chrono::milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}
} // namespace

llvm::Expected<int> Transport::nextTag(bool sending, int peer, int channel) {
  int64_t seq = sequence_[{sending, peer, channel}]++;
  int64_t tag = seq * channelCount_ + channel;
  if (channel < 0 || channel >= channelCount_ || tag > INT32_MAX)
    return makeError(
        llvm::formatv("message tag out of range (channel {0} of {1}, "
                      "message {2}); use fewer microbatches",
                      channel, channelCount_, seq)
            .str());
  return static_cast<int>(tag);
}

llvm::Error Transport::agreeMin(std::vector<int64_t> &values) {
  if (worldSize_ == 1)
    return llvm::Error::success();
  // Control messages are CPU tensors on every transport (see the header).
  auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor mine = at::tensor(values, opts);
  if (rank_ == 0) {
    at::Tensor acc = mine.clone();
    for (int peer = 1; peer < worldSize_; ++peer) {
      at::Tensor theirs = at::empty_like(mine);
      if (llvm::Error err = recv(theirs, peer, 0, "the start-up agreement"))
        return err;
      acc = at::minimum(acc, theirs);
    }
    for (int peer = 1; peer < worldSize_; ++peer)
      if (llvm::Error err = send(acc, peer, 0, "the start-up agreement"))
        return err;
    mine = acc;
  } else {
    if (llvm::Error err = send(mine, 0, 0, "the start-up agreement"))
      return err;
    if (llvm::Error err = recv(mine, 0, 0, "the start-up agreement"))
      return err;
  }
  if (llvm::Error err = flushSends())
    return err;
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = mine[i].item<int64_t>();
  return llvm::Error::success();
}

llvm::Error Transport::sendBytes(const std::string &bytes, int peer,
                                 const std::string &what) {
  if (bytes.size() > kMaxBroadcastBytes)
    return makeError(llvm::formatv("{0} take {1} bytes; the limit is {2}", what,
                                   bytes.size(), kMaxBroadcastBytes)
                         .str());
  at::Tensor size = at::tensor({static_cast<int64_t>(bytes.size())},
                               at::TensorOptions().dtype(at::kLong));
  if (llvm::Error err = send(size, peer, 0, what))
    return err;
  if (bytes.empty())
    return llvm::Error::success();
  at::Tensor data = at::empty({static_cast<int64_t>(bytes.size())},
                              at::TensorOptions().dtype(at::kByte));
  std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  return send(data, peer, 0, what);
}

llvm::Expected<std::string> Transport::recvBytes(int peer,
                                                 const std::string &what) {
  at::Tensor size = at::empty({1}, at::TensorOptions().dtype(at::kLong));
  if (llvm::Error err = recv(size, peer, 0, what))
    return err;
  int64_t n = size.item<int64_t>();
  // The length comes from a peer: check it before allocating.
  if (n < 0 || static_cast<uint64_t>(n) > kMaxBroadcastBytes)
    return makeError(llvm::formatv("rank {0} sent a length of {1} bytes for "
                                   "{2}; the limit is {3}",
                                   peer, n, what, kMaxBroadcastBytes)
                         .str());
  std::string bytes(static_cast<size_t>(n), '\0');
  if (n > 0) {
    at::Tensor data = at::empty({n}, at::TensorOptions().dtype(at::kByte));
    if (llvm::Error err = recv(data, peer, 0, what))
      return err;
    std::memcpy(bytes.data(), data.data_ptr(), bytes.size());
  }
  return bytes;
}

llvm::Error Transport::broadcastBytes(std::string &bytes, int root,
                                      const std::string &what) {
  if (worldSize_ == 1)
    return llvm::Error::success();
  if (rank_ != root) {
    auto got = recvBytes(root, what);
    if (!got)
      return got.takeError();
    bytes = std::move(*got);
    return llvm::Error::success();
  }
  for (int peer = 0; peer < worldSize_; ++peer)
    if (peer != root)
      if (llvm::Error err = sendBytes(bytes, peer, what))
        return err;
  return flushSends();
}

llvm::Error Transport::gatherBytes(const std::string &bytes, int root,
                                   std::vector<std::string> &gathered,
                                   const std::string &what) {
  if (rank_ != root) {
    if (llvm::Error err = sendBytes(bytes, root, what))
      return err;
    return flushSends();
  }
  gathered.assign(worldSize_, std::string());
  gathered[root] = bytes;
  for (int peer = 0; peer < worldSize_; ++peer) {
    if (peer == root)
      continue;
    auto got = recvBytes(peer, what);
    if (!got)
      return got.takeError();
    gathered[peer] = std::move(*got);
  }
  return llvm::Error::success();
}

llvm::Error Transport::barrier() {
  std::vector<int64_t> token{0};
  return agreeMin(token);
}

namespace {

/// Wraps a failed wait on `peer` as "lost rank P (...)".
llvm::Error lostRank(int peer, std::chrono::milliseconds timeout,
                     const llvm::Twine &what, const std::string &cause) {
  bool timedOut = cause.find("Timed out") != std::string::npos ||
                  cause.find("timed out") != std::string::npos;
  if (timedOut)
    return makeError(
        llvm::formatv("lost rank {0} (no answer within {1} s while "
                      "waiting for {2})",
                      peer, secondsText(timeout), what.str())
            .str());
  // Gloo prefixes its messages with "[file.cc:line] ".
  llvm::StringRef text(cause);
  if (text.startswith("[") && text.contains("] "))
    text = text.split("] ").second;
  return makeError(llvm::formatv("lost rank {0} ({1}, while waiting for {2})",
                                 peer, text, what.str())
                       .str());
}

/// Runs `fn` and turns an exception into "lost rank P (...)".
template <typename Fn>
llvm::Error guardPeer(int peer, std::chrono::milliseconds timeout,
                      const llvm::Twine &what, Fn &&fn) {
  try {
    fn();
    return llvm::Error::success();
  } catch (const c10::Error &e) {
    return lostRank(peer, timeout, what, firstLine(e.what_without_backtrace()));
  } catch (const std::exception &e) {
    return lostRank(peer, timeout, what, firstLine(e.what()));
  }
}

/// A send in flight, kept until it completes.
struct Pending {
  compat::WorkPtr work;
  int peer;
  std::string what;
  /// NCCL work completes on the GPU and is polled: ProcessGroupNCCL's
  /// Work::wait(timeout) only blocks the CPU under TORCH_NCCL_BLOCKING_WAIT,
  /// a process-wide switch.
  bool polled = false;
};

/// Waits for `work` until `deadline` by polling isCompleted(), then lets
/// wait() report a failure and order the current CUDA stream after it.
/// Returns false on timeout.
bool pollWork(const compat::WorkPtr &work, Clock::time_point deadline) {
  for (int spins = 0; !work->isCompleted(); ++spins) {
    if (Clock::now() >= deadline)
      return false;
    // A microbatch's transfer often takes microseconds: spin briefly
    // before sleeping.
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  work->wait();
  return true;
}

/// The Gloo transport: CPU tensors, tagged send/recv on one process group.
/// With --device cuda it still carries every CPU message (CudaTransport).
class GlooTransport : public Transport {
public:
  GlooTransport(int rank, int worldSize, std::chrono::milliseconds timeout,
                c10::intrusive_ptr<c10d::Store> store,
                c10::intrusive_ptr<compat::GlooGroup> group)
      : Transport(rank, worldSize, timeout), store_(std::move(store)),
        group_(std::move(group)) {}

  ~GlooTransport() override {
    // Abandoned sends and receives (after an error) must not block the exit.
    auto abort = [](const compat::WorkPtr &work) {
      try {
        work->abort();
      } catch (...) {
      }
    };
    for (Pending &p : pending_)
      abort(p.work);
    for (auto &[key, queue] : posted_)
      for (Posted &p : queue)
        abort(p.work);
  }

  c10::Device device() const override { return c10::Device(c10::kCPU); }

  llvm::Error send(const at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what) override {
    auto tag = nextTag(true, peer, channel);
    if (!tag)
      return tag.takeError();
    std::vector<at::Tensor> tensors{tensor};
    return startSend(peer, what, /*polled=*/false,
                     [&] { return group_->send(tensors, peer, *tag); });
  }

  llvm::Error postRecv(const at::Tensor &tensor, int peer, int channel,
                       const llvm::Twine &what) override {
    auto tag = nextTag(false, peer, channel);
    if (!tag)
      return tag.takeError();
    std::vector<at::Tensor> tensors{tensor};
    compat::WorkPtr work;
    if (llvm::Error err = guardPeer(peer, timeout_, what, [&] {
          work = group_->recv(tensors, peer, *tag);
        }))
      return err;
    posted_[{peer, channel}].push_back({std::move(work), tensor});
    return llvm::Error::success();
  }

  llvm::Error recv(at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what) override {
    auto posted = posted_.find({peer, channel});
    if (posted != posted_.end() && !posted->second.empty()) {
      Posted first = std::move(posted->second.front());
      posted->second.pop_front();
      if (!first.tensor.is_same(tensor))
        return makeError(
            llvm::formatv("internal error: receiving {0} into a buffer other "
                          "than the one posted for it",
                          what)
                .str());
      return finishRecv(peer, what, /*polled=*/false,
                        [&] { return first.work; });
    }
    auto tag = nextTag(false, peer, channel);
    if (!tag)
      return tag.takeError();
    std::vector<at::Tensor> tensors{tensor};
    return finishRecv(peer, what, /*polled=*/false,
                      [&] { return group_->recv(tensors, peer, *tag); });
  }

  /// All pending sends share one deadline: a stalled peer costs one
  /// timeout, not one per message.
  llvm::Error flushSends() override {
    Clock::time_point deadline = Clock::now() + timeout_;
    for (Pending &p : pending_)
      if (llvm::Error err = waitSend(p, deadline))
        return err;
    pending_.clear();
    return llvm::Error::success();
  }

protected:
  /// Starts a send with `start` (returning its Work) and keeps it pending,
  /// at most kMaxPendingSends at once. Errors: "lost rank P (...)".
  template <typename Start>
  llvm::Error startSend(int peer, const llvm::Twine &what, bool polled,
                        Start &&start) {
    if (llvm::Error err = reapSends())
      return err;
    if (pending_.size() >= kMaxPendingSends) {
      if (llvm::Error err = waitSend(pending_.front(), Clock::now() + timeout_))
        return err;
      pending_.pop_front();
    }
    ++messagesSent_;
    return guardPeer(peer, timeout_, what, [&] {
      pending_.push_back({start(), peer, what.str(), polled});
    });
  }

  /// Starts a receive with `start` and waits for it up to the timeout.
  /// Errors: "lost rank P (...)".
  template <typename Start>
  llvm::Error finishRecv(int peer, const llvm::Twine &what, bool polled,
                         Start &&start) {
    bool done = false;
    if (llvm::Error err = guardPeer(peer, timeout_, what, [&] {
          compat::WorkPtr work = start();
          done = polled ? pollWork(work, Clock::now() + timeout_)
                        : compat::waitWork(work, timeout_);
        }))
      return err;
    if (!done)
      return lostRank(peer, timeout_, what, "timed out");
    return llvm::Error::success();
  }

  /// Whether every send started so far has completed.
  bool sendsDone() const {
    for (const Pending &p : pending_)
      if (!p.work->isCompleted())
        return false;
    return true;
  }

  c10::intrusive_ptr<c10d::Store> store_;

private:
  /// A receive posted ahead of its recv().
  struct Posted {
    compat::WorkPtr work;
    at::Tensor tensor;
  };
  /// Posted receives per (peer, channel), in message order.
  std::map<std::pair<int, int>, std::deque<Posted>> posted_;

  /// Waits for `p` until `deadline`. Errors: "lost rank P (...)".
  llvm::Error waitSend(Pending &p, Clock::time_point deadline) {
    bool done = false;
    if (llvm::Error err = guardPeer(p.peer, timeout_, p.what, [&] {
          done = p.polled ? pollWork(p.work, deadline)
                          : compat::waitWork(p.work, remaining(deadline));
        }))
      return err;
    if (!done)
      return lostRank(p.peer, timeout_, p.what, "timed out");
    return llvm::Error::success();
  }

  /// Drops completed sends so the list stays short; reports failed ones.
  llvm::Error reapSends() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending &p = pending_[i];
      if (p.work->isCompleted()) {
        if (llvm::Error err = guardPeer(p.peer, timeout_, p.what, [&] {
              if (p.polled)
                p.work->wait();
              else
                compat::waitWork(p.work, timeout_);
            }))
          return err;
        continue;
      }
      if (kept != i)
        pending_[kept] = std::move(p);
      ++kept;
    }
    pending_.resize(kept);
    return llvm::Error::success();
  }

  c10::intrusive_ptr<compat::GlooGroup> group_;
  std::deque<Pending> pending_;
};

#ifdef PPC_HAVE_NCCL
/// The CUDA transport (--device cuda): tensors on cuda:LOCAL_RANK travel
/// over NCCL, CPU tensors (the start-up agreement, metadata headers,
/// gathers, barriers) over the Gloo group underneath.
///
/// NCCL matches point-to-point messages by their order on a communicator,
/// not by tag, and a send blocks its stream until the peer posts the
/// receive. One communicator for both directions of a pair would deadlock
/// 1F1B (each side sends before it receives), and one for several channels
/// would pair messages that the two sides order differently. So every
/// (channel, sender, receiver) gets a two-rank ProcessGroupNCCL of its own
/// (through the rendezvous store; connected by connectLinks() at start-up,
/// else on first use): within it both sides see the channel's messages in
/// schedule order, exactly as the tags order them on Gloo.
class CudaTransport : public GlooTransport {
public:
  CudaTransport(int rank, int worldSize, std::chrono::milliseconds timeout,
                c10::intrusive_ptr<c10d::Store> store,
                c10::intrusive_ptr<compat::GlooGroup> group, c10::Device device)
      : GlooTransport(rank, worldSize, timeout, std::move(store),
                      std::move(group)),
        device_(device) {}

  ~CudaTransport() override {
    // After a failure, or with sends nobody received, a graceful shutdown
    // could wait for a lost peer: abort instead.
    bool abort = failed_ || !sendsDone();
    for (auto &entry : links_)
      compat::closeNcclGroup(*entry.second, abort);
  }

  c10::Device device() const override { return device_; }

  llvm::Error send(const at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what) override {
    if (!tensor.is_cuda())
      return GlooTransport::send(tensor, peer, channel, what);
    auto tag = nextTag(true, peer, channel);
    if (!tag)
      return tag.takeError();
    auto link = linkFor(channel, rank_, peer, what);
    if (!link)
      return link.takeError();
    std::vector<at::Tensor> tensors{ncclView(tensor)};
    return noteFailure(startSend(peer, what, /*polled=*/true, [&] {
      return (*link)->send(tensors, /*dstRank=*/1, /*tag=*/0);
    }));
  }

  /// CPU messages may be posted ahead (on Gloo); CUDA ones are received
  /// when needed (NCCL matches them by order on their link).
  llvm::Error postRecv(const at::Tensor &tensor, int peer, int channel,
                       const llvm::Twine &what) override {
    if (!tensor.is_cuda())
      return GlooTransport::postRecv(tensor, peer, channel, what);
    return llvm::Error::success();
  }

  llvm::Error recv(at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what) override {
    if (!tensor.is_cuda())
      return GlooTransport::recv(tensor, peer, channel, what);
    auto tag = nextTag(false, peer, channel);
    if (!tag)
      return tag.takeError();
    auto link = linkFor(channel, peer, rank_, what);
    if (!link)
      return link.takeError();
    std::vector<at::Tensor> tensors{ncclView(tensor)};
    return noteFailure(finishRecv(peer, what, /*polled=*/true, [&] {
      return (*link)->recv(tensors, /*srcRank=*/0, /*tag=*/0);
    }));
  }

  llvm::Error connectLinks(const std::vector<Link> &links) override {
    for (const Link &link : links) {
      // Named copies: lambdas cannot capture structured bindings in C++17.
      const int channel = std::get<0>(link), from = std::get<1>(link),
                to = std::get<2>(link);
      if (from != rank_ && to != rank_)
        continue;
      int peer = from == rank_ ? to : from;
      std::string what =
          llvm::formatv("the NCCL connection of channel {0} from rank {1} to "
                        "rank {2}",
                        channel, from, to);
      auto group = linkFor(channel, from, to, what);
      if (!group)
        return group.takeError();
      bool done = false;
      if (llvm::Error err = guardPeer(peer, timeout_, what, [&] {
            std::vector<at::Tensor> one{at::zeros(
                {1}, at::TensorOptions().dtype(at::kFloat).device(device_))};
            compat::WorkPtr work = from == rank_ ? (*group)->send(one, 1, 0)
                                                 : (*group)->recv(one, 0, 0);
            done = pollWork(work, Clock::now() + timeout_);
          }))
        return noteFailure(std::move(err));
      if (!done)
        return noteFailure(lostRank(peer, timeout_, what, "timed out"));
    }
    return llvm::Error::success();
  }

  llvm::Error flushSends() override {
    return noteFailure(GlooTransport::flushSends());
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
  /// (group rank 0 sends, 1 receives). Errors: "lost rank P (...)".
  llvm::Expected<compat::NcclGroup *> linkFor(int channel, int from, int to,
                                              const llvm::Twine &what) {
    auto key = std::make_tuple(channel, from, to);
    auto it = links_.find(key);
    if (it != links_.end())
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
    links_.emplace(key, std::move(group));
    return raw;
  }

  c10::Device device_;
  std::map<std::tuple<int, int, int>, c10::intrusive_ptr<compat::NcclGroup>>
      links_;
  bool failed_ = false;
};
#endif // PPC_HAVE_NCCL

/// getaddrinfo()'s list, freed with it.
using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

/// `host`:`port` resolved to IPv4 addresses for sockets of `type`.
/// Errors: "cannot resolve MASTER_ADDR 'HOST': WHY".
llvm::Expected<AddressList> resolveIPv4(const std::string &host, int port,
                                        int type) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = type;
  addrinfo *found = nullptr;
  int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  AddressList list(found, &freeaddrinfo);
  if (rc != 0 || !found)
    return makeError(llvm::formatv("cannot resolve MASTER_ADDR '{0}': {1}",
                                   host, gai_strerror(rc))
                         .str());
  return list;
}

/// The local address this machine uses to reach `host` (found by
/// "connecting" a UDP socket, which sends nothing): Gloo must listen on an
/// address the other ranks can reach, and the host name may resolve to one
/// they cannot (e.g. in a network namespace).
llvm::Expected<std::string> localAddressTowards(const std::string &host,
                                                int port) {
  auto found = resolveIPv4(host, port, SOCK_DGRAM);
  if (!found)
    return found.takeError();
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string result;
  if (fd >= 0 && connect(fd, (*found)->ai_addr, (*found)->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)))
      result = text;
  }
  if (fd >= 0)
    close(fd);
  if (result.empty())
    return makeError(
        llvm::formatv("no local address reaches MASTER_ADDR '{0}'", host)
            .str());
  return result;
}

/// Whether something accepts TCP connections at host:port within `wait`.
/// Tells a store host that never started (refused, or unreachable) from one
/// that listens but does not answer (a stopped process: the kernel still
/// accepts its connections).
bool acceptsConnections(const std::string &host, int port,
                        std::chrono::milliseconds wait) {
  auto found = resolveIPv4(host, port, SOCK_STREAM);
  if (!found) {
    llvm::consumeError(found.takeError());
    return false;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  bool accepted = connect(fd, (*found)->ai_addr, (*found)->ai_addrlen) == 0;
  if (!accepted && errno == EINPROGRESS) {
    pollfd waiting{fd, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof(error);
    accepted = poll(&waiting, 1, static_cast<int>(wait.count())) == 1 &&
               getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 &&
               error == 0;
  }
  close(fd);
  return accepted;
}

/// "MASTER_ADDR:MASTER_PORT", the rendezvous store's address.
std::string storeAddress(const LaunchEnv &env) {
  return env.masterAddr + ":" + std::to_string(env.masterPort);
}

/// The error of a rank that got no answer from the store within `timeout`.
/// Rank 0's store either never started (nothing accepts connections at the
/// port) or stopped answering. LibTorch 1.13's client gives up connecting
/// within the timeout and 2.x's may overshoot it, so both the client's
/// error and ppc's own deadline come here, and the error does not depend on
/// which fired first.
std::string storeSilence(const LaunchEnv &env,
                         std::chrono::milliseconds timeout) {
  std::string where = storeAddress(env);
  if (env.launcherHostsStore)
    return llvm::formatv("rendezvous at {0} failed (the launcher's store did "
                         "not answer within {1} s)",
                         where, secondsText(timeout));
  if (!acceptsConnections(env.masterAddr, env.masterPort,
                          std::chrono::milliseconds(500)))
    return llvm::formatv("lost rank 0 (never reached the rendezvous at {0} "
                         "within {1} s)",
                         where, secondsText(timeout));
  return llvm::formatv("lost rank 0 (the rendezvous store at {0} did not "
                       "answer within {1} s)",
                       where, secondsText(timeout));
}

/// An error raised on a start-up thread, whose text is the error's.
struct StepError {
  std::string message;
};

/// Where runBounded() leaves the outcome of a call.
template <typename T> struct BoundedCall {
  std::mutex mutex;
  std::condition_variable done;
  bool finished = false;
  std::optional<T> value;
  std::string error;
};

/// Runs `fn` on a thread of its own and waits for it until `deadline`.
/// LibTorch 1.13's TCPStore client reads replies without a timeout, so a
/// store host that stops (SIGSTOP, a frozen machine) would block the call
/// forever, and a thread blocked in recv() cannot be interrupted. Past the
/// deadline the call is abandoned: its thread is detached, keeps what it
/// uses alive through fn's by-value captures, and ends with the process.
/// `fn` returns T or throws: a StepError (its text is the error), or
/// anything else (`where`: first line of the message). `onTimeout` gives
/// the error past the deadline.
template <typename T, typename Fn>
llvm::Expected<T> runBounded(Clock::time_point deadline,
                             const std::function<std::string()> &onTimeout,
                             const std::string &where, Fn fn) {
  auto call = std::make_shared<BoundedCall<T>>();
  std::thread([call, fn = std::move(fn), where]() mutable {
    std::optional<T> value;
    std::string error;
    try {
      value = fn();
    } catch (const StepError &e) {
      error = e.message;
    } catch (const c10::Error &e) {
      error = where + " (" + firstLine(e.what_without_backtrace()) + ")";
    } catch (const std::exception &e) {
      error = where + " (" + firstLine(e.what()) + ")";
    }
    std::lock_guard<std::mutex> lock(call->mutex);
    call->value = std::move(value);
    call->error = std::move(error);
    call->finished = true;
    call->done.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(call->mutex);
  if (!call->done.wait_until(lock, deadline, [&] { return call->finished; }))
    return makeError(onTimeout());
  if (!call->value)
    return makeError(call->error);
  return std::move(*call->value);
}

/// Text from a peer, safe to print: printable ASCII, at most 64 bytes.
std::string printable(const std::vector<uint8_t> &bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < 64; ++i)
    out += llvm::isPrint(bytes[i]) ? static_cast<char>(bytes[i]) : '?';
  return bytes.size() > 64 ? out + "..." : out;
}

/// The rendezvous store's keys: "ppc/job" holds the job token of the job
/// that claimed the store; "ppc/rank/R" counts the processes that claimed
/// rank R. The process group's keys live under "ppc/group/".
std::string rankKey(int rank) { return "ppc/rank/" + std::to_string(rank); }

/// Explains why the store at `where` could not be served or reached.
std::string storeFailure(const LaunchEnv &env, bool serve,
                         const std::string &where,
                         std::chrono::milliseconds timeout,
                         const std::string &cause) {
  if (serve && compat::isAddressInUse(cause))
    return llvm::formatv("MASTER_PORT {0} is taken on this machine (another "
                         "job?); choose another port",
                         env.masterPort);
  if (!serve && cause.find("timed out") != std::string::npos)
    return storeSilence(env, timeout);
  return "rendezvous at " + where + " failed (" + cause + ")";
}

/// Steps 1-4 of connectTransport(), on a thread of runBounded(): returns
/// the store for the process group. Throws StepError.
c10::intrusive_ptr<c10d::Store> meetRanks(const LaunchEnv &env,
                                          std::chrono::milliseconds timeout,
                                          Clock::time_point deadline) {
  std::string where = storeAddress(env);
  bool serve = env.rank == 0 && !env.launcherHostsStore;
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    // c10d truncates the connect timeout to whole seconds (0.9 s would fail
    // at once): round up; the caller's deadline still bounds the step.
    store = compat::makeTCPStore(
        env.masterAddr, static_cast<uint16_t>(env.masterPort), serve,
        std::chrono::ceil<std::chrono::seconds>(remaining(deadline)));
  } catch (const std::exception &e) {
    // c10::Error, or c10d's TimeoutError (a std::runtime_error).
    throw StepError{
        storeFailure(env, serve, where, timeout, firstLine(e.what()))};
  }
  std::vector<uint8_t> token(env.jobToken.begin(), env.jobToken.end());
  std::vector<uint8_t> holder = store->compareSet("ppc/job", {}, token);
  if (holder != token)
    throw StepError{llvm::formatv("another job (job token '{0}') holds the "
                                  "rendezvous at {1}; give each job its own "
                                  "MASTER_PORT",
                                  printable(holder), where)};
  if (store->add(rankKey(env.rank), 1) != 1)
    throw StepError{llvm::formatv(
        "RANK={0} joined the rendezvous at {1} twice: another job with the "
        "same job token uses this port (set PPC_JOB_TOKEN per job or give "
        "each job its own MASTER_PORT)",
        env.rank, where)};
  std::vector<std::string> keys;
  for (int r = 0; r < env.worldSize; ++r)
    keys.push_back(rankKey(r));
  try {
    store->wait(keys, remaining(deadline));
  } catch (const std::exception &) {
    std::vector<int> missing;
    for (int r = 0; r < env.worldSize; ++r)
      if (!store->check({keys[r]}))
        missing.push_back(r);
    if (!missing.empty()) {
      std::string others;
      for (size_t i = 1; i < missing.size(); ++i)
        others += (i == 1 ? "; rank " : ", ") + std::to_string(missing[i]);
      throw StepError{llvm::formatv("lost rank {0} (never reached the "
                                    "rendezvous at {1} within {2} s{3})",
                                    missing[0], where, secondsText(timeout),
                                    others.empty() ? "" : others + " neither")};
    }
  }
  return compat::makePrefixStore("ppc/group/", store);
}

/// The Gloo device for this rank: on GLOO_SOCKET_IFNAME's first interface,
/// else on the local address that reaches MASTER_ADDR.
llvm::Expected<std::shared_ptr<::gloo::transport::Device>>
glooDevice(const LaunchEnv &env, const std::string &where) {
  if (const char *ifname = std::getenv("GLOO_SOCKET_IFNAME");
      ifname && *ifname) {
    std::string first = llvm::StringRef(ifname).split(',').first.str();
    return torchCall(where,
                     [&] { return compat::makeGlooDeviceForInterface(first); });
  }
  auto address = localAddressTowards(env.masterAddr, env.masterPort);
  if (!address)
    return withContext(address.takeError(), where);
  return torchCall(where,
                   [&] { return compat::makeGlooDeviceForHost(*address); });
}

} // namespace

llvm::Error checkCudaDevice(const LaunchEnv &env) {
  std::string what = "--device cuda";
  // A CPU-only LibTorch registers no CUDA device guard; a CUDA one does,
  // with or without a GPU.
  if (!c10::impl::hasDeviceGuardImpl(c10::kCUDA))
    return makeError(llvm::formatv("{0}: this ppc's LibTorch ({1}.{2}) is a "
                                   "CPU-only build, without CUDA; use "
                                   "--device cpu, or a ppc built against a "
                                   "LibTorch with CUDA",
                                   what, compat::kTorchMajor,
                                   compat::kTorchMinor)
                         .str());
#ifndef PPC_HAVE_NCCL
  (void)env;
  return makeError(what + ": this ppc was built without NCCL, which carries "
                          "values between CUDA stages; use --device cpu, or "
                          "rebuild ppc against a LibTorch with NCCL");
#else
  int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (gpus == 0) {
    const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return makeError(
        llvm::formatv(
            "{0}: rank {1} sees no GPU{2}; use "
            "--device cpu",
            what, env.rank,
            visible
                ? llvm::formatv(" (CUDA_VISIBLE_DEVICES='{0}')", visible).str()
                : std::string())
            .str());
  }
  if (env.localWorldSize > gpus || env.localRank >= gpus)
    return makeError(
        llvm::formatv("{0}: LOCAL_WORLD_SIZE={1} ranks on this machine need "
                      "a GPU each (rank {2} would use cuda:{3}), but it has "
                      "{4}; start at most {4} rank{5} per machine, or use "
                      "--device cpu",
                      what, env.localWorldSize, env.rank, env.localRank, gpus,
                      gpus == 1 ? "" : "s")
            .str());
  return llvm::Error::success();
#endif
}

llvm::Expected<std::unique_ptr<Transport>>
connectTransport(const LaunchEnv &env, DeviceKind device,
                 std::chrono::milliseconds timeout) {
  std::string where = storeAddress(env);
  std::string failed = "rendezvous at " + where + " failed";
  if (device == DeviceKind::CUDA)
    if (llvm::Error err = checkCudaDevice(env))
      return err;
  // A little past the deadline, so that the steps' own timeouts, which say
  // more, normally fire first.
  constexpr std::chrono::milliseconds kGrace(500);
  Clock::time_point deadline = Clock::now() + timeout;
  auto storeSilent = [&] { return storeSilence(env, timeout); };
  auto store = runBounded<c10::intrusive_ptr<c10d::Store>>(
      deadline + kGrace, storeSilent, failed,
      [env, timeout, deadline] { return meetRanks(env, timeout, deadline); });
  if (!store)
    return store.takeError();

  // Every rank has arrived; connecting the group gets a timeout of its own.
  // The Gloo group exists on every device: with CUDA it carries the CPU
  // messages, and NCCL groups are connected per channel on first use.
  deadline = Clock::now() + timeout;
  auto groupSilent = [&]() -> std::string {
    return llvm::formatv("{0} (connecting the process group took over {1} s)",
                         failed, secondsText(timeout));
  };
  auto glooDev = glooDevice(env, failed);
  if (!glooDev)
    return glooDev.takeError();
  auto group = runBounded<c10::intrusive_ptr<compat::GlooGroup>>(
      deadline + kGrace, groupSilent, failed,
      [store = *store, env, timeout, dev = *glooDev] {
        return compat::makeGlooGroup(store, env.rank, env.worldSize, timeout,
                                     dev);
      });
  if (!group)
    return group.takeError();
  if (device == DeviceKind::CPU)
    return std::make_unique<GlooTransport>(env.rank, env.worldSize, timeout,
                                           *store, *group);
#ifdef PPC_HAVE_NCCL
  c10::Device cuda(c10::kCUDA, static_cast<c10::DeviceIndex>(env.localRank));
  // Allocations and NCCL's streams without an explicit device go to this
  // rank's GPU.
  if (llvm::Error err = torchCall("cannot select " + cuda.str(), [&] {
        c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(cuda);
      }))
    return err;
  return std::make_unique<CudaTransport>(env.rank, env.worldSize, timeout,
                                         *store, *group, cuda);
#else
  return makeError("unreachable: --device cuda without NCCL");
#endif
}

struct StoreHost::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreHost::StoreHost(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreHost::~StoreHost() = default;

int StoreHost::port() const { return compat::storePort(*impl_->store); }

llvm::Expected<std::unique_ptr<StoreHost>> StoreHost::start(int port) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->store =
        compat::makeTCPStore("127.0.0.1", static_cast<uint16_t>(port),
                             /*isServer=*/true, std::chrono::seconds(60));
  } catch (const std::exception &e) {
    LaunchEnv env;
    env.masterPort = port;
    return makeError(
        storeFailure(env, /*serve=*/true, "port " + std::to_string(port),
                     std::chrono::seconds(60), firstLine(e.what())));
  }
  return std::unique_ptr<StoreHost>(new StoreHost(std::move(impl)));
}

} // namespace ppc
