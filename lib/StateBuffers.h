//===- lib/StateBuffers.h - Buffers a graph writes in place -----*- C++ -*-===//
//
// A stage's state is the set of its buffers (tensor attributes that are no
// parameters) that its nodes write in place: a decoder's key and value
// caches, a step counter. State lives in one stage: every node that reads or
// writes a state buffer must run where the buffer is, or a stage would read
// a stale copy. The analysis follows a buffer from its prim::GetAttr value
// through what aliases it, by the operators' schemas:
//
//   %c   = prim::GetAttr[name="cache"](%self)
//   %w   = aten::index_copy_(%c, %d, %pos, %x)   # writes %c: "cache" is state
//   %v   = aten::unsqueeze(%w, %d)               # a view of it: a touch
//   %out = aten::matmul(%q, %v)                  # reads it: a touch
//
// A result aliases an argument when the schema gives them a common alias set
// (views, `to` that may return self, in-place results); an argument is
// written when its alias annotation says so (`Tensor(a!)`). The value an
// aten::copy_ writes into a buffer is the buffer's new content, so later
// reads of it are touches too (the copies the .pt2 lowering makes for the
// buffer mutations a functional program declares). Nodes without a schema
// (prim::If, prim::TupleConstruct, ...) touch what they take but pass no
// alias on.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_STATEBUFFERS_H
#define PPC_LIB_STATEBUFFERS_H

#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <vector>

namespace ppc {

/// A buffer the graph writes in place, and where the graph touches it.
struct StateBuffer {
  /// Dotted attribute path from the graph's module ("layers.0.cache").
  std::string path;
  /// Every node that reads or writes the buffer, through any alias, in
  /// graph order; a node inside a block is listed itself, not its owner.
  std::vector<torch::jit::Node *> touches;
};

/// The state buffers of `graph`, whose first input is the module it runs
/// on (none when it has no module input), in the order of their first
/// touch. Reads the graph only.
std::vector<StateBuffer> findStateBuffers(torch::jit::Graph &graph);

} // namespace ppc

#endif // PPC_LIB_STATEBUFFERS_H
