//===- runtime/schedule/ScheduleStats.cpp - What a schedule costs ---------===//
//
// This file implements the statistics of a schedule and the stage costs
// of a manifest (see ScheduleStats.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/ScheduleStats.h"

#include "lib/Error.h"
#include "lib/OptionName.h"
#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/UnitTimeline.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ppc {

std::vector<int> peakActivations(const Schedule &schedule) {
  int n = schedule.placement.numStages();
  std::vector<int> peak(n, 0), held(n, 0);
  for (const std::vector<Action> &actions : schedule.ranks)
    for (const Action &a : actions) {
      if (a.stage < 0 || a.stage >= n)
        continue;
      if (a.kind == ActionKind::Forward)
        peak[a.stage] = std::max(peak[a.stage], ++held[a.stage]);
      else if (a.kind == ActionKind::Backward ||
               a.kind == ActionKind::BackwardWeight)
        --held[a.stage];
    }
  return peak;
}

/// `x` with 4 significant digits as printf's %g prints it: "-1", "0.5",
/// "9.657e+07".
std::string shortNumber(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", x);
  return text;
}

llvm::Expected<ScheduleStats>
scheduleStats(const Schedule &schedule, const std::vector<StageCost> &costs) {
  const Placement &placement = schedule.placement;
  if (!costs.empty() &&
      costs.size() != static_cast<size_t>(placement.numStages()))
    return makeError(llvm::formatv("{0} stage cost{1} for {2} stage{3}",
                                   costs.size(), costs.size() == 1 ? "" : "s",
                                   placement.numStages(),
                                   placement.numStages() == 1 ? "" : "s")
                         .str());
  for (size_t s = 0; s < costs.size(); ++s)
    for (double c : {costs[s].forward, costs[s].input, costs[s].weight})
      if (!(c >= 0) || !std::isfinite(c))
        return makeError(llvm::formatv("stage {0}'s cost {1} is not a finite "
                                       "number >= 0",
                                       s, shortNumber(c))
                             .str());
  std::vector<std::vector<Action>> devices = computeActions(schedule);
  EdgeIndex index(schedule);
  UnitTimeline timeline(schedule.edges, index, placement.numStages(),
                        schedule.microbatches, costs);
  if (llvm::Error err = timeline.run(devices, "rank"))
    return err;
  ScheduleStats stats;
  stats.makespan = timeline.length;
  double busy = 0;
  for (size_t r = 0; r < devices.size(); ++r) {
    double mine = 0;
    for (const Action &a : devices[r])
      mine += timeline.duration(a);
    stats.busy.push_back(mine);
    busy += mine;
    int held = 0, peak = 0, messages = 0;
    for (const Action &a : schedule.ranks[r]) {
      if (a.kind == ActionKind::Forward)
        peak = std::max(peak, ++held);
      else if (a.kind == ActionKind::Backward ||
               a.kind == ActionKind::BackwardWeight)
        --held;
      else if (actionInfo(a.kind).category == "send")
        ++messages;
    }
    stats.peakActivations.push_back(peak);
    stats.messages.push_back(messages);
  }
  stats.bubble =
      stats.makespan > 0
          ? 1 - busy / (stats.makespan * static_cast<double>(devices.size()))
          : 0;
  return stats;
}

std::vector<StageCost> manifestStageCosts(const Manifest &manifest) {
  std::vector<StageCost> costs;
  bool predicted = false;
  for (const StageInfo &s : manifest.stages) {
    costs.push_back({s.predictedCost, s.predictedCost, s.predictedCost});
    predicted = predicted || s.predictedCost > 0;
  }
  return predicted ? costs : std::vector<StageCost>{};
}

std::string manifestCostUnit(const Manifest &manifest) {
  if (manifestStageCosts(manifest).empty())
    return "units";
  if (manifest.costModel == "params")
    return "bytes";
  if (manifest.costModel == "flops")
    return "FLOPs";
  if (manifest.costModel == "nodes")
    return "operations";
  if (manifest.costModel == "profile")
    return "ns";
  return "units";
}

std::string manifestCostsSource(const Manifest &manifest) {
  if (manifestStageCosts(manifest).empty())
    return "unit costs (the manifest predicts none)";
  if (manifest.costModel == "profile")
    return "the manifest's measured (profile) stage costs";
  return "the manifest's " + manifest.costModel +
         " stage costs (estimates; ppc split " + optionName(Option::Cost) +
         " profile measures them)";
}

} // namespace ppc
