//===- runtime/schedule/AutoSchedule.h - Picking the fastest schedule -----===//
//
// --schedule auto: every kind of Schedules.def on its own placement,
// simulated with the manifest's stage costs, and the one with the shortest
// simulated step picked.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_AUTO_SCHEDULE_H
#define PPC_RUNTIME_SCHEDULE_AUTO_SCHEDULE_H

#include "lib/Manifest.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleKind.h"
#include "runtime/schedule/ScheduleStats.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace ppc {

/// What --schedule auto considered: every kind of Schedules.def on its own
/// placement, simulated with the same costs.
struct ScheduleCandidate {
  ScheduleKind kind;
  /// Why the kind does not apply (its generator's or placement's refusal,
  /// or the activation cap); empty when it does.
  std::string refusal;
  ScheduleStats stats;
};

struct ScheduleChoice {
  /// The picked schedule, simulated.
  Schedule schedule;
  std::vector<ScheduleCandidate> candidates;
  /// One line for the user: what was picked, why, and the others'
  /// simulated steps ("picked zbv: simulated step 49 (bubble 2.0%, at most
  /// 4 microbatches' activations per rank) with unit costs; 1f1b 51, ...").
  std::string explanation;
};

/// Picks the training schedule with the shortest simulated step for
/// `manifest` on `worldSize` ranks and `microbatches` microbatches: every
/// kind is built on its own placement and simulated with `costs` (empty:
/// unit costs; `costsFrom` says where they came from, for the
/// explanation); a kind whose peak activations on some rank exceed
/// `maxActivations` (microbatches, when given) is left out; the simulated
/// steps are in `costUnit`, the costs' unit ("ns", "bytes"; "units" for
/// unit costs). Ties go to the
/// kind listed first in Schedules.def. Errors, said once for all kinds:
/// boundaryEdges()'s, a microbatch count below 1, a stage count that is not
/// a multiple of `worldSize`; and "no schedule fits" with each kind's
/// reason when none applies.
llvm::Expected<ScheduleChoice>
chooseSchedule(const Manifest &manifest, int worldSize, int microbatches,
               const std::vector<StageCost> &costs, llvm::StringRef costsFrom,
               std::optional<int> maxActivations = std::nullopt,
               llvm::StringRef costUnit = "units");

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_AUTO_SCHEDULE_H
