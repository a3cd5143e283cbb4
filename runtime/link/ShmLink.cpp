//===- runtime/link/ShmLink.cpp - CPU tensors through shared memory -------===//
//
// This file implements the shared-memory link: the payload link for CPU
// tensors between ranks on one host (RunOptions::link, --link), in front of
// Gloo, which keeps every other peer.
//
// 1. Co-location. At creation every rank publishes in the rendezvous store
//    its host identity (hostname, kernel boot id and pid namespace; or
//    LinkSetup::hostId, PPC_HOST_ID, when set), pid, process start time and
//    link policy, and reads everyone's. Peers with this rank's identity are
//    co-located. All ranks must ask for the same policy; with "shm" every peer
//    must be co-located, with "gloo" the link declines.
// 2. Rings. Each (sender, receiver, channel) gets one ShmRing
//    (runtime/link/ShmRing.h), created by the sender on its first message in a
//    memfd (never a name in /dev/shm: the memory goes when the last
//    process holding it exits, however it exits) and published in the store
//    as "pid fd nonce"; the receiver opens /proc/PID/fd/FD on its first
//    receive and checks the nonce. The store's values are authenticated
//    (runtime/link/JobStore.h; without PPC_JOB_SECRET the rendezvous keeps
//    this link off), PID must be the one its rank announced, and
//    ShmRing::open() opens only a ppc ring's memfd of this user. Both keep it
//    mapped until the link goes; the sender's link, when it goes, first waits
//    (up to the timeout) for each receiver to have mapped its ring, which it
//    cannot once the sender's descriptor is closed; not after a failure of its
//    own or abandon(), since the job has failed then.
// 3. Sends never block: a message that fits the ring, with nothing queued
//    before it on that ring, is written at once; any other is queued, and
//    one thread per link (started on the first queued send) streams the
//    queues into their rings, each in order, a chunk at a time while the
//    receiver copies the chunks out. flushSends() waits for the queues.
// 4. Receives read their ring in message order (the transport receives in
//    send order per peer and channel), checking each frame's tag and size.
// Every wait is bounded by the link's timeout and watches the peer's
// process, so a killed peer is a "lost rank R (it exited, ...)" within
// about 50 ms (ShmRing.h: kSleepSlice).
//
//===----------------------------------------------------------------------===//
#include "runtime/link/JobStore.h"
#include "runtime/link/Link.h"
#include "runtime/link/ShmRing.h"
#include "runtime/platform/BoundedCall.h"
#include "runtime/platform/Duration.h"

#include "lib/Error.h"
#include "lib/OptionName.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace ppc {

namespace {

using shm::Clock;

/// Bytes of data per ring: room for the small messages of several
/// microbatches; larger ones stream through.
constexpr size_t kRingBytes = size_t(4) << 20;

/// Store keys, under the rendezvous store's own prefix.
std::string peerKey(int rank) { return "ppc_shm/peer/" + std::to_string(rank); }
std::string ringKey(int from, int to, int channel) {
  return llvm::formatv("ppc_shm/ring/{0}/{1}/{2}", from, to, channel).str();
}

std::string firstLineOf(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// What makes two processes co-located: the same kernel (boot id), the
/// same host name, and the same pid namespace (so that /proc/PID is the
/// peer). A non-empty `given` (PPC_HOST_ID) replaces it (tests; containers
/// that share a kernel but should not share memory).
std::string hostIdentity(const std::string &given) {
  if (!given.empty())
    return given;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return std::string(host) + "/" +
         firstLineOf("/proc/sys/kernel/random/boot_id") + "/" +
         (n > 0 ? std::string(ns, static_cast<size_t>(n)) : "");
}

/// What a rank publishes about itself.
struct PeerInfo {
  std::string host;
  shm::PeerProcess process;
  std::string policy;
};

std::string encode(const PeerInfo &info) {
  return llvm::formatv("1\n{0}\n{1}\n{2}\n{3}", info.host, info.process.pid(),
                       info.process.startTime(), info.policy)
      .str();
}

std::optional<PeerInfo> decode(const std::string &text) {
  llvm::SmallVector<llvm::StringRef, 5> parts;
  llvm::StringRef(text).split(parts, '\n');
  int pid = 0;
  uint64_t start = 0;
  if (parts.size() != 5 || parts[0] != "1" || parts[2].getAsInteger(10, pid) ||
      pid <= 0 || parts[3].getAsInteger(10, start))
    return std::nullopt;
  return PeerInfo{parts[1].str(), shm::PeerProcess(pid, start), parts[4].str()};
}

std::string toText(const std::vector<uint8_t> &bytes) {
  return std::string(bytes.begin(), bytes.end());
}
std::vector<uint8_t> toBytes(const std::string &text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

/// Runs `fn`, a call on the rendezvous store on behalf of a wait for
/// `peer`, within `timeout` (runWithin(), runtime/platform/BoundedCall.h:
/// a store whose host stopped never answers), and returns what it returns.
/// Past the timeout, or when the store answers with c10d's "Socket
/// Timeout", this is the peer's timeout; a value the job's secret does not
/// vouch for is its one line, nothing opened.
template <typename T, typename Fn>
llvm::Expected<T> storeCall(int peer, std::chrono::milliseconds timeout,
                            const llvm::Twine &what, Fn fn) {
  BoundedOutcome<T> outcome =
      runWithin<T>(deadlineAfter(timeout), std::move(fn));
  if (outcome.timedOut)
    return lostRankTimedOut(peer, timeout, what);
  if (!outcome.error)
    return std::move(*outcome.value);
  try {
    std::rethrow_exception(outcome.error);
  } catch (const ForgedValueError &e) {
    return makeError(e.what());
  } catch (const std::exception &e) {
    if (llvm::StringRef(e.what()).contains_insensitive("timeout"))
      return lostRankTimedOut(peer, timeout, what);
    return lostRankFrom(peer, timeout, what, e);
  }
}

class ShmLink : public Link {
public:
  ShmLink(const LinkSetup &setup, std::vector<PeerInfo> peers,
          std::vector<bool> colocated)
      : rank_(setup.rank), timeout_(setup.timeout), store_(setup.store),
        peers_(std::move(peers)), colocated_(std::move(colocated)) {}

  ~ShmLink() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    if (shm::Bell *bell = sleepingOn_.load())
      shm::ring(*bell);
    if (thread_.joinable())
      thread_.join();
    waitUntilOpened();
  }

  bool carries(const at::Tensor &tensor, int peer) const override {
    return peer >= 0 && peer < static_cast<int>(colocated_.size()) &&
           colocated_[peer] && tensor.device().is_cpu();
  }

  llvm::Error send(const at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    auto out = outRing(m.peer, m.channel, what);
    if (!out)
      return out.takeError();
    OutRing &r = **out;
    const void *data = tensor.data_ptr();
    uint64_t bytes = static_cast<uint64_t>(tensor.nbytes());
    std::unique_lock<std::mutex> lock(mutex_);
    if (failure_)
      return failureError();
    if (r.queue.empty() && r.ring.writable() >= shm::kFrameBytes + bytes) {
      lock.unlock();
      shm::Outgoing message(m.tag, data, bytes);
      message.advance(r.ring);
      return llvm::Error::success();
    }
    // The tensor shares its storage with the queued message until it is
    // written.
    if (r.queue.empty())
      r.lastProgress = Clock::now();
    r.queue.push_back(
        Queued{tensor, shm::Outgoing(m.tag, data, bytes), what.str()});
    ++workSeq_;
    if (!thread_.joinable())
      thread_ = std::thread([this] { drain(); });
    lock.unlock();
    work_.notify_all();
    if (shm::Bell *bell = sleepingOn_.load())
      shm::ring(*bell);
    return llvm::Error::success();
  }

  llvm::Error recv(at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    auto in = inRing(m.peer, m.channel, what);
    if (!in)
      return in.takeError();
    return shm::receiveMessage(**in, ringPeer(m.peer), m.tag, tensor.data_ptr(),
                               static_cast<uint64_t>(tensor.nbytes()), what);
  }

  void abandon() override { abandoned_ = true; }

  llvm::Error
  flushSends(std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(mutex_);
    flushed_.wait_until(lock, deadline,
                        [&] { return failure_ || queued() == nullptr; });
    if (failure_)
      return failureError();
    if (OutRing *r = queued())
      return lostRankTimedOut(r->peer, timeout_, r->queue.front().what);
    return llvm::Error::success();
  }

private:
  /// The sending side of one ring, and its queue.
  struct Queued {
    at::Tensor tensor;
    shm::Outgoing message;
    std::string what;
  };
  struct OutRing {
    int peer = 0;
    shm::ShmRing ring;
    std::deque<Queued> queue;
    Clock::time_point lastProgress;
  };

  shm::RingPeer ringPeer(int peer) const {
    return shm::RingPeer{peer, peers_[peer].process, timeout_};
  }

  /// The ring to `peer` on `channel`, created and published on first use.
  llvm::Expected<OutRing *> outRing(int peer, int channel,
                                    const llvm::Twine &what) {
    auto found = out_.find({peer, channel});
    if (found != out_.end())
      return found->second.get();
    auto ring = shm::ShmRing::create(kRingBytes);
    if (!ring)
      return ring.takeError();
    auto r = std::make_unique<OutRing>();
    r->peer = peer;
    r->ring = std::move(*ring);
    std::string value =
        llvm::formatv("{0} {1} {2}", getpid(), r->ring.fd(), r->ring.nonce())
            .str();
    auto set =
        storeCall<bool>(peer, timeout_, what,
                        [store = store_, key = ringKey(rank_, peer, channel),
                         bytes = toBytes(value)] {
                          store->set(key, bytes);
                          return true;
                        });
    if (!set)
      return set.takeError();
    OutRing *raw = r.get();
    std::lock_guard<std::mutex> lock(mutex_);
    out_.emplace(std::make_pair(peer, channel), std::move(r));
    return raw;
  }

  /// The ring from `peer` on `channel`, opened on first use once the peer
  /// has published it (waiting up to the timeout, watching the peer).
  llvm::Expected<shm::ShmRing *> inRing(int peer, int channel,
                                        const llvm::Twine &what) {
    auto found = in_.find({peer, channel});
    if (found != in_.end())
      return &found->second;
    std::string key = ringKey(peer, rank_, channel);
    Clock::time_point deadline = Clock::now() + timeout_;
    auto pause = std::chrono::microseconds(100);
    while (true) {
      auto ready = storeCall<bool>(peer, timeout_, what, [store = store_, key] {
        return store->check({key});
      });
      if (!ready)
        return ready.takeError();
      if (*ready)
        break;
      if (!peers_[peer].process.alive())
        return lostRank(peer, "it exited, while waiting for " + what);
      if (Clock::now() >= deadline)
        return lostRankTimedOut(peer, timeout_, what);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
    auto got =
        storeCall<std::string>(peer, timeout_, what, [store = store_, key] {
          return toText(store->get(key));
        });
    if (!got)
      return got.takeError();
    std::string value = std::move(*got);
    llvm::SmallVector<llvm::StringRef, 3> parts;
    llvm::StringRef(value).split(parts, ' ');
    int pid = 0, fd = 0;
    uint64_t nonce = 0;
    if (parts.size() != 3 || parts[0].getAsInteger(10, pid) ||
        parts[1].getAsInteger(10, fd) || parts[2].getAsInteger(10, nonce) ||
        pid != peers_[peer].process.pid() || fd < 0)
      return makeError(llvm::formatv("internal error: rank {0} published a "
                                     "malformed shared-memory ring '{1}'",
                                     peer, value)
                           .str());
    auto ring = shm::ShmRing::open(
        llvm::formatv("/proc/{0}/fd/{1}", pid, fd).str(), nonce);
    if (!ring) {
      // The ring's creator exited before this rank could open it.
      if (!peers_[peer].process.alive()) {
        llvm::consumeError(ring.takeError());
        return lostRank(peer, "it exited, while waiting for " + what);
      }
      return makeError(llvm::formatv("the shared-memory link to rank {0} "
                                     "failed ({1}); use {2} gloo",
                                     peer, llvm::toString(ring.takeError()),
                                     optionName(Option::Link))
                           .str());
    }
    ring->header().opened.store(1);
    shm::ring(ring->header().spaceBell);
    return &in_.emplace(std::make_pair(peer, channel), std::move(*ring))
                .first->second;
  }

  /// Waits until the receiver of every ring this rank created has mapped
  /// it, it exits, or the timeout passes: a message in a ring lives as long
  /// as someone holds the ring, and the receiver finds it through this
  /// process's descriptor, so exiting earlier would lose the last messages
  /// of a ring whose receiver had not read it yet.
  void waitUntilOpened() {
    if (failure_ || abandoned_)
      return;
    Clock::time_point deadline = Clock::now() + timeout_;
    for (auto &entry : out_) {
      OutRing &r = *entry.second;
      shm::Bell &bell = r.ring.header().spaceBell;
      while (r.ring.header().opened.load() == 0 &&
             peers_[r.peer].process.alive() && Clock::now() < deadline) {
        bell.sleepers.fetch_add(1);
        uint32_t seen = bell.seq.load();
        if (r.ring.header().opened.load() == 0)
          shm::sleepOn(bell, seen,
                       std::min(deadline, Clock::now() + shm::kSleepSlice));
        bell.sleepers.fetch_sub(1);
      }
    }
  }

  /// The first ring with queued sends (under mutex_).
  OutRing *queued() const {
    for (const auto &entry : out_)
      if (!entry.second->queue.empty())
        return entry.second.get();
    return nullptr;
  }

  llvm::Error failureError() const {
    return llvm::make_error<LostRankError>(failure_->rank, failure_->message,
                                           failure_->timedOut);
  }

  /// Records the first failure of the drain thread (under mutex_) and
  /// drops every queued send: the job has failed.
  void fail(llvm::Error err) {
    Failure failure;
    llvm::handleAllErrors(
        std::move(err),
        [&](const LostRankError &e) {
          failure = {e.rank(), e.describe(), e.timedOut()};
        },
        [&](const llvm::ErrorInfoBase &e) { failure.message = e.message(); });
    if (!failure_)
      failure_ = std::move(failure);
    for (auto &entry : out_)
      entry.second->queue.clear();
  }

  /// Why the front message of `r`, which cannot move, never will: its
  /// receiver exited or has freed no space within the timeout.
  llvm::Error stalled(const OutRing &r, const Queued &q) const {
    if (!peers_[r.peer].process.alive())
      return lostRank(r.peer, "it exited, while waiting for " + q.what);
    if (Clock::now() - r.lastProgress >= timeout_)
      return lostRankTimedOut(r.peer, timeout_, q.what);
    return llvm::Error::success();
  }

  /// The drain thread: writes the queued sends, each ring in order.
  void drain() {
    std::vector<std::pair<OutRing *, Queued *>> active;
    while (true) {
      uint64_t seq;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] { return stop_ || queued() != nullptr; });
        if (stop_)
          return;
        active.clear();
        for (auto &entry : out_)
          if (!entry.second->queue.empty())
            active.push_back(
                {entry.second.get(), &entry.second->queue.front()});
        seq = workSeq_;
      }
      bool progress = false;
      for (auto &[r, q] : active) {
        bool moved = q->message.advance(r->ring);
        progress |= moved;
        if (q->message.finished()) {
          std::lock_guard<std::mutex> lock(mutex_);
          r->queue.pop_front();
          r->lastProgress = Clock::now();
          if (!queued())
            flushed_.notify_all();
        } else if (moved) {
          r->lastProgress = Clock::now();
        }
      }
      if (progress)
        continue;
      // Nothing moved: every active ring is full. Watch the peers, then
      // sleep on the first one's space bell until its receiver frees space,
      // a new send is queued (send() rings it too), or a slice passes.
      bool failed = false;
      for (auto &[r, q] : active)
        if (llvm::Error err = stalled(*r, *q)) {
          std::lock_guard<std::mutex> lock(mutex_);
          fail(std::move(err));
          flushed_.notify_all();
          failed = true;
          break;
        }
      if (failed)
        continue;
      OutRing *first = active.front().first;
      shm::Bell &bell = first->ring.header().spaceBell;
      bell.sleepers.fetch_add(1);
      uint32_t seen = bell.seq.load();
      sleepingOn_.store(&bell);
      bool changed;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        changed = stop_ || failure_ || workSeq_ != seq;
      }
      if (!changed && first->ring.writable() < shm::kFrameBytes)
        shm::sleepOn(bell, seen,
                     Clock::now() + (active.size() > 1
                                         ? std::chrono::milliseconds(1)
                                         : shm::kSleepSlice));
      sleepingOn_.store(nullptr);
      bell.sleepers.fetch_sub(1);
    }
  }

  int rank_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<PeerInfo> peers_;
  std::vector<bool> colocated_;
  /// Sending rings by (peer, channel): created by the caller's thread,
  /// their queues shared with the drain thread under mutex_.
  std::map<std::pair<int, int>, std::unique_ptr<OutRing>> out_;
  /// Receiving rings by (peer, channel): the caller's thread only.
  std::map<std::pair<int, int>, shm::ShmRing> in_;
  std::mutex mutex_;
  std::condition_variable work_, flushed_;
  uint64_t workSeq_ = 0;
  bool stop_ = false;
  struct Failure {
    int rank = -1;
    std::string message;
    bool timedOut = false;
  };
  std::optional<Failure> failure_;
  /// abandon() was called (the caller's thread): the destructor does not
  /// wait for receivers to map their rings.
  bool abandoned_ = false;
  std::atomic<shm::Bell *> sleepingOn_{nullptr};
  std::thread thread_;
};

} // namespace

llvm::Expected<std::unique_ptr<Link>> makeShmLink(const LinkSetup &setup) {
  if (!setup.store || setup.worldSize < 2)
    return nullptr;
  std::string policy = linkPolicyName(setup.link).str();
  PeerInfo self{hostIdentity(setup.hostId), shm::PeerProcess::self(), policy};
  std::string what = "the host identities of the ranks";
  auto published =
      storeCall<bool>(0, setup.timeout, what,
                      [store = setup.store, key = peerKey(setup.rank),
                       bytes = toBytes(encode(self))] {
                        store->set(key, bytes);
                        return true;
                      });
  if (!published)
    return published.takeError();
  // Every rank has passed the rendezvous and publishes at once.
  std::vector<PeerInfo> peers(static_cast<size_t>(setup.worldSize));
  Clock::time_point deadline = Clock::now() + setup.timeout;
  for (int r = 0; r < setup.worldSize; ++r) {
    std::string key = peerKey(r);
    while (true) {
      auto ready =
          storeCall<bool>(r, setup.timeout, what, [store = setup.store, key] {
            return store->check({key});
          });
      if (!ready)
        return ready.takeError();
      if (*ready)
        break;
      if (Clock::now() >= deadline)
        return lostRankTimedOut(r, setup.timeout, what);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    auto got = storeCall<std::string>(
        r, setup.timeout, what,
        [store = setup.store, key] { return toText(store->get(key)); });
    if (!got)
      return got.takeError();
    std::string text = std::move(*got);
    std::optional<PeerInfo> info = decode(text);
    if (!info)
      return makeError(
          llvm::formatv("internal error: rank {0} published a malformed "
                        "host identity for the shared-memory link",
                        r)
              .str());
    if (info->policy != policy)
      return makeError(llvm::formatv("{4} differs between ranks: rank {0} "
                                     "has {1}, rank {2} has {3}",
                                     setup.rank, policy, r, info->policy,
                                     optionName(Option::Link))
                           .str());
    peers[r] = std::move(*info);
  }
  if (setup.link == LinkPolicy::Gloo)
    return nullptr;
  std::vector<bool> colocated(static_cast<size_t>(setup.worldSize));
  bool any = false;
  for (int r = 0; r < setup.worldSize; ++r) {
    colocated[r] = r != setup.rank && peers[r].host == self.host;
    any |= colocated[r];
    if (r != setup.rank && !colocated[r] && setup.link == LinkPolicy::Shm)
      return makeError(llvm::formatv("{2} shm needs every rank on one "
                                     "host, but rank {0} runs on another "
                                     "host than rank {1}; use {2} auto "
                                     "or {2} gloo",
                                     r, setup.rank, optionName(Option::Link))
                           .str());
  }
  if (!any)
    return nullptr;
  return std::make_unique<ShmLink>(setup, std::move(peers),
                                   std::move(colocated));
}

} // namespace ppc
