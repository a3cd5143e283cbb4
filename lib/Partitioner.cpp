//===- lib/Partitioner.cpp - Min-max contiguous partitioning --------------===//
#include "lib/Partitioner.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <numeric>
#include <optional>

namespace ppc {

std::vector<int64_t> stageCosts(llvm::ArrayRef<int64_t> costs,
                                llvm::ArrayRef<size_t> starts) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : costs.size();
    out.push_back(std::accumulate(costs.begin() + starts[s],
                                  costs.begin() + end, int64_t(0)));
  }
  return out;
}

static llvm::Error checkArgs(size_t n, int stages,
                             const std::vector<size_t> &cuts) {
  if (stages < 1)
    return makeError(
        llvm::formatv("the stage count must be at least 1, got {0}", stages));
  if (static_cast<size_t>(stages) - 1 > cuts.size())
    return makeError(
        llvm::formatv("cannot split into {0} stages: the graph has only "
                      "{1} possible cut point{2} ({3} nodes to place)",
                      stages, cuts.size(), cuts.size() == 1 ? "" : "s", n));
  return llvm::Error::success();
}

static std::vector<size_t> allowedCuts(size_t n, const CutPredicate &allowed) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < n; ++i)
    if (allowed(i))
      cuts.push_back(i);
  return cuts;
}

/// Greedy step 1: the starts of the fewest stages with cost <= bound, or
/// nullopt if some item range between allowed cuts alone exceeds it.
static std::optional<std::vector<size_t>>
greedy(llvm::ArrayRef<int64_t> costs, const std::vector<size_t> &cuts,
       int64_t bound) {
  // Segments between consecutive allowed cuts are indivisible.
  std::vector<size_t> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(costs.size());
  std::vector<size_t> starts{0};
  int64_t current = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    int64_t seg = std::accumulate(costs.begin() + bounds[s],
                                  costs.begin() + bounds[s + 1], int64_t(0));
    if (seg > bound)
      return std::nullopt;
    if (current + seg > bound) {
      starts.push_back(bounds[s]);
      current = 0;
    }
    current += seg;
  }
  return starts;
}

/// Step 2: add unused allowed cuts (earliest first) until there are
/// `stages` stages.
static std::vector<size_t> fillTo(std::vector<size_t> starts,
                                  const std::vector<size_t> &cuts, int stages) {
  for (size_t c : cuts) {
    if (starts.size() >= static_cast<size_t>(stages))
      break;
    if (!std::binary_search(starts.begin(), starts.end(), c))
      starts.insert(std::upper_bound(starts.begin(), starts.end(), c), c);
  }
  return starts;
}

llvm::Expected<std::vector<size_t>>
minMaxPartition(llvm::ArrayRef<int64_t> costs, int stages,
                const CutPredicate &allowed) {
  std::vector<size_t> cuts = allowedCuts(costs.size(), allowed);
  if (llvm::Error err = checkArgs(costs.size(), stages, cuts))
    return err;
  int64_t lo = 0, hi = std::accumulate(costs.begin(), costs.end(), int64_t(0));
  // Invariant: hi is feasible; lo - 1 is not (costs are non-negative).
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    auto starts = greedy(costs, cuts, mid);
    if (starts && starts->size() <= static_cast<size_t>(stages))
      hi = mid;
    else
      lo = mid + 1;
  }
  return fillTo(*greedy(costs, cuts, hi), cuts, stages);
}

} // namespace ppc
