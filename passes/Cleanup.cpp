//===- passes/Cleanup.cpp - Pool constants, remove dead code --------------===//
//
// After inlining, every callee brings its own copies of constants, and the
// calls leave unused values behind. Pooling constants and removing dead
// code keeps the stage graphs (and the golden tests) small and stable.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

namespace ppc {

void cleanup(const std::shared_ptr<torch::jit::Graph> &graph) {
  torch::jit::ConstantPooling(graph);
  torch::jit::EliminateDeadCode(graph);
}

} // namespace ppc
