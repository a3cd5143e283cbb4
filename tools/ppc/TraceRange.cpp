//===- tools/ppc/TraceRange.cpp - Steps and ranges of a trace -------------===//
//
// This file implements the step and batch marks of a timeline, the time
// points of --from and --to, and skipping the first steps.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TraceRange.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <climits>
#include <map>
#include <utility>

namespace ppc {

namespace {
bool isMark(const TimelineEvent &e, llvm::StringRef kind) {
  return e.name == kind && e.category == "other";
}

/// "steps" or "batches" for a mark kind.
std::string plural(llvm::StringRef kind) {
  return kind == kBatchEventName ? "batches" : kind.str() + "s";
}

constexpr llvm::StringLiteral kNoMarks =
    "traces of ppc older than its step and batch marks have none";

/// Where `point` falls in `whole`: a time from its start, or the start
/// (`start`) or end of a mark of `marks`; `what` names it in messages.
llvm::Expected<double> resolvePoint(const TimePoint &point,
                                    llvm::StringRef what, bool start,
                                    const TimeRange &whole,
                                    const std::vector<TimelineMark> &marks) {
  if (point.kind == TimePoint::Kind::Ms) {
    double us = whole.startUs + point.ms * 1000;
    if (start && us >= whole.endUs)
      return makeError(llvm::formatv("{0}: the trace ends at {1:f3} ms", what,
                                     (whole.endUs - whole.startUs) / 1000));
    return us;
  }
  llvm::StringRef kind =
      point.kind == TimePoint::Kind::Step ? kStepEventName : kBatchEventName;
  if (marks.empty())
    return makeError(what + ": the trace has no " + kind + " events (" +
                     kNoMarks + ")");
  if (marks[0].kind != kind)
    return makeError(what + ": the trace has no " + kind + " events (it has " +
                     marks[0].kind + " events)");
  if (point.index > static_cast<int>(marks.size()))
    return makeError(
        llvm::formatv("{0}: the trace has {1} {2}", what, marks.size(),
                      marks.size() == 1 ? kind.str() : plural(kind)));
  const TimelineMark &mark = marks[point.index - 1];
  return start ? mark.startUs : mark.endUs;
}
} // namespace

bool isTimelineMark(const TimelineEvent &e) {
  return isMark(e, kStepEventName) || isMark(e, kBatchEventName);
}

std::vector<TimelineMark> timelineMarks(const Timeline &timeline) {
  bool steps = llvm::any_of(timeline.events, [](const TimelineEvent &e) {
    return isMark(e, kStepEventName);
  });
  llvm::StringRef kind = steps ? kStepEventName : kBatchEventName;
  std::map<int, std::vector<std::pair<double, double>>> byRank;
  for (const TimelineEvent &e : timeline.events)
    if (isMark(e, kind))
      byRank[e.rank].push_back({e.startUs, e.startUs + e.durationUs});
  std::vector<TimelineMark> marks;
  for (auto &[rank, spans] : byRank) {
    llvm::sort(spans);
    for (size_t i = 0; i < spans.size(); ++i) {
      if (i == marks.size()) {
        marks.push_back({kind.str(), static_cast<int>(i + 1), spans[i].first,
                         spans[i].second});
        continue;
      }
      marks[i].startUs = std::min(marks[i].startUs, spans[i].first);
      marks[i].endUs = std::max(marks[i].endUs, spans[i].second);
    }
  }
  return marks;
}

llvm::Expected<TimePoint> parseTimePoint(llvm::StringRef text) {
  auto bad = [&](llvm::StringRef why = "") {
    return makeError(llvm::Twine("'") + printable(text) +
                     "' is not a time (e.g. 120ms, step:3, batch:2)" + why);
  };
  TimePoint point;
  llvm::StringRef rest = text;
  bool step = rest.consume_front("step:");
  if (step || rest.consume_front("batch:")) {
    point.kind = step ? TimePoint::Kind::Step : TimePoint::Kind::Batch;
    int64_t index = 0;
    if (!IntegerRule(INT_MIN, INT_MAX).parse(rest, index).empty())
      return bad();
    if (index < 1)
      return bad(step ? ": steps count from 1" : ": batches count from 1");
    point.index = static_cast<int>(index);
    return point;
  }
  double ms = 0;
  if (!rest.consume_back("ms") || rest.empty() ||
      !RealRule::seconds(0, kMaxTraceTimeUs / 1000).parse(rest, ms).empty())
    return bad();
  point.ms = ms;
  return point;
}

TimeRange timelineExtent(const Timeline &timeline) {
  TimeRange whole;
  whole.startUs = timeline.events.empty() ? 0 : timeline.events[0].startUs;
  whole.endUs = whole.startUs;
  for (const TimelineEvent &e : timeline.events) {
    whole.startUs = std::min(whole.startUs, e.startUs);
    whole.endUs = std::max(whole.endUs, e.startUs + e.durationUs);
  }
  return whole;
}

llvm::Expected<TimeRange> resolveTimeRange(const Timeline &timeline,
                                           const std::optional<TimePoint> &from,
                                           const std::optional<TimePoint> &to,
                                           llvm::StringRef fromText,
                                           llvm::StringRef toText) {
  TimeRange whole = timelineExtent(timeline);
  std::vector<TimelineMark> marks;
  if ((from && from->kind != TimePoint::Kind::Ms) ||
      (to && to->kind != TimePoint::Kind::Ms))
    marks = timelineMarks(timeline);
  TimeRange range = whole;
  if (from) {
    auto us = resolvePoint(*from, fromText, true, whole, marks);
    if (!us)
      return us.takeError();
    range.startUs = *us;
  }
  if (to) {
    auto us = resolvePoint(*to, toText, false, whole, marks);
    if (!us)
      return us.takeError();
    range.endUs = *us;
  }
  // Ranks overlap their batches: batch 3 may begin on one rank before
  // batch 2 ends on another, yet "from batch 3 to batch 2" is no range.
  bool backwards = from && to && from->kind != TimePoint::Kind::Ms &&
                   from->kind == to->kind && from->index > to->index;
  if (backwards || range.startUs >= range.endUs)
    return makeError((from ? fromText : llvm::StringRef("the trace's start")) +
                     " is not before " +
                     (to ? toText : llvm::StringRef("the trace's end")));
  return range;
}

llvm::Expected<Timeline> skipFirstSteps(const Timeline &timeline, int steps) {
  if (steps <= 0)
    return timeline;
  std::vector<TimelineMark> marks = timelineMarks(timeline);
  if (marks.empty())
    return makeError(llvm::Twine("the trace has no step or batch events to "
                                 "skip (") +
                     kNoMarks + ")");
  llvm::StringRef kind = marks[0].kind;
  if (static_cast<size_t>(steps) >= marks.size())
    return makeError(llvm::formatv(
        "the trace has {0} {1}; skipping {2} "
        "leaves none",
        marks.size(), marks.size() == 1 ? kind.str() : plural(kind), steps));
  // Each rank's end of its steps-th mark.
  std::map<int, std::vector<double>> ends;
  for (const TimelineEvent &e : timeline.events)
    if (isMark(e, kind))
      ends[e.rank].push_back(e.startUs);
  std::map<int, double> cut;
  for (auto &[rank, starts] : ends) {
    if (starts.size() <= static_cast<size_t>(steps))
      continue; // a rank with no step after the skipped ones: all dropped
    std::nth_element(starts.begin(), starts.begin() + steps, starts.end());
    cut[rank] = starts[steps];
  }
  Timeline kept;
  kept.ranks = timeline.ranks;
  for (const TimelineEvent &e : timeline.events) {
    auto it = cut.find(e.rank);
    if (it != cut.end() && e.startUs >= it->second)
      kept.events.push_back(e);
  }
  return kept;
}

} // namespace ppc
