//===- lib/StateBuffers.cpp - Buffers a graph writes in place -------------===//
//
// This file implements the state-buffer analysis: one walk over the graph in
// node order (blocks included), mapping every value that aliases a buffer to
// that buffer, recording the nodes that take such a value and whether any
// of them writes it. See StateBuffers.h for the rules.
//
//===----------------------------------------------------------------------===//
#include "lib/StateBuffers.h"

#include <algorithm>
#include <unordered_map>

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace ppc {

namespace {

class StateWalk {
public:
  std::vector<StateBuffer> run(Graph &graph);

private:
  void walk(Block *block);
  void visitGetAttr(Node *n);
  void visitUse(Node *n);
  void passAliases(Node *n, const c10::FunctionSchema &schema);

  struct Buffer {
    std::string path;
    std::vector<Node *> touches;
    bool written = false;
  };
  std::vector<Buffer> buffers;
  std::unordered_map<std::string, size_t> byPath;
  /// Module values by attribute path ("" for the module input).
  std::unordered_map<const Value *, std::string> modulePaths;
  /// Values aliasing (or holding the new content of) a buffer.
  std::unordered_map<const Value *, size_t> bufferOf;
};

} // namespace

std::vector<StateBuffer> StateWalk::run(Graph &graph) {
  if (graph.inputs().empty())
    return {};
  auto cls = graph.inputs()[0]->type()->cast<c10::ClassType>();
  if (!cls || !cls->is_module())
    return {};
  modulePaths[graph.inputs()[0]] = "";
  walk(graph.block());
  std::vector<StateBuffer> out;
  for (Buffer &b : buffers)
    if (b.written && !b.touches.empty())
      out.push_back({std::move(b.path), std::move(b.touches)});
  std::stable_sort(out.begin(), out.end(),
                   [](const StateBuffer &a, const StateBuffer &b) {
                     return a.touches.front()->isBefore(b.touches.front());
                   });
  return out;
}

void StateWalk::walk(Block *block) {
  for (Node *n : block->nodes()) {
    if (n->kind() == c10::prim::GetAttr)
      visitGetAttr(n);
    else
      visitUse(n);
    for (Block *inner : n->blocks())
      walk(inner);
  }
}

/// A module attribute: a submodule (its path recorded) or a tensor that is
/// no parameter (a buffer).
void StateWalk::visitGetAttr(Node *n) {
  auto base = modulePaths.find(n->input());
  if (base == modulePaths.end())
    return;
  const std::string &name = n->s(c10::attr::name);
  std::string path = base->second.empty() ? name : base->second + "." + name;
  auto cls = n->input()->type()->cast<c10::ClassType>();
  if (auto sub = n->output()->type()->cast<c10::ClassType>();
      sub && sub->is_module()) {
    modulePaths[n->output()] = std::move(path);
    return;
  }
  if (n->output()->type()->kind() != c10::TypeKind::TensorType || !cls)
    return;
  auto slot = cls->findAttributeSlot(name);
  if (!slot || cls->is_parameter(*slot))
    return;
  auto [it, fresh] = byPath.try_emplace(path, buffers.size());
  if (fresh)
    buffers.push_back({path, {}, false});
  bufferOf[n->output()] = it->second;
}

/// A node taking buffer aliases touches them; its schema says which it
/// writes and which results alias them.
void StateWalk::visitUse(Node *n) {
  std::vector<size_t> touched;
  for (Value *v : n->inputs())
    if (auto it = bufferOf.find(v);
        it != bufferOf.end() &&
        std::find(touched.begin(), touched.end(), it->second) == touched.end())
      touched.push_back(it->second);
  if (touched.empty())
    return;
  for (size_t b : touched)
    buffers[b].touches.push_back(n);
  const c10::FunctionSchema *schema = n->maybeSchema();
  if (!schema)
    return;
  const auto &formals = schema->arguments();
  for (size_t i = 0; i < formals.size() && i < n->inputs().size(); ++i) {
    const c10::AliasInfo *alias = formals[i].alias_info();
    auto it = bufferOf.find(n->input(i));
    if (alias && alias->isWrite() && it != bufferOf.end())
      buffers[it->second].written = true;
  }
  passAliases(n, *schema);
}

/// Results sharing an alias set with a buffer's alias are its aliases; the
/// source of a copy_ into a buffer holds its new content.
void StateWalk::passAliases(Node *n, const c10::FunctionSchema &schema) {
  const auto &formals = schema.arguments();
  const auto &returns = schema.returns();
  for (size_t j = 0; j < returns.size() && j < n->outputs().size(); ++j) {
    const c10::AliasInfo *out = returns[j].alias_info();
    if (!out)
      continue;
    for (size_t i = 0; i < formals.size() && i < n->inputs().size(); ++i) {
      const c10::AliasInfo *in = formals[i].alias_info();
      auto it = bufferOf.find(n->input(i));
      if (!in || it == bufferOf.end())
        continue;
      bool shared = std::any_of(
          out->beforeSets().begin(), out->beforeSets().end(),
          [&](c10::Symbol set) { return in->beforeSets().count(set) != 0; });
      if (shared) {
        bufferOf.emplace(n->output(j), it->second);
        break;
      }
    }
  }
  if (n->kind() == c10::aten::copy_ && n->inputs().size() >= 2)
    if (auto it = bufferOf.find(n->input(0)); it != bufferOf.end())
      bufferOf.emplace(n->input(1), it->second);
}

std::vector<StateBuffer> findStateBuffers(Graph &graph) {
  return StateWalk().run(graph);
}

} // namespace ppc
