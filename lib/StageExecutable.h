//===- lib/StageExecutable.h - A model format's runnable module -*- C++ -*-===//
//
// The run-time half of the model-format seam (lib/ModelFormat.h): what the
// runtime, ppc verify and ppc join need of a loaded stage (or of a whole
// model), whatever format its file is in. A format implements it once
// (TorchScript: lib/TorchScriptStage.h); lib/Stage.h wraps it with the
// manifest's checks.
//
// The calls run LibTorch code and report failures as LibTorch does, by
// throwing (c10::Error, std::exception); callers turn them into llvm::Error
// at one adapter, torchCall() (lib/Error.h).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_STAGEEXECUTABLE_H
#define PPC_LIB_STAGEEXECUTABLE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <ostream>
#include <string>
#include <vector>

namespace ppc {

/// A parameter or buffer under its dotted attribute path ("layer1.0.weight").
struct NamedTensor {
  std::string name;
  at::Tensor value;
};

class StageExecutable {
public:
  virtual ~StageExecutable();

  /// Runs the forward computation on `inputs` (in the manifest's order for a
  /// stage, the model's for a whole model) and returns its result: for a
  /// stage, a tuple of its outputs.
  virtual c10::IValue forward(std::vector<c10::IValue> inputs) = 0;

  /// Every parameter, submodules included, each tensor once.
  virtual std::vector<at::Tensor> parameters() const = 0;
  /// Parameters and buffers by dotted path, submodules included.
  virtual std::vector<NamedTensor> namedParameters() const = 0;
  virtual std::vector<NamedTensor> namedBuffers() const = 0;
  /// Every tensor the module holds by dotted path: parameters, buffers and
  /// plain tensor attributes (a .pt2 program's lifted constants, among
  /// them the state a decoder's wrapper keeps), submodules included.
  virtual std::vector<NamedTensor> namedTensors() const = 0;
  /// The tensor at a dotted attribute path (a tied parameter's use names
  /// one); the path must exist and hold a tensor.
  virtual at::Tensor tensorAt(llvm::StringRef path) const = 0;

  /// Makes the buffer at dotted path `path` hold `value` itself, no copy:
  /// later forward() calls read and write `value`. A runtime keeps one copy
  /// of a stage's state (the manifest's StageInfo::state) per group of
  /// independent sequences and swaps it in before running that group.
  /// Throws when `path` names no buffer (a missing attribute, a parameter,
  /// something not a tensor).
  virtual void setBuffer(llvm::StringRef path, at::Tensor value) = 0;
  /// Makes the parameter or buffer at `path` hold `value` itself (weights
  /// bound from a checkpoint, lib/WeightBinding.h). Throws when `path` names
  /// neither.
  virtual void setWeight(llvm::StringRef path, at::Tensor value) = 0;

  virtual bool isTraining() const = 0;
  virtual void setTraining(bool on) = 0;
  /// Moves parameters and buffers to `device`, keeping their identity (an
  /// optimizer holding them still holds them).
  virtual void to(const c10::Device &device) = 0;

  /// Writes the module in its format, as it is now (training flag included),
  /// to a file that this format's loader reads back.
  virtual void save(std::ostream &out) const = 0;
};

/// Saves `executable` to `path` atomically (writeFileAtomically), streaming
/// it into the temporary file rather than through a second in-memory copy.
/// Errors: writeFileAtomically's, and the save's own as "WHAT: cause".
llvm::Error saveExecutable(const StageExecutable &executable,
                           llvm::StringRef path, const llvm::Twine &what);

} // namespace ppc

#endif // PPC_LIB_STAGEEXECUTABLE_H
