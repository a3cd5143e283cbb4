//===- runtime/run/WindowStream.h - Windows of batches in the background --===//
//
// The queue and the background thread behind Pipeline's streaming
// (runtime/run/Pipeline.h): batches are submitted one at a time, grouped
// in windows of windowBatches() consecutive batches (a window closes when
// it is full or at flush()), and one thread of its own runs the closed
// windows, oldest first, through the runner it was given, while the caller
// goes on submitting. What a window produced comes out of next(), batch by
// batch, in submission order.
//
// Which batches share a window depends only on the sequence of submit() and
// flush() calls, never on timing, so every rank of a job forms the same
// windows (each one a collective execution of a schedule).
//
// The bound: at most 2 * windowBatches() batches are in flight (submitted,
// their outputs not ready yet), the window under way and the next one;
// submit() blocks while that many are. So the next window is queued by the
// time the running one ends, and the thread starts it at once.
//
// Waits: submit() and flush() wait for the stream's thread, which wakes
// them whenever a window ends; a window's every wait for a peer is bounded
// by the pipeline's timeout (a lost peer fails the window), so a caller
// waits no longer than the windows ahead of it compute.
//
// Errors: the first error of a window stops the thread's work (the closed
// windows not started, and the open one, are dropped); the next submit() or
// flush() returns it, whole, and every later one says the stream failed
// earlier. The outputs of windows that completed before stay available from
// next(). The destructor stops the thread after the window under way, if
// any (the runner's waits are bounded), and joins it.
//
// Not thread-safe for several callers: one thread calls submit, flush and
// next. Internal to libppc_runtime.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_RUN_WINDOWSTREAM_H
#define PPC_RUNTIME_RUN_WINDOWSTREAM_H

#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ppc {

struct RunStats;

class WindowStream {
public:
  /// A submitted batch: its microbatches (on ranks that read model inputs)
  /// and how errors name it.
  struct Batch {
    std::vector<std::vector<c10::IValue>> microbatches;
    std::string label;
  };
  /// What the runner made of a window: per batch, its outputs, in order
  /// (exactly one entry per batch of the window), and the window's stats.
  struct Window {
    std::vector<std::vector<c10::IValue>> outputs;
    std::shared_ptr<const RunStats> stats;
  };
  /// One batch out of next(): its outputs, its window's stats, and whether
  /// it is its window's first batch.
  struct Ready {
    std::vector<c10::IValue> outputs;
    std::shared_ptr<const RunStats> stats;
    bool firstOfWindow = false;
  };
  /// Runs one window (it may move from the batches), on the stream's
  /// thread. Errors end the stream.
  using Runner = std::function<llvm::Expected<Window>(std::vector<Batch> &)>;

  /// A stream of windows of `windowBatches` (at least 1) batches run by
  /// `runner`; `threadStart`, if set, runs first on the stream's thread
  /// (the settings a thread of its own must make: LibTorch's intra-op
  /// threads). The thread starts with the first submit().
  WindowStream(int windowBatches, Runner runner,
               std::function<void()> threadStart = {});
  ~WindowStream();
  WindowStream(const WindowStream &) = delete;
  WindowStream &operator=(const WindowStream &) = delete;

  int windowBatches() const { return windowBatches_; }
  /// Batches submitted whose outputs are not ready yet: in the open window,
  /// in closed windows waiting, and in the window under way.
  int inFlight() const;

  /// Queues `batch` in the open window, closing it when it is full; first
  /// waits while 2 * windowBatches() batches are in flight. Errors: a
  /// window's failure (see above).
  llvm::Error submit(Batch batch);
  /// Closes the open window, if it holds batches, and waits until every
  /// submitted batch has run. Errors: as submit().
  llvm::Error flush();
  /// The oldest batch whose window has run and that next() has not handed
  /// out yet; nothing when there is none. Never waits.
  std::optional<Ready> next();
  /// Drops the open window's batches (after a batch was refused).
  void dropOpen();
  /// The failure not reported yet, or the later calls' "failed earlier";
  /// success when the stream has not failed.
  llvm::Error failure();

private:
  void work();
  llvm::Expected<Window> runGuarded(std::vector<Batch> &window);
  /// Under mu_.
  int inFlightLocked() const;
  llvm::Error failureLocked();
  void closeOpenLocked();
  void fail(llvm::Error err);

  const int windowBatches_;
  Runner runner_;
  std::function<void()> threadStart_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Batch> open_;
  std::deque<std::vector<Batch>> closed_;
  int running_ = 0;
  std::deque<Ready> ready_;
  /// The first failure, until a call reports it; its message, for the
  /// calls after.
  std::optional<llvm::Error> failure_;
  std::string failedWith_;
  bool failed_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace ppc

#endif // PPC_RUNTIME_RUN_WINDOWSTREAM_H
