//===- runtime/link/ShmRing.h - A one-way byte ring in shared memory ------===//
//
// The pieces of the shared-memory link (runtime/link/ShmLink.cpp) that unit
// tests use directly: a single-producer / single-consumer byte ring in a memfd,
// the framing of messages on it, the wait that spins and then sleeps, and
// the liveness check of the process on the other side.
//
// Layout of a ring's memfd: one page of header (RingHeader), then
// `capacity` bytes of data (a power of two). `head` counts the bytes ever
// written, `tail` the bytes ever consumed; head - tail bytes are readable
// and capacity - (head - tail) writable. Pages are touched as the stream
// reaches them, so an idle ring costs little memory.
//
// A message is a 16-byte frame (kFrameMagic, tag, byte size) and then its
// bytes. The stream moves in chunks: a message larger than the ring (or
// than its free space) is written as space frees and read as it arrives,
// the two copies running concurrently. A receiver checks the frame against
// the message it expects (a mismatch is an internal error) and returns
// success only after the last byte, so a sender killed mid-message leaves a
// message that never completes: the receiver's wait then finds the sender
// gone and fails naming it.
//
// Waiting: each side spins up to 200 µs, then sleeps on a futex word
// of the header (its "bell") in slices of at most kSleepSlice, checking the
// peer's liveness between slices. The other side bumps the bell after it
// moves head or tail and wakes a sleeper only when one is registered.
//
// Everything in the mapping is written by another process and untrusted:
// counters are checked (head - tail never above capacity) before use.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_SHMRING_H
#define PPC_RUNTIME_LINK_SHMRING_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ppc::shm {

using Clock = std::chrono::steady_clock;

/// The longest single futex sleep: how soon a dead peer or a new queued
/// send is noticed at the latest.
constexpr std::chrono::milliseconds kSleepSlice(50);

/// A futex word and the count of its sleepers, in shared memory.
struct Bell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};
};

/// The first page of a ring's memfd.
struct RingHeader {
  uint64_t magic;
  /// A random value the creator publishes with the ring, so the opener knows
  /// it mapped that ring (not a reused pid's fd).
  uint64_t nonce;
  uint64_t capacity;
  /// Set to 1 by the receiver once it has mapped the ring (rung on the
  /// space bell): until then the sender must keep its memfd open.
  std::atomic<uint32_t> opened;
  alignas(64) std::atomic<uint64_t> head;
  Bell dataBell; ///< Rung by the producer after head moves.
  alignas(64) std::atomic<uint64_t> tail;
  Bell spaceBell; ///< Rung by the consumer after tail moves.
};

constexpr uint64_t kRingMagic = 0x3147'4e49'524d'4850ULL; // "PHMRING1"
constexpr uint32_t kFrameMagic = 0x4d53'5050U;            // "PPSM"
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kFrameBytes = 16;
/// The most bytes one copy into or out of a ring moves before it publishes
/// them, so that the two sides of a large message copy concurrently.
constexpr size_t kChunkBytes = 256 << 10;

/// A process on this host, recognised by its pid and start time (so that
/// a reused pid is not taken for it).
class PeerProcess {
public:
  PeerProcess() = default;
  PeerProcess(pid_t pid, uint64_t startTime)
      : pid_(pid), startTime_(startTime) {}
  /// This process.
  static PeerProcess self();
  pid_t pid() const { return pid_; }
  uint64_t startTime() const { return startTime_; }
  /// Whether the process still runs (a zombie does not).
  bool alive() const;

private:
  pid_t pid_ = 0;
  uint64_t startTime_ = 0;
};

/// The start time of process `pid` (field 22 of /proc/PID/stat), or 0
/// when it is gone or a zombie.
uint64_t processStartTime(pid_t pid);

/// Sleeps on `bell` until its seq differs from `seen`, it is woken, or
/// `until` passes (at most kSleepSlice).
void sleepOn(Bell &bell, uint32_t seen, Clock::time_point until);
/// Bumps `bell` and wakes its sleepers, if any.
void ring(Bell &bell);

/// One mapped ring. Move-only; unmaps (and closes its fd) when destroyed.
class ShmRing {
public:
  /// A new ring of `capacity` bytes (rounded up to a power of two, at least
  /// 4 KiB) in a memfd that this process keeps open. Errors: the system's,
  /// as "cannot create a shared-memory ring (...)".
  static llvm::Expected<ShmRing> create(size_t capacity);
  /// Maps the ring another process created, through `path`
  /// (/proc/PID/fd/N), checking its header against `nonce`. Before opening
  /// anything, `path` must name a ring's memfd ("/memfd:ppc-shm-ring
  /// (deleted)"), and the opened file must be such a memfd of this user,
  /// before it is mapped. Errors: "the shared-memory ring PATH is not a
  /// ppc ring (it is 'TARGET')", "... belongs to another user"; the file
  /// cannot be opened or mapped; a header that is not a ring's, or not the
  /// one published (nonce), or a size that does not match.
  static llvm::Expected<ShmRing> open(const std::string &path, uint64_t nonce);

  ShmRing() = default;
  ShmRing(ShmRing &&other) noexcept;
  ShmRing &operator=(ShmRing &&other) noexcept;
  ShmRing(const ShmRing &) = delete;
  ShmRing &operator=(const ShmRing &) = delete;
  ~ShmRing();

  bool valid() const { return header_ != nullptr; }
  int fd() const { return fd_; }
  uint64_t nonce() const { return header_->nonce; }
  uint64_t capacity() const { return capacity_; }
  RingHeader &header() { return *header_; }

  // Producer side.
  /// Bytes that can be written now (never above capacity; 0 when the
  /// counters are inconsistent, which the consumer reports).
  uint64_t writable() const;
  /// Writes min(n, writable()) bytes of `src`, publishes them and rings
  /// the data bell; returns the count written.
  size_t writeSome(const void *src, size_t n);

  // Consumer side.
  /// Bytes that can be read now, or an error when head - tail exceeds the
  /// capacity (a corrupt ring).
  llvm::Expected<uint64_t> readable() const;
  /// Reads min(n, readable) bytes into `dst`, frees them and rings the
  /// space bell; returns the count read.
  size_t readSome(void *dst, size_t n);

private:
  RingHeader *header_ = nullptr;
  unsigned char *data_ = nullptr;
  uint64_t capacity_ = 0;
  size_t mapped_ = 0;
  int fd_ = -1;
  void reset();
};

/// Builds the 16-byte frame of a message.
void makeFrame(unsigned char (&frame)[kFrameBytes], int32_t tag,
               uint64_t bytes);

/// A message being written into a ring, a chunk at a time: frame first,
/// then its bytes.
struct Outgoing {
  unsigned char frame[kFrameBytes];
  const unsigned char *data = nullptr;
  uint64_t bytes = 0;
  /// Bytes of frame + data written so far.
  uint64_t done = 0;

  Outgoing(int32_t tag, const void *src, uint64_t n);
  bool finished() const { return done == kFrameBytes + bytes; }
  /// Writes what fits now; returns whether anything was written.
  bool advance(ShmRing &ring);
};

/// Who is on the other side of a ring, for waits and errors.
struct RingPeer {
  int rank = 0;
  PeerProcess process;
  std::chrono::milliseconds timeout{60000};
};

/// Receives the message `tag` of `bytes` bytes from `ring` into `dst`.
/// Each wait (for the frame, then for more bytes) lasts at most
/// peer.timeout. Errors: LostRankError naming peer.rank when the sender
/// exits ("lost rank R (it exited, while waiting for WHAT)") or a wait
/// times out (lostRankTimedOut); an internal error for a frame with another
/// tag or size, or a corrupt ring. On error `dst` may hold part of the
/// message, and the ring is unusable.
llvm::Error receiveMessage(ShmRing &ring, const RingPeer &peer, int32_t tag,
                           void *dst, uint64_t bytes, const llvm::Twine &what);

/// Writes `message` into `ring` to the end, each wait for space lasting at
/// most peer.timeout. Errors: LostRankError as receiveMessage()'s.
llvm::Error sendMessage(ShmRing &ring, const RingPeer &peer, Outgoing &message,
                        const llvm::Twine &what);

} // namespace ppc::shm

#endif // PPC_RUNTIME_LINK_SHMRING_H
