//===- lib/Stage.h - A loaded stage module ----------------------*- C++ -*-===//
//
// Loads a stage file named by a manifest (checking its SHA-256) with the
// manifest's model format (lib/ModelFormat.h) and runs it: inputs and outputs
// are in manifest order, and outputs are checked against the manifest's
// declared count and kinds.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_STAGE_H
#define PPC_LIB_STAGE_H

#include "lib/Manifest.h"
#include "lib/StageExecutable.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace ppc {

class WeightSource;

/// The directory a manifest's relative stage paths are resolved against.
std::string manifestDirectory(llvm::StringRef manifestPath);

class Stage {
public:
  /// Loads stage `index` of `manifest`, resolving its file against `dir`.
  /// The file must stay inside `dir` (checkStageFile), is read once as a
  /// regular file of at most kMaxStageFileBytes, and the bytes hashed are the
  /// bytes loaded. Errors: checkStageFile's; a missing file ("stage 1 file
  /// 'out/stage_1.pt' is missing"); readFileBounded's ("stage 1 file
  /// 'out/stage_1.pt' is not a regular file (a FIFO)"); a SHA-256 that
  /// differs from the manifest's ("stage 1 file 'out/stage_1.pt' does not
  /// match the manifest (sha256 ab12... != cd34...)"); the format's loader's;
  /// a manifest whose state of the stage is not what the stage's program
  /// writes in place ("stage 1's program writes 'k', 'v' in place, but the
  /// manifest lists its state as 'k': the manifest does not describe this
  /// stage (split again)").
  /// The stage is in eval mode.
  ///
  /// Weights: a stage whose program carries no data for some of its
  /// tensors (exported on the meta device) gets them from `weights`
  /// (lib/WeightBinding.h; mapped in place with `inPlace`, for stages that
  /// never write their weights); its state buffers without data start as
  /// zeros. Errors, too: WeightSource::bind()'s, and without `weights`
  /// "stage 1's weight 'w' holds no data (its program was exported without
  /// weights): give the checkpoint with --weights".
  static llvm::Expected<Stage> load(const Manifest &manifest,
                                    llvm::StringRef dir, int index,
                                    WeightSource *weights = nullptr,
                                    bool inPlace = false);

  /// Runs the stage. `inputs` follow the manifest's input order. Errors: a
  /// wrong input count, an exception inside the model (the line naming its
  /// cause, see firstLine(): "stage 0 failed: mat1 and mat2 shapes cannot be
  /// multiplied (5x63 and 64x64)"), or outputs that do not match the
  /// manifest's count or kinds.
  llvm::Expected<std::vector<c10::IValue>> run(std::vector<c10::IValue> inputs);

  int index() const { return info_->index; }
  const StageInfo &info() const { return *info_; }
  /// The loaded stage, for what the runtime does besides running it
  /// (parameters, train mode, device, save).
  StageExecutable &executable() { return *executable_; }

private:
  Stage(std::unique_ptr<StageExecutable> executable, const StageInfo &info)
      : executable_(std::move(executable)), info_(&info) {}

  std::unique_ptr<StageExecutable> executable_;
  const StageInfo *info_;
};

/// Runs every stage of `manifest` in this process, one after the other,
/// handing each stage the values the manifest routes to it, and returns the
/// model outputs in order. Stage files are resolved against `dir`. Errors:
/// Stage::load and Stage::run errors, and inputs that do not fit the model
/// ("the model takes 2 inputs, got 1"; "model input 0 ('x') must be a
/// Tensor, got a int").
llvm::Expected<std::vector<c10::IValue>>
runSequentially(const Manifest &manifest, llvm::StringRef dir,
                const std::vector<c10::IValue> &inputs,
                WeightSource *weights = nullptr);

/// Whether `value` has the manifest kind `kind`.
bool hasKind(const c10::IValue &value, ValueKind kind);

} // namespace ppc

#endif // PPC_LIB_STAGE_H
