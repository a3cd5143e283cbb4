//===- tests/unit/lib/PartitionerTest.cpp - Min-max partitioner tests -----===//
#include "lib/Partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

using namespace ppc;

namespace {
// The reference: exhaustive search written as plainly as possible, sharing
// nothing with lib/Partitioner.cpp (no argument checks, cut lists or stage
// cost helper of its own), so a bug there cannot hide in both.

/// Sum of costs[begin, end).
int64_t referenceSum(const std::vector<int64_t> &costs, size_t begin,
                     size_t end) {
  int64_t sum = 0;
  for (size_t i = begin; i < end; ++i)
    sum += costs[i];
  return sum;
}

/// The most expensive stage of the partition with these starts.
int64_t referenceBottleneck(const std::vector<int64_t> &costs,
                            const std::vector<size_t> &starts) {
  int64_t worst = 0;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : costs.size();
    worst = std::max(worst, referenceSum(costs, starts[s], end));
  }
  return worst;
}

/// Tries every way to place the remaining `left` cuts after `starts.back()`;
/// keeps the smallest bottleneck in `best`.
void referenceSearch(const std::vector<int64_t> &costs,
                     const CutPredicate &allowed, int left,
                     std::vector<size_t> &starts,
                     std::optional<int64_t> &best) {
  if (left == 0) {
    int64_t b = referenceBottleneck(costs, starts);
    if (!best || b < *best)
      best = b;
    return;
  }
  for (size_t i = starts.back() + 1; i < costs.size(); ++i)
    if (allowed(i)) {
      starts.push_back(i);
      referenceSearch(costs, allowed, left - 1, starts, best);
      starts.pop_back();
    }
}

/// The smallest bottleneck of any partition into `stages` non-empty stages
/// cutting only where allowed, or nullopt if there is none.
std::optional<int64_t> bruteForceBottleneck(const std::vector<int64_t> &costs,
                                            int stages,
                                            const CutPredicate &allowed) {
  if (stages < 1)
    return std::nullopt;
  std::vector<size_t> starts{0};
  std::optional<int64_t> best;
  referenceSearch(costs, allowed, stages - 1, starts, best);
  return best;
}

void expectValid(const std::vector<size_t> &starts, size_t n, int stages,
                 const CutPredicate &allowed) {
  ASSERT_EQ(starts.size(), static_cast<size_t>(stages));
  EXPECT_EQ(starts[0], 0u);
  for (size_t s = 1; s < starts.size(); ++s) {
    EXPECT_LT(starts[s - 1], starts[s]) << "empty stage " << s - 1;
    EXPECT_LT(starts[s], n);
    EXPECT_TRUE(allowed(starts[s]))
        << "cut at a forbidden position " << starts[s];
  }
}
} // namespace

TEST(PartitionerTest, MatchesBruteForceOnRandomCosts) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 400; ++trial) {
    size_t n = 1 + rng() % 11;
    std::vector<int64_t> costs(n);
    for (auto &c : costs)
      c = (rng() % 4 == 0)
              ? 0
              : rng() % 100; // zeros exercise empty-stage avoidance
    std::vector<bool> allowedAt(n, true);
    for (size_t i = 1; i < n; ++i)
      allowedAt[i] = rng() % 5 != 0;
    CutPredicate allowed = [&](size_t i) { return allowedAt[i]; };
    // One stage count past the feasible ones: both must refuse it.
    for (int stages = 1; stages <= static_cast<int>(n) + 1; ++stages) {
      auto fast = minMaxPartition(costs, stages, allowed);
      std::optional<int64_t> slow =
          bruteForceBottleneck(costs, stages, allowed);
      ASSERT_EQ(static_cast<bool>(fast), slow.has_value())
          << "trial " << trial << " n " << n << " stages " << stages;
      if (!fast) {
        llvm::consumeError(fast.takeError());
        continue;
      }
      expectValid(*fast, n, stages, allowed);
      EXPECT_EQ(referenceBottleneck(costs, *fast), *slow)
          << "trial " << trial << " n " << n << " stages " << stages;
    }
  }
}

TEST(PartitionerTest, StageCostsSumEachStage) {
  std::vector<int64_t> costs{3, 0, 5, 7, 1, 2};
  std::vector<size_t> starts{0, 2, 5};
  std::vector<int64_t> expected;
  for (size_t s = 0; s < starts.size(); ++s)
    expected.push_back(
        referenceSum(costs, starts[s],
                     s + 1 < starts.size() ? starts[s + 1] : costs.size()));
  EXPECT_EQ(stageCosts(costs, starts), expected);
  EXPECT_EQ(expected, (std::vector<int64_t>{3, 13, 2}));
}

TEST(PartitionerTest, EqualCostsSplitEvenly) {
  std::vector<int64_t> costs(12, 5);
  auto starts = minMaxPartition(costs, 4, [](size_t) { return true; });
  ASSERT_TRUE(static_cast<bool>(starts));
  EXPECT_EQ(*starts, (std::vector<size_t>{0, 3, 6, 9}));
}

TEST(PartitionerTest, AllZeroCostsStillGiveNonEmptyStages) {
  std::vector<int64_t> costs(5, 0);
  auto starts = minMaxPartition(costs, 5, [](size_t) { return true; });
  ASSERT_TRUE(static_cast<bool>(starts));
  EXPECT_EQ(*starts, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

TEST(PartitionerTest, TooManyStagesIsAnError) {
  std::vector<int64_t> costs(3, 1);
  auto starts = minMaxPartition(costs, 4, [](size_t) { return true; });
  ASSERT_FALSE(static_cast<bool>(starts));
  EXPECT_EQ(
      llvm::toString(starts.takeError()),
      "cannot split into 4 stages: the graph has only 2 possible cut points "
      "(3 nodes to place)");
}

TEST(PartitionerTest, ForbiddenCutsLimitStages) {
  std::vector<int64_t> costs(4, 1);
  auto starts = minMaxPartition(costs, 3, [](size_t i) { return i == 2; });
  ASSERT_FALSE(static_cast<bool>(starts));
  EXPECT_EQ(
      llvm::toString(starts.takeError()),
      "cannot split into 3 stages: the graph has only 1 possible cut point "
      "(4 nodes to place)");
}

TEST(PartitionerTest, ZeroStagesIsAnError) {
  std::vector<int64_t> costs(4, 1);
  auto starts = minMaxPartition(costs, 0, [](size_t) { return true; });
  ASSERT_FALSE(static_cast<bool>(starts));
  EXPECT_EQ(llvm::toString(starts.takeError()),
            "the stage count must be at least 1, got 0");
}
