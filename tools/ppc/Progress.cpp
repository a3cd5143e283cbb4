//===- tools/ppc/Progress.cpp - How far a long command is -----------------===//
//
// This file implements the rates, their wording and the progress display of
// Progress.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Progress.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace ppc {

namespace {
double secondsBetween(ProgressClock::time_point from,
                      ProgressClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}
} // namespace

void RateMeter::record(int64_t done, int64_t samples,
                       ProgressClock::time_point now) {
  samples_ = samples_ < 0 || samples < 0 ? -1 : samples_ + samples;
  if (done_ == 0) {
    firstEnd_ = now;
    firstDone_ = done;
    firstSamples_ = samples_;
  }
  done_ = done;
  last_ = now;
}

std::optional<int64_t> RateMeter::samples() const {
  if (samples_ < 0)
    return std::nullopt;
  return samples_;
}

double RateMeter::elapsedSeconds() const {
  return done_ == 0 ? 0 : secondsBetween(start_, last_);
}

std::optional<double> RateMeter::rate(int64_t sinceBase) const {
  if (done_ <= firstDone_)
    return std::nullopt;
  double seconds = secondsBetween(firstEnd_, last_);
  if (!(seconds >= kMinWindowSeconds))
    return std::nullopt;
  return static_cast<double>(sinceBase) / seconds;
}

std::optional<double> RateMeter::unitsPerSecond() const {
  return rate(done_ - firstDone_);
}

std::optional<double> RateMeter::samplesPerSecond() const {
  if (samples_ < 0)
    return std::nullopt;
  return rate(samples_ - firstSamples_);
}

std::optional<double> RateMeter::secondsLeft(int64_t total) const {
  std::optional<double> perSecond = unitsPerSecond();
  if (!perSecond || !(*perSecond > 0))
    return std::nullopt;
  return static_cast<double>(std::max<int64_t>(total - done_, 0)) / *perSecond;
}

std::optional<double> RateMeter::overallSamplesPerSecond() const {
  double seconds = elapsedSeconds();
  if (!(seconds > 0) || samples_ < 0)
    return std::nullopt;
  return static_cast<double>(samples_) / seconds;
}

std::string formatSeconds(double seconds) {
  if (!(seconds >= 0))
    seconds = 0;
  if (seconds < 10)
    return llvm::formatv("{0:f3} s", seconds).str();
  if (seconds < 60)
    return llvm::formatv("{0:f1} s", seconds).str();
  auto whole = static_cast<int64_t>(std::llround(seconds));
  if (whole < 3600)
    return llvm::formatv("{0} min {1} s", whole / 60, whole % 60).str();
  return llvm::formatv("{0} h {1} min", whole / 3600, whole % 3600 / 60).str();
}

std::string formatRate(double perSecond, llvm::StringRef unit) {
  if (!std::isfinite(perSecond) || perSecond < 0)
    perSecond = 0;
  // Three significant digits, without an exponent.
  int decimals = perSecond >= 100 ? 0 : perSecond >= 10 ? 1 : 2;
  char number[64];
  std::snprintf(number, sizeof number, "%.*f", decimals, perSecond);
  return (llvm::Twine(number) + " " + unit + "/s").str();
}

ProgressStyle progressStyle(int fd, bool quiet, bool asked) {
  if (quiet)
    return ProgressStyle::Off;
  if (::isatty(fd))
    return ProgressStyle::Redraw;
  const char *launchTTY = std::getenv("PPC_LAUNCH_TTY");
  if (asked || (launchTTY && std::strcmp(launchTTY, "1") == 0))
    return ProgressStyle::Lines;
  return ProgressStyle::Off;
}

Progress::Progress(llvm::raw_ostream &os, ProgressStyle style, std::string unit,
                   std::string units, int64_t total,
                   ProgressClock::time_point start)
    : os_(os), style_(style), unit_(std::move(unit)), units_(std::move(units)),
      total_(total), meter_(start) {}

std::string Progress::text(int64_t done) const {
  std::string out = llvm::formatv("progress: {0} {1}/{2}", unit_, done, total_);
  if (total_ > 0)
    out += llvm::formatv(" ({0}%)", done * 100 / total_).str();
  if (std::optional<double> rate = meter_.unitsPerSecond())
    out += ", " + formatRate(*rate, units_);
  if (std::optional<double> rate = meter_.samplesPerSecond())
    out += ", " + formatRate(*rate, "samples");
  if (done < total_)
    if (std::optional<double> left = meter_.secondsLeft(total_))
      out += ", " + formatSeconds(*left) + " left";
  return out;
}

void Progress::update(int64_t done, int64_t samples,
                      ProgressClock::time_point now) {
  meter_.record(done, samples, now);
  if (style_ == ProgressStyle::Off)
    return;
  bool edge = done <= 1 || done >= total_;
  double since = shown_ ? secondsBetween(*shown_, now) : 1e9;
  if (style_ == ProgressStyle::Redraw) {
    if (!edge && since < 0.1)
      return;
    // Carriage return, the line, then erase what a longer one left.
    os_ << "\r" << text(done) << "\x1b[K";
    drawn_ = true;
  } else {
    if (!edge && since < 1)
      return;
    os_ << text(done) << "\n";
  }
  shown_ = now;
  os_.flush();
}

void Progress::clear() {
  if (!drawn_)
    return;
  os_ << "\r\x1b[K";
  os_.flush();
  drawn_ = false;
}

} // namespace ppc
