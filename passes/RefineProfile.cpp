//===- passes/RefineProfile.cpp - Item times checked by stage times -------===//
//
// This file implements refineProfiledCosts(). See RefineProfile.h.
//
//===----------------------------------------------------------------------===//
#include "passes/RefineProfile.h"

#include "lib/Partitioner.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ppc {

/// Max over mean of `times`; 1 for a perfect balance.
static double imbalance(const std::vector<int64_t> &times) {
  double total = std::accumulate(times.begin(), times.end(), 0.0);
  if (total <= 0)
    return 1;
  return *std::max_element(times.begin(), times.end()) * times.size() / total;
}

/// Step 4: each item's cost times its stage's measured/predicted ratio.
static std::vector<int64_t> rescale(const std::vector<int64_t> &costs,
                                    const std::vector<size_t> &starts,
                                    const std::vector<int64_t> &measured) {
  std::vector<int64_t> predicted = stageCosts(costs, starts);
  std::vector<int64_t> out = costs;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : costs.size();
    if (predicted[s] <= 0)
      continue;
    double factor =
        static_cast<double>(measured[s]) / static_cast<double>(predicted[s]);
    for (size_t i = starts[s]; i < end; ++i)
      out[i] = static_cast<int64_t>(std::llround(costs[i] * factor));
  }
  return out;
}

llvm::Expected<std::vector<int64_t>>
refineProfiledCosts(const ItemGraph &graph, const torch::jit::Module &module,
                    const std::vector<c10::IValue> &example,
                    const PartitionRequest &request,
                    const StageMemoryModel *memory,
                    std::vector<int64_t> itemTimes, int rounds) {
  std::vector<int64_t> costs = std::move(itemTimes), best = costs;
  double bestImbalance = 0;
  std::vector<std::vector<size_t>> seen;
  for (int round = 0; round < rounds; ++round) {
    auto plan = planPartition(graph, costs, request, &module, memory);
    if (!plan)
      return plan.takeError();
    if (std::find(seen.begin(), seen.end(), plan->starts()) != seen.end())
      break;
    seen.push_back(plan->starts());
    auto measured = profileStageTimes(*plan, module, example);
    if (!measured)
      return measured.takeError();
    double now = imbalance(*measured);
    if (round == 0 || now < bestImbalance) {
      bestImbalance = now;
      best = costs;
    }
    if (now <= 1.05)
      break;
    costs = rescale(costs, plan->starts(), *measured);
  }
  return best;
}

} // namespace ppc
