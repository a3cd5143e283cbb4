//===- passes/Compile.h - The ppc split pipeline ----------------*- C++ -*-===//
//
// compileModel() is what `ppc split` does, as a library call:
//
//  1. Load the module and copy its forward graph.
//  2. Prepare it: run the passes of Passes.def (inline, functionalize,
//     clean up).
//  3. Analyze: ItemGraph (items, rematerializable values, legal cuts) and
//     the cost of each item under the chosen cost model.
//  4. Choose the partition: --split-at paths, or the exact min-max
//     partitioner for --stages; verify the PartitionPlan.
//  5. Materialize each stage (extractStage + buildStageModule) and write
//     the stage files and the manifest into a temporary directory that
//     replaces OUTDIR only when everything succeeded.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_COMPILE_H
#define PPC_PASSES_COMPILE_H

#include "lib/CostModel.h"
#include "lib/Manifest.h"
#include "lib/PartitionPlan.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace ppc {

/// How to cut: either a stage count or the module paths where stages begin.
struct PartitionRequest {
  int stages = 0;
  std::vector<std::string> splitAt;
};

/// Chooses where stages begin (item indices). For split paths, each path
/// resolves to the first item run on behalf of that module. Errors: an
/// unknown path, a path never run by forward, paths out of execution order,
/// a path at the very first item (empty stage 0), a blocked cut (naming the
/// value that cannot cross), and the partitioner's errors for --stages.
/// `module` may be null (graphs without a module: paths cannot be resolved
/// against named submodules then).
llvm::Expected<std::vector<size_t>>
choosePartition(const ItemGraph &graph, const std::vector<int64_t> &costs,
                const PartitionRequest &request,
                const torch::jit::Module *module);

struct CompileOptions {
  std::string modelPath;
  std::string outDir;
  PartitionRequest partition;
  CostKind cost = CostKind::Params;
  std::optional<std::string> exampleInput;
};

/// Runs the whole split. Errors: every problem named in the steps above,
/// each on one line; on any error OUTDIR is left as it was.
llvm::Expected<Manifest> compileModel(const CompileOptions &options);

} // namespace ppc

#endif // PPC_PASSES_COMPILE_H
