//===- lib/StageModule.h - A stage graph as a module ------------*- C++ -*-===//
//
// Turns a stage graph whose first input is the original model's `self` into
// a standalone TorchScript module:
//
//  1. Walk the graph (blocks included) and record the attribute path of
//     every prim::GetAttr chain rooted at self ("layer1.0.conv1.weight").
//  2. Mirror just those paths: a new module class per submodule on a path,
//     holding only the attributes the graph reads, under their original
//     names, with their original kinds (parameter, buffer, plain attribute)
//     and values (tensors are shared, not copied, until the module is saved).
//  3. Retype self and the module-typed GetAttr results to the new classes and
//     add the graph as the class's forward method.
//
// The state_dict keys of the result are therefore a subset of the
// original's, and the module loads in C++ and in Python.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_STAGEMODULE_H
#define PPC_LIB_STAGEMODULE_H

#include "llvm/Support/Error.h"

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>
#include <vector>

namespace ppc {

struct StageModule {
  struct TensorAttribute {
    std::string path;
    at::Tensor tensor;
    bool isParameter;
  };

  torch::jit::Module module;
  /// Tensor attributes (parameters, buffers, plain tensors) the stage holds.
  std::vector<TensorAttribute> tensors;
};

/// Builds stage `index`'s module from its graph. `graph` is consumed (it
/// becomes the forward method). Errors: the graph has no module input, or
/// reads an attribute that cannot be copied (an object that is not a
/// module), named with its path.
llvm::Expected<StageModule>
buildStageModule(const torch::jit::Module &original,
                 std::shared_ptr<torch::jit::Graph> graph, int index);

} // namespace ppc

#endif // PPC_LIB_STAGEMODULE_H
