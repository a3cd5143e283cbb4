//===- lib/Stage.h - A loaded stage module ----------------------*- C++ -*-===//
//
// Loads a stage file named by a manifest (checking its SHA-256) and runs it:
// inputs and outputs are in manifest order, and outputs are checked against
// the manifest's declared count and kinds.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_STAGE_H
#define PPC_LIB_STAGE_H

#include "lib/Manifest.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <torch/csrc/jit/api/module.h>

#include <vector>

namespace ppc {

/// Loads a TorchScript module, reading the file once as a regular file.
/// Errors: the file is missing ("cannot open 'm.pt': No such file or
/// directory"), is not a regular file ("model 'm.pt' is not a regular file
/// (a FIFO)") or is not a TorchScript archive ("'m.pt' is not a TorchScript
/// module: ...").
llvm::Expected<torch::jit::Module> loadModule(llvm::StringRef path);

/// The value at a dotted attribute path of a module ("layer1.0.conv1.weight";
/// "" is the module itself). The path must exist.
c10::IValue attributeAt(const torch::jit::Module &module, llvm::StringRef path);

/// Pays TorchScript's one-time costs in this process now rather than in
/// the first call of a stage: the graph executor's first optimization of a
/// graph compiles LibTorch's op decompositions from source (about 0.1-0.2 s),
/// which on a pipeline's critical path would be paid once per rank, one rank
/// after the other. Each rank calls it while loading, so the ranks pay it at
/// the same time. Runs a small built-in function twice (the profiling run,
/// then the optimized one); idempotent and thread-safe; never fails (a
/// failure only means the cost is paid later).
void warmUpTorchScript();

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
  /// match the manifest (sha256 ab12... != cd34...)"); an unloadable module.
  static llvm::Expected<Stage> load(const Manifest &manifest,
                                    llvm::StringRef dir, int index);

  /// Runs the stage. `inputs` follow the manifest's input order. Errors: a
  /// wrong input count, an exception inside the model (the line naming its
  /// cause, see firstLine(): "stage 0 failed: mat1 and mat2 shapes cannot be
  /// multiplied (5x63 and 64x64)"), or outputs that do not match the
  /// manifest's count or kinds.
  llvm::Expected<std::vector<c10::IValue>> run(std::vector<c10::IValue> inputs);

  int index() const { return info_->index; }
  const StageInfo &info() const { return *info_; }
  torch::jit::Module &module() { return module_; }

private:
  Stage(torch::jit::Module module, const StageInfo &info)
      : module_(std::move(module)), info_(&info) {}

  torch::jit::Module module_;
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
                const std::vector<c10::IValue> &inputs);

/// Whether `value` has the manifest kind `kind`.
bool hasKind(const c10::IValue &value, ValueKind kind);

} // namespace ppc

#endif // PPC_LIB_STAGE_H
