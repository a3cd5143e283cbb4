//===- tools/ppc/TraceSummary.h - What each rank and stage did --*- C++ -*-===//
//
// `ppc trace summary`'s numbers: each rank's busy and blocked time and
// bubble, each stage's time per kind of action, and the slowest stages, of
// a timeline read back from a trace file (tools/ppc/TraceReader.h).
// docs/trace.md defines them.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_TRACESUMMARY_H
#define PPC_TOOLS_PPC_TRACESUMMARY_H

#include "tools/ppc/TraceReader.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace ppc {

/// What one rank did over a trace.
struct RankSummary {
  int rank = 0;
  /// Time covered by compute events (overlaps counted once).
  double busyUs = 0;
  /// Time covered by wait and recv events (overlaps counted once).
  double waitUs = 0;
  /// 1 - busyUs / the trace's span.
  double bubble = 0;
  /// Complete events, and those per category.
  int64_t events = 0, compute = 0, send = 0, recv = 0, wait = 0, other = 0;
};

/// The stage whose events of one name (F or B) took longest on average.
struct StageTime {
  int stage = -1;
  double meanUs = 0;
  int64_t count = 0;
};

/// The time one stage spent in each kind of action, over the trace (sums
/// of durations: a stage's actions do not overlap).
struct StageSummary {
  int stage = -1;
  /// The rank of its first such event.
  int rank = -1;
  /// Compute events F, B, I, W; sends (SEND_F, SEND_B); receives (RECV_F,
  /// RECV_B: the time the stage's rank waited for its values).
  double forwardUs = 0, backwardUs = 0, inputUs = 0, weightUs = 0;
  double sendUs = 0, recvUs = 0;
  int64_t forwards = 0;
};

struct TraceSummary {
  /// First start and last end over all ranks, and their difference.
  double startUs = 0, endUs = 0, spanUs = 0;
  /// One per rank of the timeline, in rank order.
  std::vector<RankSummary> ranks;
  /// 1 - (sum of busy time) / (ranks * span).
  double bubble = 0;
  /// Over compute events named "F" (and "B") with a stage; ties go to the
  /// lower stage. Empty when there are none.
  std::optional<StageTime> slowestForward, slowestBackward;
  /// Every stage with a compute, send or receive event, in stage order
  /// (not OUT's pseudo-stage).
  std::vector<StageSummary> stages;
};

/// Summarizes a timeline (as parseTrace returns it: at least one event).
TraceSummary summarizeTrace(const Timeline &timeline);

/// Prints `summary` as an aligned table per rank, one per stage (its B, I
/// and W columns only where the trace has such events), the slowest stages,
/// then one machine-parsable line per stage, one per rank and one for the
/// whole trace, last:
///   trace: stage=0 f_ms=2.000 b_ms=4.000 i_ms=0.000 w_ms=0.000
///          send_ms=0.200 recv_ms=1.000 forwards=2
///   trace: rank=0 busy_ms=6.000 wait_ms=2.000 bubble=0.4000 events=9
///          compute=4 send=2 recv=2 wait=1 other=0
///   trace: span_ms=10.000 ranks=2 bubble=0.4000 slowest_f_stage=1
///          slowest_f_ms=2.000 [slowest_b_stage=0 slowest_b_ms=3.000]
/// (each on one line).
void printTraceSummary(const TraceSummary &summary, llvm::raw_ostream &os);

} // namespace ppc

#endif // PPC_TOOLS_PPC_TRACESUMMARY_H
