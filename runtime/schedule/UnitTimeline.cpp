//===- runtime/schedule/UnitTimeline.cpp - Compute actions on a clock -----===//
//
// This file implements the timeline of compute actions (see
// UnitTimeline.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/UnitTimeline.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <unordered_map>

namespace ppc {

double UnitTimeline::duration(const Action &a) const {
  if (costs.empty() || a.stage < 0 || a.stage >= numStages)
    return actionInfo(a.kind).unitTime;
  const StageCost &c = costs[a.stage];
  switch (a.kind) {
  case ActionKind::Forward:
    return c.forward;
  case ActionKind::Backward:
    return c.input + c.weight;
  case ActionKind::BackwardInput:
    return c.input;
  case ActionKind::BackwardWeight:
    return c.weight;
  default:
    return 0;
  }
}

llvm::Error UnitTimeline::run(const std::vector<std::vector<Action>> &devices,
                              llvm::StringRef deviceName) {
  size_t n = devices.size();
  std::vector<double> end(2 * static_cast<size_t>(numStages) * microbatches,
                          -1);
  std::unordered_map<size_t, std::vector<int>> waiters;
  std::vector<size_t> pc(n, 0);
  std::vector<double> freeAt(n, 0);
  start.assign(n, {});
  std::vector<int> runnable;
  for (size_t d = 0; d < n; ++d) {
    start[d].assign(devices[d].size(), -1);
    runnable.push_back(static_cast<int>(n - 1 - d));
  }
  std::vector<size_t> inputs;
  while (!runnable.empty()) {
    int d = runnable.back();
    runnable.pop_back();
    for (; pc[d] < devices[d].size(); ++pc[d]) {
      const Action &a = devices[d][pc[d]];
      inputs.clear();
      inputsOf(a, inputs);
      double at = freeAt[d];
      bool blocked = false;
      for (size_t ev : inputs) {
        if (end[ev] < 0) {
          waiters[ev].push_back(d);
          blocked = true;
          break;
        }
        at = std::max(at, end[ev]);
      }
      if (blocked)
        break;
      start[d][pc[d]] = at;
      freeAt[d] = at + duration(a);
      length = std::max(length, freeAt[d]);
      if (a.kind == ActionKind::BackwardWeight)
        continue;
      size_t ev = event(a.kind == ActionKind::Forward, a.stage, a.microbatch);
      end[ev] = freeAt[d];
      auto it = waiters.find(ev);
      if (it != waiters.end()) {
        runnable.insert(runnable.end(), it->second.begin(), it->second.end());
        waiters.erase(it);
      }
    }
  }
  for (size_t d = 0; d < n; ++d)
    if (pc[d] < devices[d].size())
      return makeError(llvm::formatv("{0} {1} waits at {2}", deviceName, d,
                                     devices[d][pc[d]].cell())
                           .str());
  return llvm::Error::success();
}

size_t UnitTimeline::event(bool forward, int s, int m) const {
  return (static_cast<size_t>(forward ? 0 : 1) * numStages + s) * microbatches +
         m;
}

void UnitTimeline::inputsOf(const Action &a, std::vector<size_t> &out) const {
  switch (a.kind) {
  case ActionKind::Forward:
    for (int e : index.in[a.stage])
      out.push_back(event(true, edges[e].producer, a.microbatch));
    break;
  case ActionKind::Backward:
  case ActionKind::BackwardInput:
    out.push_back(event(true, a.stage, a.microbatch));
    for (int e : index.out[a.stage])
      if (!edges[e].collector)
        out.push_back(event(false, edges[e].consumer, a.microbatch));
    break;
  case ActionKind::BackwardWeight:
    out.push_back(event(false, a.stage, a.microbatch));
    break;
  default:
    break;
  }
}

/// Every rank's compute actions, in order.
std::vector<std::vector<Action>> computeActions(const Schedule &schedule) {
  std::vector<std::vector<Action>> devices(schedule.ranks.size());
  for (size_t r = 0; r < schedule.ranks.size(); ++r)
    for (const Action &a : schedule.ranks[r])
      if (a.isCompute())
        devices[r].push_back(a);
  return devices;
}

} // namespace ppc
