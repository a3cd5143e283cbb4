//===- runtime/link/ShmRing.cpp - A one-way byte ring in shared memory ----===//
//
// This file implements the ring, its waits and the peer liveness check of
// ShmRing.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/ShmRing.h"

#include "lib/Error.h"
#include "runtime/link/Link.h"

#include "llvm/Support/FormatVariadic.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

namespace ppc::shm {

namespace {

/// How long a waiter spins before it sleeps: long enough to catch a peer
/// that answers at once (a small message's round trip) even when that peer
/// was itself asleep, short enough that an idle rank costs no CPU. With
/// 50 µs, below a futex wake-up on a loaded 2-core VM, a ping-pong fell
/// into a regime where each side slept and woke the other (55 µs per
/// message); with 200 µs it stays awake (0.3 µs).
constexpr std::chrono::microseconds kSpin(200);

/// The largest ring a peer may ask this process to map.
constexpr uint64_t kMaxCapacity = uint64_t(1) << 30;

/// The name of every ring's memfd: a receiver opens only such a file.
constexpr const char *kMemfdName = "ppc-shm-ring";

std::string systemError(const llvm::Twine &what) {
  return (what + ": " + std::strerror(errno)).str();
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Waits until `ready()` holds: spins kSpin, then sleeps on `bell` in
/// slices, checking between slices whether `peer` still runs. Returns
/// success when ready; a LostRankError when the peer exits or nothing
/// becomes ready within the peer's timeout.
template <typename Ready>
llvm::Error waitFor(Bell &bell, const RingPeer &peer, const llvm::Twine &what,
                    Ready ready) {
  if (ready())
    return llvm::Error::success();
  Clock::time_point start = Clock::now();
  Clock::time_point spinEnd = start + kSpin;
  for (unsigned i = 1;; ++i) {
    if (ready())
      return llvm::Error::success();
    cpuRelax();
    if (i % 64 == 0 && Clock::now() >= spinEnd)
      break;
  }
  Clock::time_point deadline = start + peer.timeout;
  while (true) {
    bell.sleepers.fetch_add(1);
    uint32_t seen = bell.seq.load();
    bool now = ready();
    if (!now)
      sleepOn(bell, seen, std::min(deadline, Clock::now() + kSleepSlice));
    bell.sleepers.fetch_sub(1);
    if (now || ready())
      return llvm::Error::success();
    if (!peer.process.alive()) {
      // It may have finished just before it exited.
      if (ready())
        return llvm::Error::success();
      return lostRank(peer.rank, "it exited, while waiting for " + what);
    }
    if (Clock::now() >= deadline)
      return lostRankTimedOut(peer.rank, peer.timeout, what);
  }
}

} // namespace

uint64_t processStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
  size_t close = text.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string state;
  fields >> state;
  if (state.empty() || state == "Z" || state == "X")
    return 0;
  // Fields 4..21 follow the state (3); the start time is field 22.
  std::string skip;
  for (int f = 4; f < 22; ++f)
    fields >> skip;
  uint64_t start = 0;
  fields >> start;
  return fields ? start : 0;
}

PeerProcess PeerProcess::self() {
  pid_t pid = getpid();
  return PeerProcess(pid, processStartTime(pid));
}

bool PeerProcess::alive() const {
  if (pid_ <= 0)
    return false;
  uint64_t start = processStartTime(pid_);
  return start != 0 && start == startTime_;
}

void sleepOn(Bell &bell, uint32_t seen, Clock::time_point until) {
  auto left = until - Clock::now();
  if (left <= Clock::duration::zero())
    return;
  if (left > kSleepSlice)
    left = kSleepSlice;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts{static_cast<time_t>(ns / 1000000000),
              static_cast<long>(ns % 1000000000)};
  // A shared (not FUTEX_PRIVATE) wait: the word lives in a mapping other
  // processes share. EAGAIN (the seq moved), EINTR and ETIMEDOUT all mean
  // "look again".
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&bell.seq), FUTEX_WAIT, seen,
          &ts, nullptr, 0);
}

void ring(Bell &bell) {
  bell.seq.fetch_add(1);
  if (bell.sleepers.load() != 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&bell.seq), FUTEX_WAKE,
            INT_MAX, nullptr, nullptr, 0);
}

llvm::Expected<ShmRing> ShmRing::create(size_t capacity) {
  uint64_t cap = 4096;
  while (cap < capacity && cap < kMaxCapacity)
    cap <<= 1;
  int fd = memfd_create(kMemfdName, MFD_CLOEXEC);
  if (fd < 0)
    return makeError(systemError("cannot create a shared-memory ring"));
  size_t size = kHeaderBytes + cap;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    std::string err = systemError("cannot create a shared-memory ring");
    close(fd);
    return makeError(err);
  }
  void *base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    std::string err = systemError("cannot map a shared-memory ring");
    close(fd);
    return makeError(err);
  }
  ShmRing r;
  r.header_ = new (base) RingHeader();
  r.header_->magic = kRingMagic;
  r.header_->nonce = std::random_device()() |
                     (static_cast<uint64_t>(std::random_device()()) << 32);
  r.header_->capacity = cap;
  r.data_ = static_cast<unsigned char *>(base) + kHeaderBytes;
  r.capacity_ = cap;
  r.mapped_ = size;
  r.fd_ = fd;
  return r;
}

/// The error when `link` (a /proc/.../fd/N link) does not name a ring's
/// memfd, or none.
static std::optional<std::string> notARing(const std::string &path,
                                           const std::string &link) {
  char target[PATH_MAX] = {0};
  ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n < 0)
    return systemError("cannot open the shared-memory ring " + path);
  std::string text(target, static_cast<size_t>(n));
  if (text != std::string("/memfd:") + kMemfdName + " (deleted)")
    return "the shared-memory ring " + path + " is not a ppc ring (it is '" +
           printable(text) + "')";
  return std::nullopt;
}

llvm::Expected<ShmRing> ShmRing::open(const std::string &path, uint64_t nonce) {
  // Nothing is opened that is not a ring's memfd: a descriptor published
  // by someone else could name any file the peer holds.
  if (auto problem = notARing(path, path))
    return makeError(*problem);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return makeError(systemError("cannot open the shared-memory ring " + path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    std::string err = systemError("cannot open the shared-memory ring " + path);
    close(fd);
    return makeError(err);
  }
  // What was opened, not what the link named a moment before.
  std::optional<std::string> problem =
      notARing(path, "/proc/self/fd/" + std::to_string(fd));
  if (!problem && (!S_ISREG(st.st_mode) || st.st_nlink != 0))
    problem = "the shared-memory ring " + path + " is not a ppc ring";
  if (!problem && st.st_uid != geteuid())
    problem = "the shared-memory ring " + path + " belongs to another user";
  if (problem) {
    close(fd);
    return makeError(*problem);
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes + 4096 || size > kHeaderBytes + kMaxCapacity) {
    close(fd);
    return makeError(llvm::formatv("the shared-memory ring {0} has {1} bytes, "
                                   "not a ring's size",
                                   path, size)
                         .str());
  }
  void *base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  std::string mapError =
      base == MAP_FAILED
          ? systemError("cannot map the shared-memory ring " + path)
          : "";
  // The mapping keeps the memory; the descriptor is not needed.
  close(fd);
  if (base == MAP_FAILED)
    return makeError(mapError);
  ShmRing r;
  r.header_ = static_cast<RingHeader *>(base);
  r.mapped_ = size;
  r.data_ = static_cast<unsigned char *>(base) + kHeaderBytes;
  uint64_t cap = r.header_->capacity;
  if (r.header_->magic != kRingMagic || r.header_->nonce != nonce)
    return makeError("the shared-memory ring " + path +
                     " is not the one its creator published");
  if (cap == 0 || (cap & (cap - 1)) != 0 || kHeaderBytes + cap != size)
    return makeError(
        llvm::formatv("the shared-memory ring {0} claims {1} bytes of data in "
                      "a file of {2}",
                      path, cap, size)
            .str());
  r.capacity_ = cap;
  return r;
}

ShmRing::ShmRing(ShmRing &&other) noexcept { *this = std::move(other); }

ShmRing &ShmRing::operator=(ShmRing &&other) noexcept {
  if (this != &other) {
    reset();
    header_ = other.header_;
    data_ = other.data_;
    capacity_ = other.capacity_;
    mapped_ = other.mapped_;
    fd_ = other.fd_;
    other.header_ = nullptr;
    other.data_ = nullptr;
    other.fd_ = -1;
  }
  return *this;
}

ShmRing::~ShmRing() { reset(); }

void ShmRing::reset() {
  if (header_)
    munmap(header_, mapped_);
  if (fd_ >= 0)
    close(fd_);
  header_ = nullptr;
  data_ = nullptr;
  fd_ = -1;
}

uint64_t ShmRing::writable() const {
  uint64_t used = header_->head.load(std::memory_order_relaxed) -
                  header_->tail.load(std::memory_order_acquire);
  return used > capacity_ ? 0 : capacity_ - used;
}

size_t ShmRing::writeSome(const void *src, size_t n) {
  uint64_t room = writable();
  size_t count = static_cast<size_t>(std::min<uint64_t>(n, room));
  if (count == 0)
    return 0;
  uint64_t head = header_->head.load(std::memory_order_relaxed);
  size_t at = static_cast<size_t>(head & (capacity_ - 1));
  size_t first = std::min(count, static_cast<size_t>(capacity_ - at));
  const auto *bytes = static_cast<const unsigned char *>(src);
  std::memcpy(data_ + at, bytes, first);
  std::memcpy(data_, bytes + first, count - first);
  header_->head.store(head + count);
  ring(header_->dataBell);
  return count;
}

llvm::Expected<uint64_t> ShmRing::readable() const {
  uint64_t used = header_->head.load(std::memory_order_acquire) -
                  header_->tail.load(std::memory_order_relaxed);
  if (used > capacity_)
    return makeError(
        llvm::formatv("internal error: a shared-memory ring holds {0} bytes "
                      "in {1} of space",
                      used, capacity_)
            .str());
  return used;
}

size_t ShmRing::readSome(void *dst, size_t n) {
  auto ready = readable();
  if (!ready) {
    llvm::consumeError(ready.takeError());
    return 0;
  }
  size_t count = static_cast<size_t>(std::min<uint64_t>(n, *ready));
  if (count == 0)
    return 0;
  uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  size_t at = static_cast<size_t>(tail & (capacity_ - 1));
  size_t first = std::min(count, static_cast<size_t>(capacity_ - at));
  auto *bytes = static_cast<unsigned char *>(dst);
  std::memcpy(bytes, data_ + at, first);
  std::memcpy(bytes + first, data_, count - first);
  header_->tail.store(tail + count);
  ring(header_->spaceBell);
  return count;
}

void makeFrame(unsigned char (&frame)[kFrameBytes], int32_t tag,
               uint64_t bytes) {
  std::memcpy(frame, &kFrameMagic, 4);
  std::memcpy(frame + 4, &tag, 4);
  std::memcpy(frame + 8, &bytes, 8);
}

Outgoing::Outgoing(int32_t tag, const void *src, uint64_t n)
    : data(static_cast<const unsigned char *>(src)), bytes(n) {
  makeFrame(frame, tag, n);
}

bool Outgoing::advance(ShmRing &ring) {
  uint64_t before = done;
  if (done < kFrameBytes) {
    // The frame goes in whole, so that a reader never sees half of one
    // followed by a stall on a full ring it cannot drain.
    if (ring.writable() < kFrameBytes)
      return false;
    ring.writeSome(frame, kFrameBytes);
    done = kFrameBytes;
  }
  while (!finished()) {
    size_t n = ring.writeSome(data + (done - kFrameBytes),
                              static_cast<size_t>(std::min<uint64_t>(
                                  kFrameBytes + bytes - done, kChunkBytes)));
    if (n == 0)
      break;
    done += n;
  }
  return done != before;
}

llvm::Error receiveMessage(ShmRing &ring, const RingPeer &peer, int32_t tag,
                           void *dst, uint64_t bytes, const llvm::Twine &what) {
  RingHeader &h = ring.header();
  std::string corrupt;
  auto atLeast = [&](uint64_t n) {
    return [&, n] {
      auto ready = ring.readable();
      if (!ready) {
        // A corrupt ring never becomes ready; the error ends the wait.
        corrupt = llvm::toString(ready.takeError());
        return true;
      }
      return *ready >= n;
    };
  };
  if (llvm::Error err = waitFor(h.dataBell, peer, what, atLeast(kFrameBytes)))
    return err;
  if (!corrupt.empty())
    return makeError(corrupt);
  unsigned char frame[kFrameBytes];
  ring.readSome(frame, kFrameBytes);
  uint32_t magic;
  int32_t gotTag;
  uint64_t gotBytes;
  std::memcpy(&magic, frame, 4);
  std::memcpy(&gotTag, frame + 4, 4);
  std::memcpy(&gotBytes, frame + 8, 8);
  if (magic != kFrameMagic || gotTag != tag || gotBytes != bytes)
    return makeError(
        llvm::formatv("internal error: rank {0} sent a shared-memory message "
                      "(tag {1}, {2} bytes{3}) where {4} was expected (tag "
                      "{5}, {6} bytes)",
                      peer.rank, gotTag, gotBytes,
                      magic == kFrameMagic ? "" : ", no frame", what.str(), tag,
                      bytes)
            .str());
  auto *out = static_cast<unsigned char *>(dst);
  uint64_t got = 0;
  while (got < bytes) {
    if (llvm::Error err = waitFor(h.dataBell, peer, what, atLeast(1)))
      return err;
    if (!corrupt.empty())
      return makeError(corrupt);
    got += ring.readSome(out + got, static_cast<size_t>(std::min<uint64_t>(
                                        bytes - got, kChunkBytes)));
  }
  return llvm::Error::success();
}

llvm::Error sendMessage(ShmRing &ring, const RingPeer &peer, Outgoing &message,
                        const llvm::Twine &what) {
  while (!message.finished()) {
    message.advance(ring);
    if (message.finished())
      break;
    uint64_t need = message.done < kFrameBytes ? kFrameBytes : 1;
    if (llvm::Error err = waitFor(ring.header().spaceBell, peer, what,
                                  [&] { return ring.writable() >= need; }))
      return err;
  }
  return llvm::Error::success();
}

} // namespace ppc::shm
