//===- runtime/link/C10dWork.h - Sends and receives as c10d Work ----------===//
//
// The links built on c10d process groups (GlooLink.cpp, NcclLink.cpp) start
// each message as a c10d::Work and wait for it with a deadline. This header
// holds what they share: waiting for one Work, and the list of sends in
// flight (bounded, flushed with one deadline for all).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_C10DWORK_H
#define PPC_RUNTIME_LINK_C10DWORK_H

#include "runtime/link/Link.h"
#include "runtime/platform/Duration.h"

#include <algorithm>
#include <deque>
#include <string>
#include <thread>

namespace ppc {

/// How a Work is waited for. Gloo's Work::wait(timeout) blocks; NCCL work
/// completes on the GPU and is polled: ProcessGroupNCCL's Work::wait(timeout)
/// only blocks the CPU under TORCH_NCCL_BLOCKING_WAIT, a process-wide switch.
enum class WorkWait { Blocking, Polled };

/// Waits for `work` until `deadline` by polling isCompleted(), then lets
/// wait() report a failure and order the current CUDA stream after it.
/// Returns false on timeout.
inline bool pollWork(const compat::WorkPtr &work,
                     std::chrono::steady_clock::time_point deadline) {
  for (int spins = 0; !work->isCompleted(); ++spins) {
    if (std::chrono::steady_clock::now() >= deadline)
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

/// Waits for `work` until `deadline`, at least 1 ms (0 means "no timeout"
/// to c10d and Gloo). Returns false on timeout; throws what the work throws.
inline bool waitFor(const compat::WorkPtr &work, WorkWait how,
                    std::chrono::steady_clock::time_point deadline) {
  if (how == WorkWait::Polled)
    return pollWork(work, deadline);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return compat::waitWork(work, std::max(left, std::chrono::milliseconds(1)));
}

/// Starts a receive with `start` (returning its Work) and waits for it up
/// to `timeout`. Errors: LostRankError.
template <typename Start>
llvm::Error finishRecv(int peer, std::chrono::milliseconds timeout,
                       const llvm::Twine &what, WorkWait how, Start &&start) {
  bool done = false;
  if (llvm::Error err = guardPeer(peer, timeout, what, [&] {
        compat::WorkPtr work = start();
        done = waitFor(work, how, deadlineAfter(timeout));
      }))
    return err;
  if (!done)
    return lostRankTimedOut(peer, timeout, what);
  return llvm::Error::success();
}

/// The sends of one link still in flight, in the order they started.
class PendingSends {
public:
  PendingSends(std::chrono::milliseconds timeout, WorkWait how)
      : timeout_(timeout), how_(how) {}

  /// Abandoned sends (after an error) must not block the exit.
  ~PendingSends() {
    for (Pending &p : pending_)
      abortWork(p.work);
  }

  /// Starts a send with `start` (returning its Work) and keeps it, at most
  /// kMaxPending at once. Errors: LostRankError.
  template <typename Start>
  llvm::Error start(int peer, const llvm::Twine &what, Start &&start) {
    if (llvm::Error err = reap())
      return err;
    if (pending_.size() >= kMaxPending) {
      if (llvm::Error err = wait(pending_.front(), deadlineAfter(timeout_)))
        return err;
      pending_.pop_front();
    }
    return guardPeer(peer, timeout_, what, [&] {
      pending_.push_back({start(), peer, what.str()});
    });
  }

  /// Waits for every send until `deadline`: a stalled peer costs one
  /// timeout, not one per message. Errors: LostRankError.
  llvm::Error flush(std::chrono::steady_clock::time_point deadline) {
    for (Pending &p : pending_)
      if (llvm::Error err = wait(p, deadline))
        return err;
    pending_.clear();
    return llvm::Error::success();
  }

  /// Whether every send started so far has completed.
  bool done() const {
    return std::all_of(pending_.begin(), pending_.end(),
                       [](const Pending &p) { return p.work->isCompleted(); });
  }

  /// Aborts `work`, ignoring failures.
  static void abortWork(const compat::WorkPtr &work) {
    try {
      work->abort();
    } catch (...) {
    }
  }

private:
  /// Sends in flight before start() waits for the oldest: keeps memory
  /// bounded when a receiver falls behind.
  static constexpr size_t kMaxPending = 64;

  struct Pending {
    compat::WorkPtr work;
    int peer;
    std::string what;
  };

  llvm::Error wait(Pending &p, std::chrono::steady_clock::time_point deadline) {
    bool finished = false;
    if (llvm::Error err = guardPeer(p.peer, timeout_, p.what, [&] {
          finished = waitFor(p.work, how_, deadline);
        }))
      return err;
    if (!finished)
      return lostRankTimedOut(p.peer, timeout_, p.what);
    return llvm::Error::success();
  }

  /// Drops completed sends so the list stays short; reports failed ones.
  llvm::Error reap() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending &p = pending_[i];
      if (p.work->isCompleted()) {
        if (llvm::Error err = guardPeer(p.peer, timeout_, p.what, [&] {
              if (how_ == WorkWait::Polled)
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

  std::chrono::milliseconds timeout_;
  WorkWait how_;
  std::deque<Pending> pending_;
};

} // namespace ppc

#endif // PPC_RUNTIME_LINK_C10DWORK_H
