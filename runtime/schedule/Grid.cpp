//===- runtime/schedule/Grid.cpp - The printed action grid ----------------===//
//
// This file implements printGrid (see Grid.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Grid.h"

#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/ScheduleStats.h"
#include "runtime/schedule/UnitTimeline.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace ppc {

void printGrid(const Schedule &schedule, llvm::raw_ostream &os) {
  const Placement &placement = schedule.placement;
  std::vector<std::vector<Action>> devices = computeActions(schedule);
  size_t width = 1;
  for (const std::vector<Action> &actions : devices)
    for (const Action &a : actions)
      width = std::max(width, a.cell().size());
  EdgeIndex index(schedule);
  UnitTimeline timeline(schedule.edges, index, placement.numStages(),
                        schedule.microbatches);
  llvm::Error err = timeline.run(devices, "rank");
  std::string title = schedule.origin.empty()
                          ? scheduleName(schedule.kind).str()
                          : "'" + schedule.origin + "'";
  os << llvm::formatv("{0}{1}: {2} stages on {3} ranks, {4} microbatches, {5} "
                      "time steps (F=1 B=2 I=1 W=1)\n",
                      title, schedule.training ? "" : " (inference)",
                      placement.numStages(), placement.worldSize(),
                      schedule.microbatches,
                      static_cast<int64_t>(timeline.length));
  if (err) {
    os << "no grid: " << llvm::toString(std::move(err)) << "\n";
    return;
  }
  std::string lastLabel = "rank " + std::to_string(placement.worldSize() - 1);
  for (int r = 0; r < placement.worldSize(); ++r) {
    // Unit times are whole numbers, exact in a double.
    std::vector<std::string> cells(static_cast<size_t>(timeline.length), ".");
    for (size_t i = 0; i < devices[r].size(); ++i)
      for (int t = 0; t < actionInfo(devices[r][i].kind).unitTime; ++t)
        cells[static_cast<size_t>(timeline.start[r][i]) + t] =
            devices[r][i].cell();
    std::string line = "rank " + std::to_string(r) + ":";
    line.resize(lastLabel.size() + 1, ' ');
    for (const std::string &cell : cells) {
      line += ' ';
      line += cell;
      line.append(width - cell.size(), ' ');
    }
    os << llvm::StringRef(line).rtrim(' ') << "\n";
  }
  if (!schedule.training)
    return;
  os << "peak activations:";
  std::vector<int> peak = peakActivations(schedule);
  for (size_t s = 0; s < peak.size(); ++s)
    os << " stage" << s << "=" << peak[s];
  os << "\n";
}

} // namespace ppc
