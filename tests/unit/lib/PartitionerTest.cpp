//===- tests/unit/lib/PartitionerTest.cpp - Min-max partitioner tests -----===//
#include "lib/Partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace ppc;

namespace {
int64_t bottleneck(const std::vector<int64_t> &costs,
                   const std::vector<size_t> &starts) {
  auto sc = stageCosts(costs, starts);
  return *std::max_element(sc.begin(), sc.end());
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
    size_t cuts = std::count(allowedAt.begin() + 1, allowedAt.end(), true);
    for (int stages = 1; stages <= static_cast<int>(cuts) + 1; ++stages) {
      auto fast = minMaxPartition(costs, stages, allowed);
      auto slow = bruteForcePartition(costs, stages, allowed);
      ASSERT_TRUE(static_cast<bool>(fast)) << llvm::toString(fast.takeError());
      ASSERT_TRUE(static_cast<bool>(slow)) << llvm::toString(slow.takeError());
      expectValid(*fast, n, stages, allowed);
      EXPECT_EQ(bottleneck(costs, *fast), bottleneck(costs, *slow))
          << "trial " << trial << " n " << n << " stages " << stages;
    }
  }
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
