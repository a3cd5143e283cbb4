//===- tests/unit/tools/ProgressTest.cpp - Rates and the time left --------===//
//
// Tests RateMeter and the progress text of tools/ppc/Progress.h with
// made-up times: the rates count from the first record (which carries the
// start-up), over at least a second, and predict the time left.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Progress.h"

#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace ppc;

namespace {
ProgressClock::time_point at(double seconds) {
  return ProgressClock::time_point(
      std::chrono::duration_cast<ProgressClock::duration>(
          std::chrono::duration<double>(seconds)));
}
} // namespace

// Tests that a slow first unit (shape inference) does not skew the steady
// rate or the time left.
TEST(ProgressTest, RatesCountFromTheEndOfTheFirstUnit) {
  RateMeter meter(at(0));
  EXPECT_FALSE(meter.unitsPerSecond());
  meter.record(1, 8, at(2)); // 2 s of start-up: no rate, no estimate
  EXPECT_FALSE(meter.unitsPerSecond());
  EXPECT_FALSE(meter.samplesPerSecond());
  EXPECT_FALSE(meter.secondsLeft(10));
  meter.record(3, 16, at(3)); // then 2 units in 1 s
  EXPECT_DOUBLE_EQ(*meter.unitsPerSecond(), 2);
  EXPECT_DOUBLE_EQ(*meter.samplesPerSecond(), 16);
  EXPECT_DOUBLE_EQ(*meter.secondsLeft(10), 3.5);
  EXPECT_DOUBLE_EQ(*meter.secondsLeft(3), 0);
  EXPECT_DOUBLE_EQ(meter.elapsedSeconds(), 3);
  EXPECT_DOUBLE_EQ(*meter.overallSamplesPerSecond(), 8);
  EXPECT_EQ(meter.samples(), 24);
}

// Tests that units completing together (a window's batches, written one
// after another in microseconds) give no rate until the steady window spans
// a second, instead of a rate of a hundred thousand batches a second.
TEST(ProgressTest, UnitsDoneTogetherGiveNoRateUntilASecondPassed) {
  RateMeter meter(at(0));
  for (int done = 1; done <= 8; ++done)
    meter.record(done, 5, at(1 + done * 1e-6));
  EXPECT_FALSE(meter.unitsPerSecond());
  EXPECT_FALSE(meter.samplesPerSecond());
  EXPECT_FALSE(meter.secondsLeft(16));
  // The next window's batches, 1.5 s later: 15 batches since the first.
  for (int done = 9; done <= 16; ++done)
    meter.record(done, 5, at(2.5 + done * 1e-6));
  EXPECT_NEAR(*meter.unitsPerSecond(), 10, 1e-3);
  EXPECT_NEAR(*meter.samplesPerSecond(), 50, 1e-3);
  EXPECT_NEAR(*meter.secondsLeft(24), 0.8, 1e-3);
  EXPECT_NEAR(*meter.overallSamplesPerSecond(), 32, 1e-3);
}

// Tests that unknown samples (an output without a batch dimension) leave
// the sample rates out instead of reporting zero.
TEST(ProgressTest, UnknownSamplesHaveNoRate) {
  RateMeter meter(at(0));
  meter.record(1, -1, at(1));
  meter.record(2, 4, at(2)); // known again, but the total is not
  EXPECT_FALSE(meter.samples());
  EXPECT_TRUE(meter.unitsPerSecond());
  EXPECT_FALSE(meter.samplesPerSecond());
  EXPECT_FALSE(meter.overallSamplesPerSecond());
}

// Tests that no time passing gives no rate rather than an infinite one.
TEST(ProgressTest, NoTimeNoRate) {
  RateMeter meter(at(5));
  meter.record(1, 4, at(5));
  EXPECT_FALSE(meter.unitsPerSecond());
  EXPECT_FALSE(meter.secondsLeft(4));
}

TEST(ProgressTest, DurationsAndRatesForPeople) {
  EXPECT_EQ(formatSeconds(0.0421), "0.042 s");
  EXPECT_EQ(formatSeconds(12.34), "12.3 s");
  EXPECT_EQ(formatSeconds(125), "2 min 5 s");
  EXPECT_EQ(formatSeconds(3780), "1 h 3 min");
  EXPECT_EQ(formatSeconds(-1), "0.000 s");
  EXPECT_EQ(formatRate(780.4, "samples"), "780 samples/s");
  EXPECT_EQ(formatRate(12.54, "batches"), "12.5 batches/s");
  EXPECT_EQ(formatRate(3.216, "batches"), "3.22 batches/s");
}

// Tests the Lines style: the first and last units always show, the ones
// between at most once a second, each as one plain line.
TEST(ProgressTest, LinesAtTheEdgesAndOnceASecond) {
  std::string text;
  llvm::raw_string_ostream os(text);
  Progress progress(os, ProgressStyle::Lines, "batch", "batches", 4, at(0));
  progress.update(1, 5, at(1));
  progress.update(2, 5, at(1.5)); // half a second after the last line
  progress.update(3, 5, at(2.1));
  progress.update(4, 5, at(2.2));
  os.flush();
  EXPECT_EQ(text,
            "progress: batch 1/4 (25%)\n"
            "progress: batch 3/4 (75%), 1.82 batches/s, 9.09 samples/s, "
            "0.550 s left\n"
            "progress: batch 4/4 (100%), 2.50 batches/s, 12.5 samples/s\n");
}

// Tests that Off prints nothing and Redraw rewrites one line in place.
TEST(ProgressTest, OffAndRedraw) {
  std::string text;
  llvm::raw_string_ostream os(text);
  Progress off(os, ProgressStyle::Off, "step", "steps", 2, at(0));
  off.update(1, 1, at(1));
  off.update(2, 1, at(2));
  off.clear();
  os.flush();
  EXPECT_EQ(text, "");
  Progress redraw(os, ProgressStyle::Redraw, "batch", "batches", 2, at(0));
  redraw.update(1, -1, at(1));
  redraw.update(2, -1, at(3));
  redraw.clear();
  os.flush();
  EXPECT_EQ(text, "\rprogress: batch 1/2 (50%)\x1b[K"
                  "\rprogress: batch 2/2 (100%), 0.50 batches/s\x1b[K\r\x1b[K");
}
