//===- tools/ppc/TraceSummary.cpp - What each rank and stage did ----------===//
//
// This file implements summarizeTrace, one pass over a timeline's events
// followed by the union of each rank's intervals, and printTraceSummary.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TraceSummary.h"
#include "tools/ppc/TraceRange.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ppc {

namespace {
/// The length of the union of `intervals` (start, end): overlapping events
/// (nested waits, a second thread) count once.
double unionLength(std::vector<std::pair<double, double>> &intervals) {
  llvm::sort(intervals);
  double total = 0, openStart = 0, openEnd = 0;
  bool open = false;
  for (const auto &[start, end] : intervals) {
    if (open && start <= openEnd) {
      openEnd = std::max(openEnd, end);
      continue;
    }
    if (open)
      total += openEnd - openStart;
    openStart = start;
    openEnd = end;
    open = true;
  }
  if (open)
    total += openEnd - openStart;
  return total;
}

std::optional<StageTime>
slowestStage(const std::map<int, std::pair<double, int64_t>> &byStage) {
  std::optional<StageTime> slowest;
  for (const auto &[stage, sumCount] : byStage) {
    double mean = sumCount.first / static_cast<double>(sumCount.second);
    if (!slowest || mean > slowest->meanUs)
      slowest = StageTime{stage, mean, sumCount.second};
  }
  return slowest;
}

using Intervals = std::vector<std::pair<double, double>>;
/// Per stage: the sum and count of durations.
using StageTimes = std::map<int, std::pair<double, int64_t>>;

/// What summarizeTrace gathers in its pass over the events.
struct Tally {
  /// Per rank (index into the timeline's ranks): compute events, and wait
  /// and recv events.
  std::vector<Intervals> busy, blocked;
  StageTimes forward, backward;
  std::map<int, StageSummary> stages;
};

/// Adds `e` to its stage's row: compute, sends and receives of a stage.
void addToStage(std::map<int, StageSummary> &stages, const TimelineEvent &e) {
  // OUT's stage is the number of stages (the outputs' pseudo-stage): only
  // compute, sends and receives make a stage's row.
  if (e.stage < 0 ||
      (e.category != "compute" && e.category != "send" && e.category != "recv"))
    return;
  auto [it, added] = stages.try_emplace(e.stage);
  StageSummary &stage = it->second;
  if (added) {
    stage.stage = e.stage;
    stage.rank = e.rank;
  }
  if (e.category == "compute") {
    double *slot = e.name == "F"   ? &stage.forwardUs
                   : e.name == "B" ? &stage.backwardUs
                   : e.name == "I" ? &stage.inputUs
                   : e.name == "W" ? &stage.weightUs
                                   : nullptr;
    if (slot)
      *slot += e.durationUs;
    stage.forwards += e.name == "F";
  } else if (e.category == "send") {
    stage.sendUs += e.durationUs;
  } else if (e.category == "recv") {
    stage.recvUs += e.durationUs;
  }
}

/// Counts `e` on its rank (row `i`) by category, and keeps its interval
/// where it is busy or blocked.
void addToRank(RankSummary &rank, size_t i, const TimelineEvent &e,
               Tally &tally) {
  std::pair<double, double> interval{e.startUs, e.startUs + e.durationUs};
  ++rank.events;
  if (e.category == "compute") {
    ++rank.compute;
    tally.busy[i].push_back(interval);
    StageTimes *byStage = e.name == "F"   ? &tally.forward
                          : e.name == "B" ? &tally.backward
                                          : nullptr;
    if (byStage && e.stage >= 0) {
      auto &[sum, count] = (*byStage)[e.stage];
      sum += e.durationUs;
      ++count;
    }
  } else if (e.category == "recv" || e.category == "wait") {
    ++(e.category == "recv" ? rank.recv : rank.wait);
    tally.blocked[i].push_back(interval);
  } else if (e.category == "send") {
    ++rank.send;
  } else {
    ++rank.other;
  }
}

/// Each rank's busy and blocked time and bubble, and the trace's bubble.
void finishRanks(TraceSummary &summary, Tally &tally) {
  size_t n = summary.ranks.size();
  double busyTotal = 0;
  for (size_t i = 0; i < n; ++i) {
    RankSummary &rank = summary.ranks[i];
    rank.busyUs = unionLength(tally.busy[i]);
    rank.waitUs = unionLength(tally.blocked[i]);
    // A trace without extent (only instants) has no idle time to speak of.
    rank.bubble = summary.spanUs > 0 ? 1 - rank.busyUs / summary.spanUs : 0.0;
    busyTotal += rank.busyUs;
  }
  summary.bubble =
      summary.spanUs > 0 && n > 0 ? 1 - busyTotal / (summary.spanUs * n) : 0.0;
}

double ms(double us) { return us / 1000; }

/// The aligned table of ranks.
void printRankTable(const TraceSummary &summary, llvm::raw_ostream &os) {
  os << llvm::formatv("{0,-6} {1,11} {2,11} {3,7} {4,7} {5,8} {6,6} {7,6} "
                      "{8,6} {9,6}\n",
                      "rank", "busy_ms", "wait_ms", "bubble", "events",
                      "compute", "send", "recv", "wait", "other");
  for (const RankSummary &r : summary.ranks)
    os << llvm::formatv("{0,-6} {1,11:f3} {2,11:f3} {3,7:f4} {4,7} {5,8} "
                        "{6,6} {7,6} {8,6} {9,6}\n",
                        r.rank, ms(r.busyUs), ms(r.waitUs), r.bubble, r.events,
                        r.compute, r.send, r.recv, r.wait, r.other);
}

/// The aligned table of stages; the B, I and W columns only where some
/// stage has them.
void printStageTable(const TraceSummary &summary, llvm::raw_ostream &os) {
  if (summary.stages.empty())
    return;
  using Column = std::pair<llvm::StringRef, double StageSummary::*>;
  std::vector<Column> columns{{"F_ms", &StageSummary::forwardUs}};
  for (Column c : {Column{"B_ms", &StageSummary::backwardUs},
                   Column{"I_ms", &StageSummary::inputUs},
                   Column{"W_ms", &StageSummary::weightUs}})
    if (llvm::any_of(summary.stages,
                     [&](const StageSummary &st) { return st.*c.second > 0; }))
      columns.push_back(c);
  columns.push_back({"send_ms", &StageSummary::sendUs});
  columns.push_back({"recv_ms", &StageSummary::recvUs});
  os << llvm::formatv("{0,-6} {1,6}", "stage", "rank");
  for (const Column &c : columns)
    os << llvm::formatv(" {0,11}", c.first);
  os << llvm::formatv(" {0,8}\n", "forwards");
  for (const StageSummary &st : summary.stages) {
    os << llvm::formatv("{0,-6} {1,6}", st.stage, st.rank);
    for (const Column &c : columns)
      os << llvm::formatv(" {0,11:f3}", ms(st.*c.second));
    os << llvm::formatv(" {0,8}\n", st.forwards);
  }
}

/// The "trace: ..." lines, one per stage, one per rank, one for the trace.
void printMachineLines(const TraceSummary &summary, llvm::raw_ostream &os) {
  for (const StageSummary &st : summary.stages)
    os << llvm::formatv("trace: stage={0} f_ms={1:f3} b_ms={2:f3} "
                        "i_ms={3:f3} w_ms={4:f3} send_ms={5:f3} "
                        "recv_ms={6:f3} forwards={7}\n",
                        st.stage, ms(st.forwardUs), ms(st.backwardUs),
                        ms(st.inputUs), ms(st.weightUs), ms(st.sendUs),
                        ms(st.recvUs), st.forwards);
  for (const RankSummary &r : summary.ranks)
    os << llvm::formatv("trace: rank={0} busy_ms={1:f3} wait_ms={2:f3} "
                        "bubble={3:f4} events={4} compute={5} send={6} "
                        "recv={7} wait={8} other={9}\n",
                        r.rank, ms(r.busyUs), ms(r.waitUs), r.bubble, r.events,
                        r.compute, r.send, r.recv, r.wait, r.other);
  os << llvm::formatv("trace: span_ms={0:f3} ranks={1} bubble={2:f4}",
                      ms(summary.spanUs), summary.ranks.size(), summary.bubble);
  if (const auto &f = summary.slowestForward)
    os << llvm::formatv(" slowest_f_stage={0} slowest_f_ms={1:f3}", f->stage,
                        ms(f->meanUs));
  if (const auto &b = summary.slowestBackward)
    os << llvm::formatv(" slowest_b_stage={0} slowest_b_ms={1:f3}", b->stage,
                        ms(b->meanUs));
  os << "\n";
}
} // namespace

TraceSummary summarizeTrace(const Timeline &timeline) {
  TraceSummary summary;
  if (timeline.events.empty())
    return summary;
  TimeRange extent = timelineExtent(timeline);
  summary.startUs = extent.startUs;
  summary.endUs = extent.endUs;
  summary.spanUs = summary.endUs - summary.startUs;

  size_t n = timeline.ranks.size();
  Tally tally;
  tally.busy.resize(n);
  tally.blocked.resize(n);
  summary.ranks.resize(n);
  for (size_t i = 0; i < n; ++i)
    summary.ranks[i].rank = timeline.ranks[i];
  for (const TimelineEvent &e : timeline.events) {
    size_t i =
        llvm::lower_bound(timeline.ranks, e.rank) - timeline.ranks.begin();
    addToStage(tally.stages, e);
    addToRank(summary.ranks[i], i, e, tally);
  }
  finishRanks(summary, tally);
  summary.slowestForward = slowestStage(tally.forward);
  summary.slowestBackward = slowestStage(tally.backward);
  for (auto &[index, stage] : tally.stages)
    summary.stages.push_back(stage);
  return summary;
}

void printTraceSummary(const TraceSummary &summary, llvm::raw_ostream &os) {
  os << llvm::formatv("{0} ranks, span {1:f3} ms, bubble {2:f4}\n",
                      summary.ranks.size(), ms(summary.spanUs), summary.bubble);
  printRankTable(summary, os);
  printStageTable(summary, os);
  if (const auto &f = summary.slowestForward)
    os << llvm::formatv("slowest stage: {0} (F mean {1:f3} ms over {2})\n",
                        f->stage, ms(f->meanUs), f->count);
  if (const auto &b = summary.slowestBackward)
    os << llvm::formatv("slowest backward stage: {0} (B mean {1:f3} ms over "
                        "{2})\n",
                        b->stage, ms(b->meanUs), b->count);
  printMachineLines(summary, os);
}

} // namespace ppc
