//===- passes/Compile.h - The ppc split pipeline ----------------*- C++ -*-===//
//
// compileModel() is what `ppc split` does, as a library call:
//
//  1. Load the module and copy its forward graph.
//  2. Prepare it: run the passes its format asks for (ModelFormat::
//     preparePasses(); TorchScript: inline, fold constants, functionalize,
//     clean up).
//  3. Analyze: ItemGraph (items, rematerializable values, legal cuts) and
//     the cost of each item under the chosen cost model; with an example
//     input (checked against the model inputs as ppc run checks inputs),
//     also what each stage would hold in memory (for --max-stage-memory).
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
#include "lib/WeightBinding.h"
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
  /// Required by, and only allowed with, the flops and profile costs.
  std::optional<std::string> exampleInput;
  /// --weights: the checkpoint whose tensors the stages carry (bound before
  /// the analysis, so that --cost profile times real weights).
  WeightOptions weights;
};

struct CompileResult {
  Manifest manifest;
  /// Each stage's memory (parameters, buffers and one microbatch's
  /// activations; lib/Partitioner.h), when an example input measured it;
  /// else empty.
  std::vector<int64_t> stageMemory;
  /// What the user should know about the chosen stages, one line each
  /// without the "warning: " prefix: under --cost flops, the stages whose
  /// operations the flops model could not count (CostModel.h), each naming
  /// them and suggesting --cost profile.
  std::vector<std::string> warnings;
  /// What the user may like to know, one line each without "note: ": state
  /// buffers that start as zeros, tensors read from --weights.
  std::vector<std::string> notes;
};

/// Runs the whole split. Errors: every problem named in the steps above,
/// each on one line, among them "output directory 'D' holds the model
/// 'M'; ..." and "output directory 'D' holds 'F', which is not part of the
/// earlier ppc output there; refusing to replace it"; option combinations
/// ("the profile cost model needs an example input (--example-input
/// IN.pt)", "--example-input is only used by --cost flops and --cost
/// profile", "--max-stage-memory needs --cost profile or flops, which
/// measure activations on --example-input"); an example input that does not
/// fit ("example input 'x.pt': the model takes 2 inputs, got 1"); on any
/// error OUTDIR is left as it was.
llvm::Expected<CompileResult> compileModel(const CompileOptions &options);

} // namespace ppc

#endif // PPC_PASSES_COMPILE_H
