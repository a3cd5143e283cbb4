//===- runtime/platform/BoundedCall.h - A call, bounded ---------*- C++ -*-===//
//
// c10d's TCPStore client reads its replies without a timeout (LibTorch 1.13
// always, 2.x for check() and get()), so a store whose host stops (SIGSTOP,
// a frozen machine) would block the call forever, and a thread blocked in
// recv() cannot be interrupted. runWithin() runs such a call on a thread of
// its own and waits for it until a deadline; past it the call is abandoned:
// its thread is detached, keeps what `fn` captured by value alive, and ends
// with the process. The rendezvous (runtime/link/Rendezvous.cpp) and the
// shared-memory link's store calls (runtime/link/ShmLink.cpp) use it, each
// turning the outcome into its own errors.
//
// Internal to libppc_runtime: not installed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_BOUNDEDCALL_H
#define PPC_RUNTIME_PLATFORM_BOUNDEDCALL_H

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace ppc {

/// What runWithin() saw: the value `fn` returned, or the exception it
/// threw, or, past the deadline, neither (timedOut).
template <typename T> struct BoundedOutcome {
  std::optional<T> value;
  std::exception_ptr error;
  bool timedOut = false;
};

/// Runs `fn` (returning T; it must capture by value what it uses) on a
/// thread of its own and waits for it until `deadline` (see the file
/// comment).
template <typename T, typename Fn>
BoundedOutcome<T> runWithin(std::chrono::steady_clock::time_point deadline,
                            Fn fn) {
  struct Call {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    BoundedOutcome<T> outcome;
  };
  auto call = std::make_shared<Call>();
  std::thread([call, fn = std::move(fn)]() mutable {
    BoundedOutcome<T> outcome;
    try {
      outcome.value = fn();
    } catch (...) {
      outcome.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(call->mutex);
    call->outcome = std::move(outcome);
    call->finished = true;
    call->done.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(call->mutex);
  if (!call->done.wait_until(lock, deadline, [&] { return call->finished; })) {
    BoundedOutcome<T> late;
    late.timedOut = true;
    return late;
  }
  return std::move(call->outcome);
}

} // namespace ppc

#endif // PPC_RUNTIME_PLATFORM_BOUNDEDCALL_H
