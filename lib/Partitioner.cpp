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

namespace {
/// Memory of the stage being filled, grown a segment at a time. Tensors are
/// stamped with the stage that holds them, so each counts once per stage
/// without clearing a set between stages.
class StageFill {
public:
  explicit StageFill(const StageMemoryModel &model)
      : model_(model), inStage_(model.tensorBytes.size(), 0),
        inProbe_(model.tensorBytes.size(), 0) {}

  /// Bytes that items [begin, end) would add to the current stage.
  int64_t added(size_t begin, size_t end) {
    ++probe_;
    int64_t bytes = 0;
    for (size_t i = begin; i < end; ++i) {
      bytes += model_.itemBytes[i];
      for (size_t t : model_.tensorsRead[i])
        if (inStage_[t] != stage_ && inProbe_[t] != probe_) {
          inProbe_[t] = probe_;
          bytes += model_.tensorBytes[t];
        }
    }
    return bytes;
  }
  /// Adds items [begin, end), which add `bytes` (from added()).
  void add(size_t begin, size_t end, int64_t bytes) {
    for (size_t i = begin; i < end; ++i)
      for (size_t t : model_.tensorsRead[i])
        inStage_[t] = stage_;
    current_ += bytes;
  }
  void newStage() {
    ++stage_;
    current_ = 0;
  }
  int64_t current() const { return current_; }

private:
  const StageMemoryModel &model_;
  std::vector<uint64_t> inStage_, inProbe_;
  uint64_t stage_ = 1, probe_ = 0;
  int64_t current_ = 0;
};
} // namespace

/// Greedy step 1: the starts of the fewest stages with cost <= bound (and
/// memory <= cap), or nullopt if some item range between allowed cuts alone
/// exceeds a bound. `prefix` holds the running sums of the costs.
static std::optional<std::vector<size_t>>
greedy(const std::vector<int64_t> &prefix, const std::vector<size_t> &bounds,
       int64_t bound, const MemoryCap *cap) {
  std::optional<StageFill> fill;
  if (cap)
    fill.emplace(cap->model);
  std::vector<size_t> starts{0};
  int64_t current = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    size_t begin = bounds[s], end = bounds[s + 1];
    int64_t seg = prefix[end] - prefix[begin];
    if (seg > bound)
      return std::nullopt;
    int64_t bytes = fill ? fill->added(begin, end) : 0;
    bool full =
        current + seg > bound || (fill && fill->current() + bytes > cap->bytes);
    if (full && s > 0) {
      starts.push_back(begin);
      current = 0;
      if (fill) {
        fill->newStage();
        bytes = fill->added(begin, end);
      }
    }
    if (fill && bytes > cap->bytes)
      return std::nullopt;
    current += seg;
    if (fill)
      fill->add(begin, end, bytes);
  }
  return starts;
}

/// Item indices where indivisible segments begin and end: 0, each allowed
/// cut, n.
static std::vector<size_t> segmentBounds(size_t n,
                                         const std::vector<size_t> &cuts) {
  std::vector<size_t> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(n);
  return bounds;
}

static std::vector<int64_t> prefixSums(llvm::ArrayRef<int64_t> costs) {
  std::vector<int64_t> prefix{0};
  for (int64_t c : costs)
    prefix.push_back(prefix.back() + c);
  return prefix;
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
                const CutPredicate &allowed, const MemoryCap *cap) {
  std::vector<size_t> cuts = allowedCuts(costs.size(), allowed);
  if (llvm::Error err = checkArgs(costs.size(), stages, cuts))
    return err;
  std::vector<size_t> bounds = segmentBounds(costs.size(), cuts);
  std::vector<int64_t> prefix = prefixSums(costs);
  int64_t lo = 0, hi = prefix.back();
  auto fits = [&](int64_t bound) {
    auto starts = greedy(prefix, bounds, bound, cap);
    return starts && starts->size() <= static_cast<size_t>(stages);
  };
  if (cap && !fits(hi))
    return makeError(llvm::formatv("no partition into {0} stages keeps every "
                                   "stage within {1} bytes",
                                   stages, cap->bytes));
  // Invariant: hi is feasible; lo - 1 is not (costs are non-negative).
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return fillTo(*greedy(prefix, bounds, hi, cap), cuts, stages);
}

std::vector<int64_t> stageMemories(const StageMemoryModel &model,
                                   llvm::ArrayRef<size_t> starts) {
  StageFill fill(model);
  std::vector<int64_t> out;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : model.itemBytes.size();
    fill.newStage();
    out.push_back(fill.added(starts[s], end));
  }
  return out;
}

static int64_t totalMemory(const StageMemoryModel &model) {
  int64_t total = 0;
  for (int64_t b : model.itemBytes)
    total += b;
  for (int64_t b : model.tensorBytes)
    total += b;
  return total;
}

int64_t smallestMemoryCap(const StageMemoryModel &model, int stages,
                          const CutPredicate &allowed) {
  size_t n = model.itemBytes.size();
  std::vector<size_t> cuts = allowedCuts(n, allowed);
  std::vector<size_t> bounds = segmentBounds(n, cuts);
  // Costs play no part: all zero, bound 0.
  std::vector<int64_t> prefix(n + 1, 0);
  int64_t lo = 0, hi = totalMemory(model);
  // Invariant: a cap of hi admits `stages` stages (one stage holds at most
  // everything); lo - 1 does not.
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    MemoryCap cap{model, mid};
    auto starts = greedy(prefix, bounds, 0, &cap);
    if (starts && starts->size() <= static_cast<size_t>(stages))
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi;
}

Segment largestSegment(const StageMemoryModel &model,
                       const CutPredicate &allowed) {
  size_t n = model.itemBytes.size();
  std::vector<size_t> bounds = segmentBounds(n, allowedCuts(n, allowed));
  StageFill fill(model);
  Segment worst{0, n, -1};
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    fill.newStage();
    int64_t bytes = fill.added(bounds[s], bounds[s + 1]);
    if (bytes > worst.bytes)
      worst = {bounds[s], bounds[s + 1], bytes};
  }
  return worst;
}

} // namespace ppc
