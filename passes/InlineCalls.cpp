//===- passes/InlineCalls.cpp - Inline method and function calls ----------===//
//
// Partitioning works on one flat graph: every prim::CallMethod and
// prim::CallFunction is replaced by the callee's body. The inliner records
// the call stack (module instance names) on the inlined nodes, which is how
// --split-at finds the nodes run on behalf of a submodule.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include <torch/csrc/jit/passes/inliner.h>

namespace ppc {

void inlineCalls(const std::shared_ptr<torch::jit::Graph> &graph) {
  torch::jit::Inline(*graph);
}

} // namespace ppc
