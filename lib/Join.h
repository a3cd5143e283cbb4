//===- lib/Join.h - Put trained stage tensors into the model ----*- C++ -*-===//
//
// The inverse of ppc split for weights: after the stages were trained (ppc
// train --save writes new stage files and a manifest with their hashes),
// joinStages() writes the original model, the one the manifest names, with
// every parameter and buffer of the stage files put back under its name.
// docs/join.md describes the checks.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_JOIN_H
#define PPC_LIB_JOIN_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <string>

namespace ppc {

/// What joinStages() wrote.
struct JoinReport {
  /// The original model file that was read (the manifest's source path,
  /// resolved).
  std::string originalPath;
  size_t stages = 0;
  /// Parameters and buffers of the written model whose values came from a
  /// stage file, each tensor once (as Python's named_parameters() counts): a
  /// tensor the original holds under two paths (tied embeddings) is one.
  size_t parameters = 0;
  size_t buffers = 0;
  /// Parameters and buffers no stage holds: kept as the original had them.
  size_t unchanged = 0;
};

/// Writes to `outputPath` the model the manifest at `manifestPath` was split
/// from, with the parameters and buffers of its stage files:
///
///  1. Load the manifest, and refuse an output that is the manifest, a stage
///     file or the original model.
///  2. Find the original model: the manifest's source path (when relative,
///     tried as given and then against the manifest's directory). Read it
///     once and check its size and SHA-256 against the manifest before
///     loading those bytes.
///  3. Load each stage (Stage::load: its hash is checked) and copy each of
///     its parameters and buffers (dotted paths, submodules included) into
///     the original's tensor at the same path, in place, so that tensors the
///     original shares between paths stay shared. A tensor that several
///     stages hold (manifest tiedParameters) must be the same in each.
///  4. Save the model in its format (the manifest's), training flag as it
///     was, whole or not at all.
///
/// Errors, one line each:
///   "the output 'o.pt' is the manifest; refusing to overwrite it"
///   (likewise "is stage 1 file 'out/stage_1.pt'", "is the original model
///   'm.pt'");
///   "the original model 'm.pt' named by the manifest is missing";
///   "the original model 'm.pt' does not match the manifest (sha256
///   ab12... != cd34...); ppc join needs the model the stages were split
///   from";
///   "stage 1 holds parameter 'fc.bias', which the original model lacks";
///   "stage 1 'fc.bias' is a parameter; in the original model it is a
///   buffer";
///   "stage 1 'fc.weight' is Float [10, 64]; the original model's is Float
///   [10, 32]";
///   "the copies of tied tensor 'embed.weight' differ: stage 0
///   'embed.weight' != stage 1 'head.weight' (max abs diff 0.5)";
///   Manifest::load's, readFileBounded's, Stage::load's, the manifest's
///   format's loader's (for the original model), saveExecutable's. On any error
///   `outputPath` is left as it was.
llvm::Expected<JoinReport> joinStages(llvm::StringRef manifestPath,
                                      llvm::StringRef outputPath);

} // namespace ppc

#endif // PPC_LIB_JOIN_H
