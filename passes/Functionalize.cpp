//===- passes/Functionalize.cpp - In-place ops to functional ops ----------===//
//
// An in-place op hides dataflow: in
//
//   %y = aten::relu_(%x)     # stage 1
//   %z = aten::add(%x, %w)   # stage 2 reads the *mutated* %x
//
// a direct edge carrying %x from its producer would hand stage 2 a stale
// value. Rewriting to %y = aten::relu(%x) and using %y afterwards makes the
// dependence explicit. LibTorch's mutation remover does this where alias
// analysis proves it safe (no other alias observes the write); the writes
// that remain are kept in one stage with their later reads by ItemGraph.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include <torch/csrc/jit/passes/remove_mutation.h>

namespace ppc {

void functionalize(const std::shared_ptr<torch::jit::Graph> &graph) {
  torch::jit::RemoveListMutation(graph);
  torch::jit::RemoveTensorMutation(graph);
}

} // namespace ppc
