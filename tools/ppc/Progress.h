//===- tools/ppc/Progress.h - How far a long command is --------*- C++ -*-===//
//
// What `ppc run` and `ppc train` print while they work, besides their
// results and errors: how many batches or steps are done, the rate and the
// time left. On a terminal it is one line redrawn in place; elsewhere plain
// lines when asked for (--progress); nothing under --quiet. RateMeter is
// the arithmetic, apart from any printing, so that it can be tested with
// made-up times.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_PROGRESS_H
#define PPC_TOOLS_PPC_PROGRESS_H

#include "llvm/ADT/StringRef.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace llvm {
class raw_ostream;
}

namespace ppc {

using ProgressClock = std::chrono::steady_clock;

/// Rates over units of work (batches, steps, tokens) that complete one
/// after another, or several at once (a window's batches, a step's
/// tokens). The first record() carries the start-up (rendezvous, shape
/// inference), so the rates and the time left count from it: the steady
/// state. They are measured only over at least kMinWindowSeconds, and
/// nullopt until then: units that complete together give no rate, and the
/// start-up alone gives no estimate.
class RateMeter {
public:
  explicit RateMeter(ProgressClock::time_point start) : start_(start) {}

  /// The least time the steady rates are measured over.
  static constexpr double kMinWindowSeconds = 1.0;

  /// Records that `done` units (counting from 1) are complete at `now`,
  /// the ones since the last record() holding `samples` samples (rows along
  /// dim 0; negative when not known, and from then on the sample figures
  /// are nullopt).
  void record(int64_t done, int64_t samples, ProgressClock::time_point now);

  /// The samples of every unit recorded; nullopt when one was not known.
  std::optional<int64_t> samples() const;

  /// Seconds from the start to the last record().
  double elapsedSeconds() const;
  /// Units and samples per second since the first record(); nullopt until
  /// units done after it span kMinWindowSeconds.
  std::optional<double> unitsPerSecond() const;
  std::optional<double> samplesPerSecond() const;
  /// Seconds until `total` units are done at the steady rate; nullopt
  /// while there is none.
  std::optional<double> secondsLeft(int64_t total) const;
  /// Samples per second over the whole run, start-up included (the figure
  /// of a closing line); nullopt when no time has passed.
  std::optional<double> overallSamplesPerSecond() const;

private:
  /// `sinceBase` per second of the steady window, or nullopt while it is
  /// shorter than kMinWindowSeconds.
  std::optional<double> rate(int64_t sinceBase) const;

  ProgressClock::time_point start_, last_;
  /// The first record(): the base of the steady rates.
  ProgressClock::time_point firstEnd_;
  int64_t done_ = 0, samples_ = 0, firstDone_ = 0, firstSamples_ = 0;
};

/// "0.042 s", "3.1 s", "2 min 5 s", "1 h 3 min": a duration for people.
std::string formatSeconds(double seconds);
/// "780 samples/s", "12.5 batches/s": three significant digits.
std::string formatRate(double perSecond, llvm::StringRef unit);

/// How progress shows.
enum class ProgressStyle { Off, Redraw, Lines };

/// The style for progress written to file descriptor `fd` (stderr): Off
/// under `quiet`; Redraw when `fd` is a terminal; Lines when `asked`
/// (--progress), or when the `ppc launch` that started this rank writes to
/// a terminal (it sets PPC_LAUNCH_TTY=1 and relays whole lines, so a rank
/// cannot redraw through it); Off otherwise.
ProgressStyle progressStyle(int fd, bool quiet, bool asked);

/// A progress display over `total` units, called `unit` ("batch") and
/// `units` ("batches").
class Progress {
public:
  Progress(llvm::raw_ostream &os, ProgressStyle style, std::string unit,
           std::string units, int64_t total,
           ProgressClock::time_point start = ProgressClock::now());

  /// Records that `done` of the total units are complete, the ones since
  /// the last update() holding `samples` (RateMeter::record), and shows it
  /// when due: Redraw at most ten times a second and at
  /// the first and last unit; Lines at the first unit, the last, and at
  /// most once a second between them.
  void update(int64_t done, int64_t samples,
              ProgressClock::time_point now = ProgressClock::now());
  /// Erases a redrawn line, so that the next message starts clean.
  void clear();

  const RateMeter &meter() const { return meter_; }

  /// "progress: batch 12/50 (24%), 3.21 batches/s, 41 samples/s, 11.8 s
  /// left": the line shown after `done` units (the rates and the time left
  /// once RateMeter has them).
  std::string text(int64_t done) const;

private:
  llvm::raw_ostream &os_;
  ProgressStyle style_;
  std::string unit_, units_;
  int64_t total_;
  RateMeter meter_;
  std::optional<ProgressClock::time_point> shown_;
  bool drawn_ = false;
};

} // namespace ppc

#endif // PPC_TOOLS_PPC_PROGRESS_H
