//===- passes/SinkStateWrites.cpp - Writes of state next to its reads -----===//
//
// State lives in one stage (lib/StateBuffers.h), so the partitioner keeps
// every node that touches a state buffer between its first and its last
// touch in one stage. A program may write its state long before it reads it
// again: transformers' exported decoders reset each layer's counter at the
// top of forward,
//
//   %n3 = aten::copy_(%cumulative_length_3, %pos, %false)  # before layer 0
//   ...                                                    # layers 0 to 2
//   %i3 = aten::add(%arange, %n3, %one)                    # layer 3
//
// which would keep layers 0 to 3 in one stage. This pass moves each
// top-level node that writes a state buffer down to just before the next
// node touching that buffer, where alias analysis (module attributes read as
// distinct objects, as in a frozen module) says the move keeps the meaning
// (otherwise the node stays), and with it the nodes computing only its
// operands (%pos above), so that they cross no cut.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "lib/StateBuffers.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

using torch::jit::Node;

namespace ppc {

/// The top-level node `n` runs in.
static Node *topLevel(Node *n, const torch::jit::Block *top) {
  while (n->owningBlock() != top)
    n = n->owningBlock()->owningNode();
  return n;
}

/// Whether top-level `n` writes an input the schema marks written.
static bool writes(const Node *n) {
  const c10::FunctionSchema *schema = n->maybeSchema();
  if (!schema)
    return false;
  for (const c10::Argument &a : schema->arguments())
    if (a.alias_info() && a.alias_info()->isWrite())
      return true;
  return false;
}

/// Moves the nodes whose only use is `n` (and theirs, recursively) down to
/// just before it, so that what a sunk write copies from is not computed
/// far above it and kept alive across a cut.
static void sinkOperands(Node *n, torch::jit::AliasDb &aliasDb) {
  for (torch::jit::Value *v : n->inputs()) {
    Node *producer = v->node();
    if (producer->owningBlock() != n->owningBlock() ||
        producer->kind() == c10::prim::Param ||
        producer->kind() == c10::prim::Constant ||
        producer->kind() == c10::prim::GetAttr || !producer->blocks().empty() ||
        producer->outputs().size() != 1 || v->uses().size() != 1 ||
        producer->next() == n)
      continue;
    if (aliasDb.moveBeforeTopologicallyValid(producer, n))
      sinkOperands(producer, aliasDb);
  }
}

void sinkStateWrites(const std::shared_ptr<torch::jit::Graph> &graph) {
  std::vector<StateBuffer> states = findStateBuffers(*graph);
  if (states.empty())
    return;
  torch::jit::AliasDb aliasDb(graph, /*isFrozen=*/true);
  for (const StateBuffer &state : states) {
    std::vector<Node *> touches;
    for (Node *n : state.touches) {
      Node *top = topLevel(n, graph->block());
      if (touches.empty() || touches.back() != top)
        touches.push_back(top);
    }
    // From the last touch up, so that each write sinks toward a node that
    // is already where it will stay.
    for (size_t i = touches.size(); i-- > 1;) {
      Node *write = touches[i - 1], *next = touches[i];
      if (write->next() != next && writes(write) && write->blocks().empty() &&
          aliasDb.moveBeforeTopologicallyValid(write, next))
        sinkOperands(write, aliasDb);
    }
  }
}

} // namespace ppc
