//===- tests/unit/lib/PartitionerTest.cpp - Min-max partitioner tests -----===//
#include "lib/Partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <random>
#include <set>

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

namespace {
// References for the memory cap, again sharing nothing with the partitioner.

/// Memory of items [begin, end): own bytes plus each tensor read once.
int64_t referenceMemory(const StageMemoryModel &m, size_t begin, size_t end) {
  int64_t bytes = 0;
  std::set<size_t> tensors;
  for (size_t i = begin; i < end; ++i) {
    bytes += m.itemBytes[i];
    tensors.insert(m.tensorsRead[i].begin(), m.tensorsRead[i].end());
  }
  for (size_t t : tensors)
    bytes += m.tensorBytes[t];
  return bytes;
}

int64_t referenceWorstMemory(const StageMemoryModel &m,
                             const std::vector<size_t> &starts) {
  int64_t worst = 0;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : m.itemBytes.size();
    worst = std::max(worst, referenceMemory(m, starts[s], end));
  }
  return worst;
}

/// Every partition into `stages` stages cutting only where allowed.
void everyPartition(size_t n, const CutPredicate &allowed, int left,
                    std::vector<size_t> &starts,
                    const std::function<void(const std::vector<size_t> &)> &f) {
  if (left == 0) {
    f(starts);
    return;
  }
  for (size_t i = starts.back() + 1; i < n; ++i)
    if (allowed(i)) {
      starts.push_back(i);
      everyPartition(n, allowed, left - 1, starts, f);
      starts.pop_back();
    }
}

StageMemoryModel randomMemory(std::mt19937 &rng, size_t n) {
  StageMemoryModel m;
  m.tensorBytes.resize(1 + rng() % 4);
  for (auto &b : m.tensorBytes)
    b = rng() % 50;
  for (size_t i = 0; i < n; ++i) {
    m.itemBytes.push_back(rng() % 30);
    std::vector<size_t> reads;
    for (size_t t = 0; t < m.tensorBytes.size(); ++t)
      if (rng() % 3 == 0)
        reads.push_back(t); // tensors shared by several items: tied weights
    m.tensorsRead.push_back(reads);
  }
  return m;
}
} // namespace

TEST(PartitionerTest, MemoryCapMatchesBruteForce) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    size_t n = 1 + rng() % 9;
    std::vector<int64_t> costs(n);
    for (auto &c : costs)
      c = rng() % 40;
    StageMemoryModel memory = randomMemory(rng, n);
    std::vector<bool> allowedAt(n, true);
    for (size_t i = 1; i < n; ++i)
      allowedAt[i] = rng() % 4 != 0;
    CutPredicate allowed = [&](size_t i) { return allowedAt[i]; };
    for (int stages = 1; stages <= static_cast<int>(n); ++stages) {
      std::optional<int64_t> leastWorstMemory;
      std::vector<size_t> starts{0};
      everyPartition(n, allowed, stages - 1, starts,
                     [&](const std::vector<size_t> &p) {
                       int64_t w = referenceWorstMemory(memory, p);
                       if (!leastWorstMemory || w < *leastWorstMemory)
                         leastWorstMemory = w;
                     });
      if (!leastWorstMemory)
        continue; // too few cuts: covered by the uncapped test
      EXPECT_EQ(smallestMemoryCap(memory, stages, allowed), *leastWorstMemory)
          << "trial " << trial << " stages " << stages;
      for (int64_t capBytes : {*leastWorstMemory - 1, *leastWorstMemory,
                               *leastWorstMemory + int64_t(rng() % 40)}) {
        std::optional<int64_t> best;
        everyPartition(n, allowed, stages - 1, starts,
                       [&](const std::vector<size_t> &p) {
                         if (referenceWorstMemory(memory, p) > capBytes)
                           return;
                         int64_t b = referenceBottleneck(costs, p);
                         if (!best || b < *best)
                           best = b;
                       });
        MemoryCap cap{memory, capBytes};
        auto fast = minMaxPartition(costs, stages, allowed, &cap);
        ASSERT_EQ(static_cast<bool>(fast), best.has_value())
            << "trial " << trial << " stages " << stages << " cap " << capBytes;
        if (!fast) {
          llvm::consumeError(fast.takeError());
          continue;
        }
        expectValid(*fast, n, stages, allowed);
        EXPECT_EQ(referenceBottleneck(costs, *fast), *best)
            << "trial " << trial << " stages " << stages << " cap " << capBytes;
        EXPECT_LE(referenceWorstMemory(memory, *fast), capBytes);
        std::vector<int64_t> memories = stageMemories(memory, *fast);
        for (size_t s = 0; s < fast->size(); ++s)
          EXPECT_EQ(memories[s],
                    referenceMemory(memory, (*fast)[s],
                                    s + 1 < fast->size() ? (*fast)[s + 1] : n));
      }
    }
  }
}

namespace {
/// Four items of cost 4; activations 1, 1, 1, 6; no tensors.
StageMemoryModel fourItems() {
  StageMemoryModel m;
  m.itemBytes = {1, 1, 1, 6};
  m.tensorsRead.assign(4, {});
  return m;
}
} // namespace

TEST(PartitionerTest, CapThatAdmitsTheBalancedSplitKeepsIt) {
  std::vector<int64_t> costs(4, 4);
  StageMemoryModel m = fourItems();
  MemoryCap cap{m, 7};
  auto starts = minMaxPartition(
      costs, 2, [](size_t) { return true; }, &cap);
  ASSERT_TRUE(static_cast<bool>(starts));
  EXPECT_EQ(*starts, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(stageMemories(m, *starts), (std::vector<int64_t>{2, 7}));
}

TEST(PartitionerTest, TighterCapMovesTheCut) {
  std::vector<int64_t> costs(4, 4);
  StageMemoryModel m = fourItems();
  MemoryCap cap{m, 6};
  auto starts = minMaxPartition(
      costs, 2, [](size_t) { return true; }, &cap);
  ASSERT_TRUE(static_cast<bool>(starts));
  // The big last item must be alone: cost 12 / 4 instead of 8 / 8.
  EXPECT_EQ(*starts, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(smallestMemoryCap(m, 2, [](size_t) { return true; }), 6);
}

TEST(PartitionerTest, ImpossibleCapIsAnError) {
  std::vector<int64_t> costs(4, 4);
  StageMemoryModel m = fourItems();
  MemoryCap cap{m, 5};
  auto starts = minMaxPartition(
      costs, 2, [](size_t) { return true; }, &cap);
  ASSERT_FALSE(static_cast<bool>(starts));
  EXPECT_EQ(llvm::toString(starts.takeError()),
            "no partition into 2 stages keeps every stage within 5 bytes");
}

TEST(PartitionerTest, SharedTensorCountsInEveryStageThatReadsIt) {
  // A 10-byte tensor read by items 0 and 2 (tied weights); item 1 reads a
  // 3-byte one.
  StageMemoryModel m;
  m.itemBytes = {1, 1, 1};
  m.tensorsRead = {{0}, {1}, {0}};
  m.tensorBytes = {10, 3};
  EXPECT_EQ(stageMemories(m, {0}), (std::vector<int64_t>{16}));
  EXPECT_EQ(stageMemories(m, {0, 2}), (std::vector<int64_t>{15, 11}));
  Segment worst = largestSegment(m, [](size_t i) { return i != 2; });
  EXPECT_EQ(worst.begin, 1u);
  EXPECT_EQ(worst.end, 3u);
  EXPECT_EQ(worst.bytes, 15);
}
