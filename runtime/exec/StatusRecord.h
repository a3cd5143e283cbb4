//===- runtime/exec/StatusRecord.h - Where a waiting rank is -*- C++ -*-===//
//
// When a rank loses a peer (a LostRankError, runtime/link/Link.h), it says
// where it stood: in its error line, and, when the launcher asked for them
// (PPC_STATUS_DIR, which `ppc launch` sets), in a JSON status record
// DIR/rank-G.json (G: the job rank), written to a temporary name and then
// renamed, which the launcher reads to name the rank a stuck job waits on
// (tools/ppc/StuckReport.h). DIR may be shared (ranks started by hand): a
// rank writes only into a real directory (not a link) of its own user that
// no other user may write, else it says why in one warning line; it removes
// whatever has the temporary name and creates it afresh (O_EXCL |
// O_NOFOLLOW | O_NONBLOCK, 0600), so that a link planted there is never
// written through and a FIFO never blocks. A rank stands in one of two
// places:
//   - at an action of its schedule (the executor: Executor.h, "Where a rank
//     stands"): {"rank", "waitingFor", "timedOut", "action", "actions",
//     "kind", "microbatch", "stage", "sent", "received"};
//   - before a run of its schedule, waiting for the batch's or step's
//     microbatch signatures (MetaSettle.h), as a rank done with one batch
//     or step does for the next: {"rank", "waitingFor", "timedOut",
//     "kind": "before_run", "action": 0, "actions": 0}.
// A timeout's detail ("lost rank R (DETAIL)") gains "; POSITION" where
// POSITION is "at action I of N (...); sent: ...; received: ..." or
// "before a run of its schedule".
//
// Internal to libppc_runtime.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_STATUSRECORD_H
#define PPC_RUNTIME_EXEC_STATUSRECORD_H

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <string>

namespace ppc {

/// Where this process's ranks write their status records: LaunchEnv's
/// statusDir (PPC_STATUS_DIR), set by RankContext::create; empty (the
/// default): nowhere. One directory per process, as the environment it
/// comes from is.
void setStatusDirectory(const std::string &dir);

/// The status record's "kind" of a rank waiting before a run of its
/// schedule, and the position its line gives.
inline constexpr const char *kBeforeRunKind = "before_run";
inline constexpr const char *kBeforeRunText = "before a run of its schedule";

/// `err` with, when it is a LostRankError, job rank `jobRank`'s status
/// record written (`record` gains "rank", "waitingFor" and "timedOut") and,
/// when the wait timed out, "; `position`" added to the detail. Any other
/// error is returned as it is. Writing the record is best effort: a rank
/// that cannot write it still fails with its own error.
llvm::Error withPosition(llvm::Error err, int jobRank,
                         llvm::json::Object record,
                         const std::string &position);

/// withPosition() for a rank that waited before a run of its schedule.
llvm::Error beforeRun(llvm::Error err, int jobRank);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_STATUSRECORD_H
