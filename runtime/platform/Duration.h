//===- runtime/platform/Duration.h ----------------------------------------===//
//
// Durations and the deadlines they become.
//
// Every duration ppc takes (a timeout, a grace period) lies in one documented
// range, and every conversion of one saturates instead of overflowing:
// seconds that do not fit a millisecond count become the largest count, and
// a deadline past the end of the steady clock is the end of the clock. A
// duration is never added to a clock reading any other way (a huge timeout
// added with `+` wraps into the past and fails at once). Part of
// libppc_runtime's public API (Pipeline.h includes it).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_DURATION_H
#define PPC_RUNTIME_PLATFORM_DURATION_H

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ratio>

namespace ppc {

/// The longest duration any option takes: 7 days, far beyond any wait
/// worth making, far below what a clock reading plus it can overflow.
constexpr double kMaxDurationSeconds = 7 * 24 * 60 * 60;
constexpr std::chrono::milliseconds kMaxDuration{
    static_cast<int64_t>(kMaxDurationSeconds) * 1000};
/// The shortest timeout: 1 ms, the resolution of every wait (a shorter one
/// would round to 0 ms, which c10d and Gloo read as "no timeout").
constexpr double kMinTimeoutSeconds = 0.001;
constexpr std::chrono::milliseconds kMinTimeout{1};

using SteadyClock = std::chrono::steady_clock;

/// Milliseconds of `d`, as a double (for stats and reports).
inline double toMilliseconds(SteadyClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}
/// Milliseconds from `start` until now.
inline double msSince(SteadyClock::time_point start) {
  return toMilliseconds(SteadyClock::now() - start);
}

/// `seconds` as a duration of type To, rounded to the nearest tick and
/// saturating: NaN is zero, and anything beyond To's range (1e300, inf,
/// -inf) is To::max() or To::min().
template <typename To> To durationFromSeconds(double seconds) {
  using Rep = typename To::rep;
  static_assert(std::numeric_limits<Rep>::is_integer);
  if (std::isnan(seconds))
    return To::zero();
  long double ticks =
      static_cast<long double>(seconds) * To::period::den / To::period::num;
  if (ticks >= static_cast<long double>(std::numeric_limits<Rep>::max()))
    return To::max();
  if (ticks <= static_cast<long double>(std::numeric_limits<Rep>::min()))
    return To::min();
  return To(static_cast<Rep>(std::llround(ticks)));
}

/// `d` in the steady clock's unit, saturating at its range (milliseconds
/// hold 10^6 times longer spans than the clock's nanoseconds).
template <typename Rep, typename Period>
SteadyClock::duration toClockDuration(std::chrono::duration<Rep, Period> d) {
  using From = std::chrono::duration<Rep, Period>;
  using To = SteadyClock::duration;
  static_assert(std::ratio_less_equal_v<typename To::period, Period>,
                "a duration no finer than the clock's");
  // Compared in From's unit: converting `d` to the clock's could overflow.
  constexpr From top = std::chrono::duration_cast<From>(To::max());
  constexpr From bottom = std::chrono::duration_cast<From>(To::min());
  if (d.count() >= top.count())
    return To::max();
  if (d.count() <= bottom.count())
    return To::min();
  return std::chrono::duration_cast<To>(d);
}

/// `t + d`, saturating at the clock's first and last time points.
inline SteadyClock::time_point saturatingAdd(SteadyClock::time_point t,
                                             SteadyClock::duration d) {
  using Rep = SteadyClock::duration::rep;
  Rep since = t.time_since_epoch().count();
  if (d.count() > 0 && since > std::numeric_limits<Rep>::max() - d.count())
    return SteadyClock::time_point::max();
  if (d.count() < 0 && since < std::numeric_limits<Rep>::min() - d.count())
    return SteadyClock::time_point::min();
  return t + d;
}

/// The time point `d` after `now`, saturating (saturatingAdd).
template <typename Rep, typename Period>
SteadyClock::time_point
deadlineAfter(std::chrono::duration<Rep, Period> d,
              SteadyClock::time_point now = SteadyClock::now()) {
  return saturatingAdd(now, toClockDuration(d));
}

} // namespace ppc

#endif // PPC_RUNTIME_PLATFORM_DURATION_H
