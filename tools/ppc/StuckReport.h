//===- tools/ppc/StuckReport.h - The rank a stuck job waits on --*- C++ -*-===//
//
// When waits time out, each rank still alive writes where it stands as a
// JSON record in the launcher's status directory (PPC_STATUS_DIR, the
// record's form in runtime/exec/StatusRecord.h). The launcher reads them
// (untrusted: bounded size, schema checked: parseRankReport) and follows who
// waits for whom to the end of the chain (findStuckRank): a rank that
// reported nothing (stopped or hung), or a cycle. Both are pure functions.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_STUCKREPORT_H
#define PPC_TOOLS_PPC_STUCKREPORT_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

/// The most bytes of one status record the launcher reads.
constexpr size_t kMaxRankReportBytes = 64 << 10;

/// One rank's status record.
struct RankReport {
  int rank = 0;
  int waitingFor = 0;
  bool timedOut = false;
  /// The action it waited in, from 1, of `actions`; `kind` "flush" for the
  /// flush after the last (no microbatch or stage: -1), "before_run" for a
  /// wait before a run of the schedule (action and actions 0;
  /// runtime/exec/StatusRecord.h).
  int action = 0;
  int actions = 0;
  std::string kind;
  int microbatch = -1;
  int stage = -1;
};

/// The record `text` of rank `rank` in a job of `worldSize` ranks, or none
/// when it is not one (too long, not JSON, a field missing or out of range,
/// another rank's, a rank waiting for itself).
std::optional<RankReport> parseRankReport(llvm::StringRef text, int rank,
                                          int worldSize);

/// "at action 5 of 24 (F mb 2 stage 2)", "at the final flush of 24
/// actions", or "before a run of its schedule".
std::string positionText(const RankReport &report);

/// The end of the wait-for chains.
struct StuckRank {
  /// The rank no report names as waiting: it reported nothing.
  int rank = -1;
  /// Whether the chain closes on itself instead: `rank` is then the
  /// smallest rank of the cycle, `cycle` its ranks in wait order from it.
  bool isCycle = false;
  std::vector<int> cycle;
  /// The reporting ranks whose chains end at `rank` (or in the cycle),
  /// ascending.
  std::vector<int> waiters;
};

/// Follows waitingFor from the reporting rank `start` (a key of `reports`)
/// to its end: the first rank with no report, or a cycle.
StuckRank findStuckRank(const std::map<int, RankReport> &reports, int start);

/// "0", "0 and 1", "0, 1 and 3".
std::string rankList(const std::vector<int> &ranks);

} // namespace ppc

#endif // PPC_TOOLS_PPC_STUCKREPORT_H
