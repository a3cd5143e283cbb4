//===- passes/RefineProfile.h - Item times by stage -------------*- C++ -*-===//
//
// refineProfiledCosts() is the feedback loop of `ppc split --cost profile
// --stages N`. Item times measured inside the whole model mispredict stages
// whose weights fit the caches once a rank runs only them (ProfileItems.h),
// so the loop checks each partition it would choose by measurement:
//
//  1. Partition the current item costs with planPartition() (the exact
//     min-max partitioner, under the memory cap if any).
//  2. Time each stage of that partition alone (profileStageTimes()).
//  3. Keep the partition if its measured max/mean stage time is the best so
//     far; stop when it is within 5 % of balance, when a partition repeats,
//     or after `rounds` partitions.
//  4. Otherwise scale the costs of each stage's items by the stage's
//     measured time over its predicted time, and go to 1.
//
// It returns the costs that produced the best partition, so planPartition()
// on them chooses that partition again, and the manifest's predicted costs
// are the corrected times.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_REFINEPROFILE_H
#define PPC_PASSES_REFINEPROFILE_H

#include "passes/PlanPartition.h"
#include "passes/ProfileItems.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace ppc {

/// Item costs (nanoseconds) whose min-max partition for `request` (a stage
/// count) measured best, starting from `itemTimes` (profileItemTimes()).
/// Errors: planPartition()'s and profileStageTimes()'s.
llvm::Expected<std::vector<int64_t>>
refineProfiledCosts(const ItemGraph &graph, const torch::jit::Module &module,
                    const std::vector<c10::IValue> &example,
                    const PartitionRequest &request,
                    const StageMemoryModel *memory,
                    std::vector<int64_t> itemTimes, int rounds = 4);

} // namespace ppc

#endif // PPC_PASSES_REFINEPROFILE_H
