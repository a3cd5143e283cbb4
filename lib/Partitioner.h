//===- lib/Partitioner.h - Min-max contiguous partitioning ------*- C++ -*-===//
//
// Splits a sequence of item costs into contiguous, non-empty stages so that
// the most expensive stage is as cheap as possible, cutting only where
// allowed. The exact algorithm is bisection on the bottleneck value with a
// greedy feasibility test:
//
//  1. For a bound B, walk the items and cut at the last allowed position
//     before the running stage cost would exceed B. This uses the fewest
//     stages of any partition with bottleneck <= B (exchange argument: the
//     greedy stage ends at or after every other partition's).
//  2. B is feasible if that count is <= N and at least N-1 cuts exist at
//     all: extra cuts at unused allowed positions never raise a stage cost.
//  3. Bisect over integer B in [max item cost, total cost].
//
// Under a memory cap (MemoryCap) the greedy walk also cuts before a stage's
// memory would exceed the cap. Stage memory is monotone (a part of a stage
// never needs more than the stage), so the exchange argument still holds:
// the greedy walk uses the fewest stages of any partition meeting both
// bounds, and splitting a stage further never breaks either bound.
//
// tests/unit/lib/PartitionerTest.cpp compares both with exhaustive searches.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_PARTITIONER_H
#define PPC_LIB_PARTITIONER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace ppc {

/// `allowed(i)` says whether a stage may begin at item i (0 < i < n).
using CutPredicate = std::function<bool(size_t)>;

/// The memory a stage needs, in bytes: the sum of its items' own bytes
/// (activations kept for one microbatch) plus every tensor its items read
/// (parameters and buffers), each counted once per stage however many of
/// its items read it; a tensor read in two stages counts in both, as each
/// stage file holds its own copy.
struct StageMemoryModel {
  /// Per item: bytes of its own (non-negative).
  std::vector<int64_t> itemBytes;
  /// Per item: indices into tensorBytes of the tensors it reads.
  std::vector<std::vector<size_t>> tensorsRead;
  /// Bytes of each shared tensor (non-negative).
  std::vector<int64_t> tensorBytes;
};

/// A bound on every stage's memory.
struct MemoryCap {
  const StageMemoryModel &model;
  int64_t bytes;
};

/// Returns the first item of each stage (starts[0] == 0), ascending, for
/// `stages` stages over items with the given non-negative costs, minimizing
/// the largest stage cost, and with `cap` also keeping every stage's memory
/// within cap->bytes. Errors: stages < 1, or fewer than stages-1 allowed cut
/// positions ("cannot split into 5 stages: only 3 cut points"); with a cap
/// below smallestMemoryCap() for that stage count, "no partition into 4
/// stages keeps every stage within 1000 bytes" (callers that can name the
/// items check the cap first and say more).
llvm::Expected<std::vector<size_t>>
minMaxPartition(llvm::ArrayRef<int64_t> costs, int stages,
                const CutPredicate &allowed, const MemoryCap *cap = nullptr);

/// Cost of each stage given its starts.
std::vector<int64_t> stageCosts(llvm::ArrayRef<int64_t> costs,
                                llvm::ArrayRef<size_t> starts);

/// Memory of each stage given its starts.
std::vector<int64_t> stageMemories(const StageMemoryModel &model,
                                   llvm::ArrayRef<size_t> starts);

/// The smallest cap under which `stages` stages exist: the least largest
/// stage memory over every partition into `stages` stages cutting only
/// where allowed. Call it only when such partitions exist (at least
/// stages-1 allowed cuts; minMaxPartition without a cap says so).
int64_t smallestMemoryCap(const StageMemoryModel &model, int stages,
                          const CutPredicate &allowed);

/// The items [begin, end) that no allowed cut separates whose memory is the
/// largest: no cap below `bytes` admits any partition.
struct Segment {
  size_t begin, end;
  int64_t bytes;
};
Segment largestSegment(const StageMemoryModel &model,
                       const CutPredicate &allowed);

} // namespace ppc

#endif // PPC_LIB_PARTITIONER_H
