//===- passes/Compile.h - The ppc split pipeline ----------------*- C++ -*-===//
//
// compileModel() is what `ppc split` does, as a library call:
//
//  1. Load the module and copy its forward graph.
//  2. Prepare it: run the passes of Passes.def (inline, functionalize,
//     clean up).
//  3. Analyze: ItemGraph (items, rematerializable values, legal cuts) and
//     the cost of each item under the chosen cost model.
//  4. Choose the partition with planPartition() (passes/PlanPartition.h):
//     --split-at paths, or the exact min-max partitioner for --stages.
//  5. Materialize each stage (extractStage + buildStageModule) and write
//     the stage files and the manifest into a temporary directory that
//     replaces OUTDIR only when everything succeeded, and only if OUTDIR
//     is absent, empty, or provably an earlier ppc split output holding
//     nothing else. OUTDIR must not hold the model.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_COMPILE_H
#define PPC_PASSES_COMPILE_H

#include "lib/Manifest.h"
#include "passes/CostModel.h"
#include "passes/PlanPartition.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace ppc {

struct CompileOptions {
  std::string modelPath;
  std::string outDir;
  PartitionRequest partition;
  CostKind cost = CostKind::Params;
  std::optional<std::string> exampleInput;
};

/// Runs the whole split. Errors: every problem named in the steps above,
/// each on one line, among them "output directory 'D' holds the model
/// 'M'; ..." and "output directory 'D' holds 'F', which is not part of the
/// earlier ppc output there; refusing to replace it"; on any error OUTDIR
/// is left as it was.
llvm::Expected<Manifest> compileModel(const CompileOptions &options);

} // namespace ppc

#endif // PPC_PASSES_COMPILE_H
