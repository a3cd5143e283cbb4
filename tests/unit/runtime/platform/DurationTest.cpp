//===- tests/unit/runtime/platform/DurationTest.cpp -----------------------===//
//
// Saturating durations.
#include "runtime/platform/Duration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace ppc;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
} // namespace

TEST(DurationTest, SecondsToMillisecondsSaturate) {
  EXPECT_EQ(durationFromSeconds<milliseconds>(1.5), milliseconds(1500));
  EXPECT_EQ(durationFromSeconds<milliseconds>(kMinTimeoutSeconds), kMinTimeout);
  EXPECT_EQ(durationFromSeconds<milliseconds>(kMaxDurationSeconds),
            kMaxDuration);
  EXPECT_EQ(kMaxDuration, milliseconds(604800000));
  EXPECT_EQ(durationFromSeconds<milliseconds>(0.0004), milliseconds(0));
  EXPECT_EQ(durationFromSeconds<milliseconds>(0.0006), milliseconds(1));
  EXPECT_EQ(durationFromSeconds<milliseconds>(std::nan("")), milliseconds(0));
  EXPECT_EQ(durationFromSeconds<milliseconds>(kInf), milliseconds::max());
  EXPECT_EQ(durationFromSeconds<milliseconds>(1e300), milliseconds::max());
  EXPECT_EQ(durationFromSeconds<milliseconds>(-kInf), milliseconds::min());
  EXPECT_EQ(durationFromSeconds<milliseconds>(-1e300), milliseconds::min());
  EXPECT_EQ(durationFromSeconds<milliseconds>(-2), milliseconds(-2000));
  // 1e10 s holds in milliseconds, not in the clock's nanoseconds.
  EXPECT_EQ(durationFromSeconds<milliseconds>(1e10),
            milliseconds(10000000000000));
  EXPECT_EQ(durationFromSeconds<nanoseconds>(1e10), nanoseconds::max());
}

TEST(DurationTest, ClockDurationsSaturate) {
  EXPECT_EQ(toClockDuration(milliseconds(3)), nanoseconds(3000000));
  EXPECT_EQ(toClockDuration(milliseconds::max()), SteadyClock::duration::max());
  EXPECT_EQ(toClockDuration(milliseconds::min()), SteadyClock::duration::min());
  EXPECT_EQ(toClockDuration(std::chrono::hours(24 * 365 * 1000)),
            SteadyClock::duration::max());
  EXPECT_EQ(toClockDuration(nanoseconds::max()), nanoseconds::max());
}

TEST(DurationTest, DeadlinesSaturate) {
  SteadyClock::time_point now = SteadyClock::now();
  EXPECT_EQ(deadlineAfter(milliseconds(5), now), now + milliseconds(5));
  EXPECT_EQ(deadlineAfter(kMaxDuration, now), now + kMaxDuration);
  EXPECT_EQ(deadlineAfter(milliseconds::max(), now),
            SteadyClock::time_point::max());
  EXPECT_EQ(deadlineAfter(durationFromSeconds<milliseconds>(1e10), now),
            SteadyClock::time_point::max());
  EXPECT_EQ(deadlineAfter(nanoseconds::max(), now),
            SteadyClock::time_point::max());
  EXPECT_EQ(deadlineAfter(milliseconds(-5), now), now - milliseconds(5));
  // The most negative span the clock holds, not a wrapped one.
  EXPECT_EQ(deadlineAfter(milliseconds::min(), now),
            now + SteadyClock::duration::min());
  // A deadline already at the end of the clock stays there.
  EXPECT_EQ(saturatingAdd(SteadyClock::time_point::max(), milliseconds(500)),
            SteadyClock::time_point::max());
  EXPECT_EQ(saturatingAdd(SteadyClock::time_point::min(), -milliseconds(1)),
            SteadyClock::time_point::min());
  // Every deadline a valid duration makes lies in the future.
  EXPECT_GT(deadlineAfter(kMaxDuration), SteadyClock::now());
}
