//===- runtime/schedule/UnitTimeline.h - Compute actions on a clock -------===//
//
// A timeline of compute actions with free communication: how the 1f1b and
// zb-h1 generators merge per-stage orders, how the grid places its cells,
// and how the statistics measure a schedule under stage costs.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_UNIT_TIMELINE_H
#define PPC_RUNTIME_SCHEDULE_UNIT_TIMELINE_H

#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleStats.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace ppc {

/// Start times of compute actions when every device runs its list in order,
/// each action as soon as the device is free and its inputs exist, with
/// free communication and each action as long as its stage's StageCost
/// says (the unit-time model when `costs` is empty). A device is a rank
/// (printGrid), or a stage (ordering 1f1b and zb-h1). Inputs are the
/// simulator's: F(s,m) needs F(p,m) of every producer p, B/I(s,m) needs F(s,m)
/// and B/I(c,m) of every consumer c, W(s,m) needs I(s,m). A blocked device
/// waits on one event and is woken by it, so a run costs O(actions x inputs).
class UnitTimeline {
public:
  UnitTimeline(const std::vector<Edge> &edges, const EdgeIndex &index,
               int numStages, int microbatches,
               std::vector<StageCost> costs = {})
      : edges(edges), index(index), numStages(numStages),
        microbatches(microbatches), costs(std::move(costs)) {}

  /// How long `a` takes.
  double duration(const Action &a) const;

  /// Fills `start` (per device, per action) and `length`. Errors: a device
  /// never gets to run an action ("stage 2 waits at 2B0").
  llvm::Error run(const std::vector<std::vector<Action>> &devices,
                  llvm::StringRef deviceName);

  std::vector<std::vector<double>> start;
  double length = 0;

private:
  /// The event "F(s,m) done" or "B/I(s,m) done".
  size_t event(bool forward, int s, int m) const;

  void inputsOf(const Action &a, std::vector<size_t> &out) const;

  const std::vector<Edge> &edges;
  const EdgeIndex &index;
  int numStages, microbatches;
  std::vector<StageCost> costs;
};

/// Every rank's compute actions, in order: the devices of a timeline over
/// ranks.
std::vector<std::vector<Action>> computeActions(const Schedule &schedule);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_UNIT_TIMELINE_H
