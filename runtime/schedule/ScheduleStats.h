//===- runtime/schedule/ScheduleStats.h - What a schedule costs -----------===//
//
// A schedule's cost under stage costs: its makespan, bubble, activations
// held and messages sent, on the same clock as the grid (UnitTimeline.h),
// and the stage costs a manifest predicts.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_SCHEDULE_STATS_H
#define PPC_RUNTIME_SCHEDULE_SCHEDULE_STATS_H

#include "lib/Manifest.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace ppc {

/// Per stage, the largest number of microbatches whose forward ran and
/// whose backward (B, or W when split) has not, walking each rank's list in
/// order. For inference schedules (no backward) it is the microbatch count.
std::vector<int> peakActivations(const Schedule &schedule);

/// How long a stage's actions take, in any unit: F its forward, I its input
/// gradients, W its weight gradients (the F, B and W of the zero bubble
/// paper); a whole B takes I + W. The defaults are the grid's unit model.
struct StageCost {
  double forward = 1, input = 1, weight = 1;
};

/// What a schedule costs when every rank runs its compute actions in order,
/// each as soon as the rank is free and the action's inputs exist, with free
/// communication (the grid's model, with any costs).
struct ScheduleStats {
  /// From the first action's start to the last one's end.
  double makespan = 0;
  /// Per rank: the time it computes.
  std::vector<double> busy;
  /// The idle share of all ranks' time, 1 - sum(busy) / (ranks x makespan):
  /// (p-1)/(m+p-1) for gpipe and 1f1b at unit costs.
  double bubble = 0;
  /// Per rank: the most microbatches whose activations it holds at once
  /// over all its stages (F done, B or W not yet), walking its list.
  std::vector<int> peakActivations;
  /// Per rank: the messages it sends in one step (SEND_F and SEND_B).
  std::vector<int> messages;
};

/// The stats of a schedule that passed simulateSchedule(), with `costs[s]`
/// for stage s (empty: unit costs). Errors: a cost count other than the
/// stage count, a cost that is negative or not finite.
llvm::Expected<ScheduleStats>
scheduleStats(const Schedule &schedule,
              const std::vector<StageCost> &costs = {});

/// The manifest's predicted stage costs (its cost model's; measured forward
/// times under `profile`): F = the prediction, I = W = F, so a whole
/// backward takes twice the forward (the usual rule). Empty (unit costs)
/// when the manifest predicts nothing.
std::vector<StageCost> manifestStageCosts(const Manifest &manifest);
/// Where manifestStageCosts() takes its costs from, for messages: "unit
/// costs (the manifest predicts none)", "the manifest's measured (profile)
/// stage costs", "the manifest's params stage costs (estimates; ppc split
/// --cost profile measures them)".
std::string manifestCostsSource(const Manifest &manifest);
/// The unit of manifestStageCosts(): the cost model's ("bytes" for params,
/// "FLOPs", "operations" for nodes, "ns" measured by profile), or "units"
/// for unit costs.
std::string manifestCostUnit(const Manifest &manifest);

/// `x` with 4 significant digits as printf's %g prints it: "-1", "0.5",
/// "9.657e+07"; how stats print a time or a cost in messages.
std::string shortNumber(double x);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_SCHEDULE_STATS_H
