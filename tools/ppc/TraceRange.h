//===- tools/ppc/TraceRange.h - Steps and ranges of a trace -----*- C++ -*-===//
//
// The steps (ppc train) and batches (ppc run) of a timeline read back from
// a trace file, and the stretches of it that `ppc trace plot --from/--to`
// and `ppc trace summary --skip-steps` select.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_TRACERANGE_H
#define PPC_TOOLS_PPC_TRACERANGE_H

#include "tools/ppc/TraceReader.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace ppc {

/// Whether `e` is a step or batch mark (kStepEventName or kBatchEventName
/// of category "other").
bool isTimelineMark(const TimelineEvent &e);

/// One step (or batch) of a timeline: the index-th kStepEventName (or
/// kBatchEventName) event of every rank that has one.
struct TimelineMark {
  /// kStepEventName or kBatchEventName.
  std::string kind;
  /// From 1.
  int index = 0;
  /// The earliest start and the latest end of those events.
  double startUs = 0, endUs = 0;
};

/// The step marks of `timeline` (from ppc train) or, when it has none, its
/// batch marks (from ppc run), by index; empty for a trace with neither (one
/// written before ppc recorded them).
std::vector<TimelineMark> timelineMarks(const Timeline &timeline);

/// One end of a range of a timeline, as --from and --to give it: a time in
/// milliseconds from the trace's first event ("120ms", "0.5ms"), or a step
/// or batch ("step:3", "batch:2"), which begins (--from) or ends (--to) the
/// range where that step does.
struct TimePoint {
  enum class Kind { Ms, Step, Batch } kind = Kind::Ms;
  double ms = 0;
  int index = 0;
};

/// Reads a TimePoint from `text`. Errors, one line naming the value:
///   "'12' is not a time (e.g. 120ms, step:3, batch:2)"
///   "'step:0' is not a time (e.g. 120ms, step:3, batch:2): steps count
///    from 1"
llvm::Expected<TimePoint> parseTimePoint(llvm::StringRef text);

/// A stretch of a timeline, in its own microseconds.
struct TimeRange {
  double startUs = 0, endUs = 0;
};

/// The first start and the last end of `timeline`'s events; [0, 0] when it
/// has none.
TimeRange timelineExtent(const Timeline &timeline);

/// The range [startUs, endUs) of `timeline` (in its own microseconds) that
/// `from` and `to` select; a missing end is the trace's first start (last
/// end). `fromText` and `toText` name them in messages ("--from step:9").
/// Errors: "--from step:9: the trace has 4 steps"; "--from batch:2: the
/// trace has no batch events (it has step events)"; "--from step:1: the
/// trace has no step events (traces of ppc older than its step and batch
/// marks have none)"; "--from 500ms: the trace ends at 321.000 ms";
/// "--from 300ms is not before --to 200ms" (and "--from step:3 is not
/// before --to step:2", even where ranks overlap those steps).
llvm::Expected<TimeRange> resolveTimeRange(const Timeline &timeline,
                                           const std::optional<TimePoint> &from,
                                           const std::optional<TimePoint> &to,
                                           llvm::StringRef fromText,
                                           llvm::StringRef toText);

/// `timeline` without its warm-up: on each rank, only the events that
/// start no earlier than its step (or batch) `steps` + 1; a rank without
/// that step keeps none. Zero keeps all.
/// Errors: "the trace has 3 steps; skipping 3 leaves none"; "the trace has
/// no step or batch events to skip (traces of ppc older than its step and
/// batch marks have none)".
llvm::Expected<Timeline> skipFirstSteps(const Timeline &timeline, int steps);

} // namespace ppc

#endif // PPC_TOOLS_PPC_TRACERANGE_H
