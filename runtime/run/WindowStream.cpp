//===- runtime/run/WindowStream.cpp - Windows of batches in the background ===//
//
// This file implements WindowStream: the windows' queue, guarded by one
// mutex, and the thread that runs them.
//
//===----------------------------------------------------------------------===//
#include "runtime/run/WindowStream.h"

#include "lib/Error.h"

#include <algorithm>
#include <exception>

namespace ppc {

WindowStream::WindowStream(int windowBatches, Runner runner,
                           std::function<void()> threadStart)
    : windowBatches_(std::max(1, windowBatches)), runner_(std::move(runner)),
      threadStart_(std::move(threadStart)) {}

WindowStream::~WindowStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable())
    thread_.join();
  if (failure_)
    llvm::consumeError(std::move(*failure_));
}

int WindowStream::inFlightLocked() const {
  int n = running_ + static_cast<int>(open_.size());
  for (const std::vector<Batch> &w : closed_)
    n += static_cast<int>(w.size());
  return n;
}

int WindowStream::inFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inFlightLocked();
}

llvm::Error WindowStream::failureLocked() {
  if (!failed_)
    return llvm::Error::success();
  if (failure_) {
    llvm::Error err = std::move(*failure_);
    failure_.reset();
    return err;
  }
  return makeError("the stream failed earlier (" + failedWith_ +
                   "); it runs no more batches");
}

llvm::Error WindowStream::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failureLocked();
}

void WindowStream::closeOpenLocked() {
  if (open_.empty())
    return;
  closed_.push_back(std::move(open_));
  open_.clear();
  changed_.notify_all();
}

llvm::Error WindowStream::submit(Batch batch) {
  std::unique_lock<std::mutex> lock(mu_);
  if (llvm::Error err = failureLocked())
    return err;
  if (!thread_.joinable())
    thread_ = std::thread([this] { work(); });
  changed_.wait(
      lock, [&] { return failed_ || inFlightLocked() < 2 * windowBatches_; });
  if (llvm::Error err = failureLocked())
    return err;
  open_.push_back(std::move(batch));
  if (static_cast<int>(open_.size()) == windowBatches_)
    closeOpenLocked();
  return llvm::Error::success();
}

llvm::Error WindowStream::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  if (llvm::Error err = failureLocked())
    return err;
  closeOpenLocked();
  changed_.wait(lock,
                [&] { return failed_ || (closed_.empty() && running_ == 0); });
  return failureLocked();
}

std::optional<WindowStream::Ready> WindowStream::next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ready_.empty())
    return std::nullopt;
  Ready out = std::move(ready_.front());
  ready_.pop_front();
  return out;
}

void WindowStream::dropOpen() {
  std::lock_guard<std::mutex> lock(mu_);
  open_.clear();
  changed_.notify_all();
}

void WindowStream::fail(llvm::Error err) {
  // Keep the error whole (its type) for the call that reports it, and its
  // message for the calls after.
  err = llvm::handleErrors(
      std::move(err),
      [&](std::unique_ptr<llvm::ErrorInfoBase> info) -> llvm::Error {
        failedWith_ = info->message();
        return llvm::Error(std::move(info));
      });
  failure_.emplace(std::move(err));
  failed_ = true;
  open_.clear();
  closed_.clear();
}

llvm::Expected<WindowStream::Window>
WindowStream::runGuarded(std::vector<Batch> &window) {
  // The runner turns LibTorch's exceptions into errors; anything else that
  // escapes must not take the process down from a thread of its own.
  try {
    return runner_(window);
  } catch (const std::exception &e) {
    return makeError(
        std::string("internal error: the stream's thread failed: ") + e.what());
  }
}

void WindowStream::work() {
  if (threadStart_)
    threadStart_();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock,
                  [&] { return stopping_ || (!failed_ && !closed_.empty()); });
    if (stopping_)
      return;
    std::vector<Batch> window = std::move(closed_.front());
    closed_.pop_front();
    const size_t batches = window.size();
    running_ = static_cast<int>(batches);
    lock.unlock();
    llvm::Expected<Window> done = runGuarded(window);
    if (done && done->outputs.size() != batches)
      done = makeError("internal error: a window of " +
                       std::to_string(batches) + " batches gave " +
                       std::to_string(done->outputs.size()) + " outputs");
    window.clear();
    lock.lock();
    running_ = 0;
    if (!done) {
      fail(done.takeError());
    } else {
      for (size_t b = 0; b < done->outputs.size(); ++b)
        ready_.push_back({std::move(done->outputs[b]), done->stats, b == 0});
    }
    changed_.notify_all();
  }
}

} // namespace ppc
