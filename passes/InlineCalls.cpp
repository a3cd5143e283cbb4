//===- passes/InlineCalls.cpp - Inline method and function calls ----------===//
//
// Partitioning works on one flat graph: every prim::CallMethod and
// prim::CallFunction is replaced by the callee's body. Each inlined node is
// tagged with the path of the module instance it runs for, as its Scope
// ("layers.4", "layer2.0.conv1"); --split-at finds a module's first node by
// it. LibTorch's own inliner cannot give that path: it records only the
// last attribute name of each call ("4" for self.layers[4]), because
// containers like ModuleList make no call of their own.
//
// The path of a call comes from its module operand, a prim::GetAttr chain
// that, once the enclosing calls are inlined, starts at the graph's self:
//
//   %layers = prim::GetAttr[name="layers"](%self)
//   %l4 = prim::GetAttr[name="4"](%layers)
//   %y = prim::CallMethod[name="forward"](%l4, %x)     # path "layers.4"
//
// Calls are inlined from the un-inlined callee graph, one level per sweep,
// until none is left; a function call keeps the path of its caller.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <optional>

namespace ppc {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

/// "a.b.c" for a GetAttr chain from the graph's first input; nullopt when
/// the module does not come from self that way.
static std::optional<std::string> modulePath(Value *module, Value *self) {
  std::string path;
  while (module != self) {
    Node *n = module->node();
    if (n->kind() != c10::prim::GetAttr)
      return std::nullopt;
    path = path.empty() ? n->s(c10::attr::name)
                        : n->s(c10::attr::name) + "." + path;
    module = n->input();
  }
  return path;
}

static torch::jit::ScopePtr scopeFor(const std::string &path) {
  auto root = c10::make_intrusive<torch::jit::Scope>();
  return path.empty() ? root : root->push(c10::Symbol::scope(path));
}

/// Inlines the calls found in one walk over `block`; returns whether any.
static bool inlineSweep(Block *block, Value *self) {
  bool changed = false;
  for (auto it = block->nodes().begin(), end = block->nodes().end();
       it != end;) {
    Node *cur = *it++;
    if (cur->kind() != c10::prim::CallMethod &&
        cur->kind() != c10::prim::CallFunction) {
      for (Block *b : cur->blocks())
        changed |= inlineSweep(b, self);
      continue;
    }
    torch::jit::GraphFunction *fn = torch::jit::tryToGraphFunction(cur);
    if (!fn)
      continue;
    torch::jit::ScopePtr scope = cur->scope();
    if (cur->kind() == c10::prim::CallMethod) {
      if (auto path = self ? modulePath(cur->input(0), self) : std::nullopt)
        scope = scopeFor(*path);
    } else {
      cur->removeInput(0); // the function constant
    }
    torch::jit::Graph *graph = block->owningGraph();
    torch::jit::ScopePtr saved = graph->current_scope();
    graph->set_current_scope(scope);
    torch::jit::inlineCallTo(cur, fn, fn->graph().get());
    graph->set_current_scope(saved);
    changed = true;
  }
  return changed;
}

void inlineCalls(const std::shared_ptr<torch::jit::Graph> &graph) {
  Value *self = nullptr;
  if (!graph->inputs().empty())
    if (auto cls = graph->inputs()[0]->type()->cast<c10::ClassType>();
        cls && cls->is_module())
      self = graph->inputs()[0];
  while (inlineSweep(graph->block(), self)) {
  }
}

} // namespace ppc
