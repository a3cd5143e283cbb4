//===- lib/TorchScriptStage.h - A TorchScript stage executable --*- C++ -*-===//
//
// The TorchScript implementation of StageExecutable, over a
// torch::jit::Module, and the loader of TorchScript files that the
// TorchScript frontend (lib/TorchScriptFormat.cpp) shares with it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_TORCHSCRIPTSTAGE_H
#define PPC_LIB_TORCHSCRIPTSTAGE_H

#include "lib/StageExecutable.h"

#include "llvm/Support/Error.h"

#include <torch/csrc/jit/api/module.h>

namespace ppc {

class TorchScriptStage : public StageExecutable {
public:
  explicit TorchScriptStage(torch::jit::Module module)
      : module_(std::move(module)) {}

  c10::IValue forward(std::vector<c10::IValue> inputs) override;
  std::vector<at::Tensor> parameters() const override;
  std::vector<NamedTensor> namedParameters() const override;
  std::vector<NamedTensor> namedBuffers() const override;
  std::vector<NamedTensor> namedTensors() const override;
  at::Tensor tensorAt(llvm::StringRef path) const override;
  void setBuffer(llvm::StringRef path, at::Tensor value) override;
  void setWeight(llvm::StringRef path, at::Tensor value) override;
  bool isTraining() const override;
  void setTraining(bool on) override;
  void to(const c10::Device &device) override;
  void save(std::ostream &out) const override;

  /// The module itself (its forward graph: Stage::load checks the state the
  /// graph writes against the manifest's).
  const torch::jit::Module &module() const { return module_; }

private:
  torch::jit::Module module_;
};

/// Loads a TorchScript module from `bytes`; `path` names it in errors.
/// Errors: records that would inflate beyond what the archive may hold
/// (checkZipInflation, lib/SafeRead.h; checked before anything is inflated),
/// the bytes are not a TorchScript archive, or use an operator this LibTorch
/// lacks (named with the way out).
llvm::Expected<torch::jit::Module> loadTorchScriptModule(llvm::StringRef bytes,
                                                         llvm::StringRef path);

/// The value at a dotted attribute path of a module ("layer1.0.conv1.weight";
/// "" is the module itself). The path must exist.
c10::IValue attributeAt(const torch::jit::Module &module, llvm::StringRef path);

} // namespace ppc

#endif // PPC_LIB_TORCHSCRIPTSTAGE_H
