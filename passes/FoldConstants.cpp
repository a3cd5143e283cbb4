//===- passes/FoldConstants.cpp - Fold constant expressions ---------------===//
//
// Inlining un-optimized callee graphs leaves branches on constant flags, as
// in torch.nn.functional.relu called with inplace=False:
//
//   %r = prim::If(%false)
//     block0(): %a = aten::relu_(%x) -> (%a)
//     block1(): %b = aten::relu(%x) -> (%b)
//
// Alias analysis must assume the dead branch may write %x, which would pin
// every later reader of %x into the same stage. Folding constants removes
// the dead branch first.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include <torch/csrc/jit/passes/constant_propagation.h>

namespace ppc {

void foldConstants(const std::shared_ptr<torch::jit::Graph> &graph) {
  std::shared_ptr<torch::jit::Graph> g = graph;
  torch::jit::ConstantPropagation(g);
}

} // namespace ppc
