//===- passes/PlanPartition.h - Choose where stages begin -------*- C++ -*-===//
//
// planPartition() turns a request into a verified PartitionPlan. It is the
// one place that decides where stages begin, for `ppc split` and for
// `ppc split-graph` (the golden tests), so the tests exercise the real code:
//
//  1. Resolve each named split point to the item that begins its stage: a
//     module path (--split-at) to the first item run on behalf of that
//     module, a value name (--split-before) to the item producing it. With
//     no split points, the exact min-max partitioner picks the starts for
//     the requested stage count over the given item costs, under a cap on
//     each stage's memory if one is given. An impossible cap is refused
//     before: naming the items no cut separates that alone exceed it, else
//     the smallest cap that admits the stage count.
//  2. Check the named starts: none at the very first item (stage 0 would be
//     empty), in execution order, and each a cut the ItemGraph allows.
//  3. Build the PartitionPlan and verify() it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_PLANPARTITION_H
#define PPC_PASSES_PLANPARTITION_H

#include "lib/PartitionPlan.h"
#include "lib/Partitioner.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace torch::jit {
struct Module;
}

namespace ppc {

/// How to cut: a stage count, or the points where stages begin (at most one
/// of splitAt and splitBefore is non-empty).
struct PartitionRequest {
  int stages = 0;
  /// Module paths as in named_modules() ("layer3", "fc"), in execution order.
  std::vector<std::string> splitAt;
  /// Values ("%x" or "x") whose producing operations begin stages, in graph
  /// order; for graphs without a module (split-graph).
  std::vector<std::string> splitBefore;
  /// A bound on each stage's memory in bytes (stage count only).
  std::optional<int64_t> maxStageMemory;
};

/// Chooses the stages of `graph` and returns the verified plan. `costs`
/// holds one cost per item (used for a stage count only). `module` may be
/// null (graph text): module paths then resolve only through the scopes
/// recorded on the graph. Errors, each on one line: an unknown path or value
/// ("unknown split path 'x': ..."; "no operation produces '%x'"), a path
/// forward never runs, a point at the first item ("... stage 0 would be
/// empty"), points out of execution order, a point inside a state buffer's
/// reads and writes ("split path 'x' separates the reads and writes of
/// buffer 'cache' (stages 0 and 1); split before or after them"), another
/// blocked cut ("cannot begin a stage at 'x': <why>"), the partitioner's errors
/// for a stage count, and PartitionPlan::verify()'s. With
/// request.maxStageMemory, `memory` must describe the items; an impossible cap
/// is an error: "item 3 (aten::linear in layers.1) alone needs 2.0 MiB (2097152
/// bytes), more than
/// --max-stage-memory 1048576", or "--max-stage-memory 1048576 is too small
/// for 4 stages: the smallest cap that admits them is 3145728 (3.0 MiB)".
llvm::Expected<PartitionPlan>
planPartition(const ItemGraph &graph, llvm::ArrayRef<int64_t> costs,
              const PartitionRequest &request, const torch::jit::Module *module,
              const StageMemoryModel *memory = nullptr);

/// "1.5 MiB", "512 KiB", "17 bytes": a byte count for people.
std::string formatBytes(int64_t bytes);

} // namespace ppc

#endif // PPC_PASSES_PLANPARTITION_H
