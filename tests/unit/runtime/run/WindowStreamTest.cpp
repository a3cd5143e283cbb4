//===- tests/unit/runtime/run/WindowStreamTest.cpp ------------------------===//
//
// Tests runtime/run/WindowStream.h with a fake runner: windows form from
// the submit() and flush() sequence alone, run on the stream's own thread
// in order, and their outputs come out of next() batch by batch; submit()
// holds the caller back at two windows in flight; a window's failure is
// reported whole by the next call, later calls say the stream failed
// earlier, and the outputs of earlier windows stay; destruction waits for
// the window under way and joins, after a failure too.
//
//===----------------------------------------------------------------------===//
#include "runtime/run/WindowStream.h"

#include "lib/Error.h"
#include "runtime/run/Pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace ppc;

namespace {

WindowStream::Batch batch(int b) {
  WindowStream::Batch out;
  out.label = "b" + std::to_string(b);
  out.microbatches.push_back({c10::IValue(static_cast<int64_t>(b))});
  return out;
}

/// A runner that records its windows (their labels) and makes each batch's
/// output its own number; a window holding `failOn` fails, and, while
/// `hold` is set, a window waits for release() before it runs.
struct FakeRunner {
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;
  int entered = 0;
  std::string failOn;
  std::vector<std::vector<std::string>> windows;
  std::thread::id thread;
  int maxInFlight = 0;
  WindowStream *stream = nullptr;

  /// Waits until a window has entered the runner.
  void waitEntered() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return entered > 0; });
  }

  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      hold = false;
    }
    cv.notify_all();
  }

  WindowStream::Runner runner() {
    return [this](std::vector<WindowStream::Batch> &batches)
               -> llvm::Expected<WindowStream::Window> {
      std::unique_lock<std::mutex> lock(mu);
      ++entered;
      cv.notify_all();
      cv.wait(lock, [&] { return !hold; });
      thread = std::this_thread::get_id();
      if (stream)
        maxInFlight = std::max(maxInFlight, stream->inFlight());
      std::vector<std::string> labels;
      WindowStream::Window window;
      auto stats = std::make_shared<RunStats>();
      stats->batches = static_cast<int64_t>(batches.size());
      window.stats = stats;
      for (WindowStream::Batch &b : batches) {
        labels.push_back(b.label);
        if (b.label == failOn)
          return makeError(b.label + ": stage 0 failed: boom");
        window.outputs.push_back({b.microbatches.front().front()});
      }
      windows.push_back(labels);
      return window;
    };
  }
};

/// Every output next() has, as batch numbers, and whether each began a
/// window.
std::vector<std::pair<int64_t, bool>> drain(WindowStream &stream) {
  std::vector<std::pair<int64_t, bool>> out;
  while (auto ready = stream.next())
    out.push_back({ready->outputs.front().toInt(), ready->firstOfWindow});
  return out;
}

TEST(WindowStreamTest, WindowsFollowSubmitsAndFlushesAndRunOnTheirThread) {
  FakeRunner fake;
  std::thread::id started;
  WindowStream stream(3, fake.runner(),
                      [&] { started = std::this_thread::get_id(); });
  for (int b = 0; b < 7; ++b)
    ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(b))));
  ASSERT_FALSE(llvm::errorToBool(stream.flush()));
  EXPECT_EQ(stream.inFlight(), 0);
  // A flush with nothing queued closes no window.
  ASSERT_FALSE(llvm::errorToBool(stream.flush()));
  for (int b = 7; b < 9; ++b)
    ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(b))));
  ASSERT_FALSE(llvm::errorToBool(stream.flush()));
  std::vector<std::vector<std::string>> want = {
      {"b0", "b1", "b2"}, {"b3", "b4", "b5"}, {"b6"}, {"b7", "b8"}};
  EXPECT_EQ(fake.windows, want);
  std::vector<std::pair<int64_t, bool>> got = drain(stream);
  std::vector<std::pair<int64_t, bool>> order = {
      {0, true},  {1, false}, {2, false}, {3, true}, {4, false},
      {5, false}, {6, true},  {7, true},  {8, false}};
  EXPECT_EQ(got, order);
  EXPECT_FALSE(stream.next().has_value());
  EXPECT_NE(fake.thread, std::this_thread::get_id());
  EXPECT_EQ(fake.thread, started);
}

TEST(WindowStreamTest, SubmitWaitsAtTwoWindowsInFlight) {
  FakeRunner fake;
  fake.hold = true;
  WindowStream stream(2, fake.runner());
  fake.stream = &stream;
  std::atomic<int> returned{0};
  std::thread caller([&] {
    for (int b = 0; b < 7; ++b) {
      if (llvm::Error err = stream.submit(batch(b)))
        ADD_FAILURE() << llvm::toString(std::move(err));
      ++returned;
    }
    EXPECT_FALSE(llvm::errorToBool(stream.flush()));
  });
  // The first window waits in the runner: 4 batches are in flight, and
  // the fifth submit() waits for a window to complete.
  while (stream.inFlight() < 4)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(returned.load(), 4);
  EXPECT_EQ(stream.inFlight(), 4);
  fake.release();
  caller.join();
  EXPECT_EQ(returned.load(), 7);
  EXPECT_LE(fake.maxInFlight, 4);
  EXPECT_EQ(drain(stream).size(), 7u);
}

TEST(WindowStreamTest, AFailureIsReportedOnceThenTheStreamRefuses) {
  FakeRunner fake;
  fake.failOn = "b2";
  WindowStream stream(1, fake.runner());
  // The failure surfaces at a submit() or at the flush(), as timing has
  // it, and whole: once.
  std::vector<std::string> errors;
  for (int b = 0; b < 6; ++b)
    if (llvm::Error err = stream.submit(batch(b)))
      errors.push_back(llvm::toString(std::move(err)));
  if (llvm::Error err = stream.flush())
    errors.push_back(llvm::toString(std::move(err)));
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors.front(), "b2: stage 0 failed: boom");
  for (size_t k = 1; k < errors.size(); ++k)
    EXPECT_EQ(errors[k], "the stream failed earlier (b2: stage 0 failed: "
                         "boom); it runs no more batches");
  EXPECT_EQ(llvm::toString(stream.submit(batch(9))),
            "the stream failed earlier (b2: stage 0 failed: boom); it runs "
            "no more batches");
  // No window ran after the failed one; the earlier ones' outputs stay.
  std::vector<std::vector<std::string>> want = {{"b0"}, {"b1"}};
  EXPECT_EQ(fake.windows, want);
  std::vector<std::pair<int64_t, bool>> order = {{0, true}, {1, true}};
  EXPECT_EQ(drain(stream), order);
  EXPECT_EQ(stream.inFlight(), 0);
}

TEST(WindowStreamTest, ARefusedBatchDropsTheOpenWindow) {
  FakeRunner fake;
  WindowStream stream(3, fake.runner());
  ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(0))));
  ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(1))));
  stream.dropOpen();
  EXPECT_EQ(stream.inFlight(), 0);
  ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(2))));
  ASSERT_FALSE(llvm::errorToBool(stream.flush()));
  std::vector<std::vector<std::string>> want = {{"b2"}};
  EXPECT_EQ(fake.windows, want);
}

TEST(WindowStreamTest, DestructionWaitsForTheWindowUnderWay) {
  FakeRunner fake;
  fake.hold = true;
  std::thread releaser;
  {
    WindowStream stream(1, fake.runner());
    fake.stream = &stream;
    ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(0))));
    ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(1))));
    fake.waitEntered();
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      fake.release();
    });
  }
  releaser.join();
  // The window under way completed; the one queued behind it was dropped.
  std::vector<std::vector<std::string>> want = {{"b0"}};
  EXPECT_EQ(fake.windows, want);
}

TEST(WindowStreamTest, DestructionAfterAFailureNotReported) {
  FakeRunner fake;
  fake.failOn = "b0";
  {
    WindowStream stream(1, fake.runner());
    ASSERT_FALSE(llvm::errorToBool(stream.submit(batch(0))));
    while (stream.inFlight() > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(fake.windows.empty());
}

} // namespace
