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
// tests/unit/lib/PartitionerTest.cpp compares it with an exhaustive search.
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

/// Returns the first item of each stage (starts[0] == 0), ascending, for
/// `stages` stages over items with the given non-negative costs, minimizing
/// the largest stage cost. Errors: stages < 1, or fewer than stages-1
/// allowed cut positions ("cannot split into 5 stages: only 3 cut points").
llvm::Expected<std::vector<size_t>>
minMaxPartition(llvm::ArrayRef<int64_t> costs, int stages,
                const CutPredicate &allowed);

/// Cost of each stage given its starts.
std::vector<int64_t> stageCosts(llvm::ArrayRef<int64_t> costs,
                                llvm::ArrayRef<size_t> starts);

} // namespace ppc

#endif // PPC_LIB_PARTITIONER_H
