//===- lib/ItemGraph.cpp - What the partitioner sees of a graph -----------===//
//
// This file implements the classification of top-level nodes into
// rematerializable values and items, and the cut-blocking analysis. See
// ItemGraph.h for the rules.
//
//===----------------------------------------------------------------------===//
#include "lib/ItemGraph.h"

#include "lib/Error.h"
#include "lib/StateBuffers.h"

#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

#include <algorithm>
#include <map>
#include <unordered_set>

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

namespace ppc {

std::optional<ValueKind> boundaryKind(const c10::TypePtr &type) {
  if (type->kind() == c10::TypeKind::TensorType)
    return ValueKind::Tensor;
  if (type->kind() == c10::TypeKind::IntType)
    return ValueKind::Int;
  if (type->kind() == c10::TypeKind::FloatType)
    return ValueKind::Float;
  if (type->kind() == c10::TypeKind::BoolType)
    return ValueKind::Bool;
  if (auto list = type->cast<c10::ListType>()) {
    auto elem = list->getElementType()->kind();
    if (elem == c10::TypeKind::TensorType)
      return ValueKind::TensorList;
    if (elem == c10::TypeKind::IntType)
      return ValueKind::IntList;
    return std::nullopt;
  }
  if (auto tuple = type->cast<c10::TupleType>()) {
    if (tuple->schema())
      return std::nullopt; // NamedTuples need their class on the other side.
    for (const auto &elem : tuple->elements())
      if (elem->kind() != c10::TypeKind::TensorType)
        return std::nullopt;
    return ValueKind::TensorTuple;
  }
  return std::nullopt;
}

std::string sourceLocation(const Node *node) {
  auto loc = node->sourceRange().file_line_col();
  if (!loc)
    return "";
  return llvm::formatv("{0}:{1}", std::get<0>(*loc), std::get<1>(*loc));
}

std::string valueName(const Value *value) {
  if (value->hasDebugName())
    return value->debugName();
  return "%" + std::to_string(value->unique());
}

/// True if `type` holds no tensor anywhere (ints, lists of ints, strings...).
static bool isTensorFree(const c10::TypePtr &type) {
  if (type->kind() == c10::TypeKind::TensorType)
    return false;
  for (const auto &contained : type->containedTypes())
    if (!isTensorFree(contained))
      return false;
  return type->kind() != c10::TypeKind::ClassType &&
         type->kind() != c10::TypeKind::AnyType &&
         type->kind() != c10::TypeKind::InterfaceType;
}

/// Values used inside `node`'s blocks but defined outside `node`, in use
/// order; plus `node`'s own inputs first.
static std::vector<Value *> freeInputs(Node *node) {
  std::vector<Value *> out;
  std::unordered_set<Value *> seen;
  auto add = [&](Value *v) {
    if (seen.insert(v).second)
      out.push_back(v);
  };
  for (Value *v : node->inputs())
    add(v);
  std::vector<Block *> work(node->blocks().begin(), node->blocks().end());
  auto definedInside = [&](Value *v) {
    for (Node *n = v->node(); n; n = n->owningBlock()->owningNode())
      if (n == node)
        return true;
    return false;
  };
  while (!work.empty()) {
    Block *b = work.back();
    work.pop_back();
    for (Node *n : b->nodes()) {
      for (Value *v : n->inputs())
        if (!definedInside(v))
          add(v);
      for (Block *inner : n->blocks())
        work.push_back(inner);
    }
    for (Value *v : b->outputs())
      if (!definedInside(v))
        add(v);
  }
  return out;
}

/// The module instance path the inliner (passes/InlineCalls.cpp) recorded
/// as the node's scope; "" for the top-level forward.
static std::string modulePathOf(Node *node) {
  torch::jit::ScopePtr scope = node->scope();
  if (!scope || scope->isBlank())
    return "";
  return scope->name().toUnqualString();
}

void ItemGraph::collectNestedAttributeReads(Node *node,
                                            std::vector<Value *> &reads) {
  for (Block *b : node->blocks())
    for (Node *n : b->nodes()) {
      if (n->kind() == c10::prim::GetAttr && attrPaths_.count(n->input())) {
        const std::string &base = attrPaths_[n->input()];
        attrPaths_[n->output()] = base.empty()
                                      ? n->s(c10::attr::name)
                                      : base + "." + n->s(c10::attr::name);
        reads.push_back(n->output());
      }
      collectNestedAttributeReads(n, reads);
    }
}

llvm::Expected<ItemGraph>
ItemGraph::build(std::shared_ptr<torch::jit::Graph> graph) {
  // LibTorch (type queries, AliasDb) may throw on a graph it did not expect.
  auto built = torchCall(
      "cannot analyze the model graph",
      [&]() -> llvm::Expected<ItemGraph> { return analyze(std::move(graph)); });
  if (!built)
    return built.takeError();
  return std::move(*built);
}

llvm::Expected<ItemGraph>
ItemGraph::analyze(std::shared_ptr<torch::jit::Graph> graph) {
  ItemGraph g(std::move(graph));
  g.classify();
  for (size_t i = 0; i < g.modelInputs_.size(); ++i)
    if (!boundaryKind(g.modelInputs_[i]->type()))
      return makeError(
          llvm::formatv("model input {0} ('{1}') has type {2}, which "
                        "ppc cannot pass between stages",
                        i, valueName(g.modelInputs_[i]),
                        g.modelInputs_[i]->type()->repr_str()));
  for (size_t i = 0; i < g.modelOutputs_.size(); ++i) {
    Value *v = g.modelOutputs_[i];
    if (!boundaryKind(v->type()))
      return makeError(llvm::formatv("model output {0} has type {1}, which ppc "
                                     "cannot pass between stages",
                                     i, v->type()->repr_str()));
    if (g.isRematerializable(v))
      return makeError(
          llvm::formatv("model output {0} is a constant or a module "
                        "attribute; ppc needs outputs computed from "
                        "the inputs",
                        i));
  }
  if (g.items_.empty())
    return makeError("the model's forward computes nothing to split");
  if (llvm::Error err = g.findBlockers())
    return err;
  return g;
}

void ItemGraph::classify() {
  auto inputs = graph_->inputs();
  size_t first = 0;
  if (!inputs.empty()) {
    if (auto cls = inputs[0]->type()->cast<c10::ClassType>();
        cls && cls->is_module()) {
      self_ = inputs[0];
      remat_.insert(self_);
      attrPaths_[self_] = "";
      first = 1;
    }
  }
  for (size_t i = first; i < inputs.size(); ++i) {
    modelInputs_.push_back(inputs[i]);
    producers_[inputs[i]] = -1;
  }

  Node *ret = graph_->return_node();
  Node *packing = nullptr;
  if (ret->inputs().size() == 1) {
    Node *producer = ret->input()->node();
    if (producer->kind() == c10::prim::TupleConstruct &&
        ret->input()->uses().size() == 1) {
      packing = producer;
      outputIsTuple_ = true;
      for (Value *v : producer->inputs())
        modelOutputs_.push_back(v);
    }
  }
  if (!packing)
    for (Value *v : ret->inputs())
      modelOutputs_.push_back(v);

  for (Node *n : graph_->nodes()) {
    if (n == packing)
      continue;
    bool inputsRemat =
        std::all_of(n->inputs().begin(), n->inputs().end(),
                    [&](Value *v) { return remat_.count(v) != 0; });
    bool remat = false;
    if (n->kind() == c10::prim::Constant ||
        n->kind() == c10::prim::Uninitialized) {
      remat = true;
    } else if (n->kind() == c10::prim::GetAttr && inputsRemat &&
               attrPaths_.count(n->input())) {
      remat = true;
      const std::string &base = attrPaths_[n->input()];
      attrPaths_[n->output()] = base.empty()
                                    ? n->s(c10::attr::name)
                                    : base + "." + n->s(c10::attr::name);
    } else if (inputsRemat && n->blocks().empty() && !n->hasSideEffects() &&
               !n->isNondeterministic() && n->outputs().size() > 0 &&
               std::all_of(n->outputs().begin(), n->outputs().end(),
                           [](Value *v) { return isTensorFree(v->type()); })) {
      remat = true;
    }
    if (remat) {
      for (Value *v : n->outputs())
        remat_.insert(v);
      continue;
    }

    size_t index = items_.size();
    items_.push_back(n);
    modulePaths_.push_back(modulePathOf(n));
    std::vector<Value *> ins, attrs;
    for (Value *v : freeInputs(n)) {
      if (attrPaths_.count(v))
        attrs.push_back(v);
      else if (!remat_.count(v))
        ins.push_back(v);
      // Other rematerializable values (constants, int lists) need no record.
    }
    collectNestedAttributeReads(n, attrs);
    inputs_.push_back(std::move(ins));
    attributeReads_.push_back(std::move(attrs));
    for (Value *v : n->outputs())
      producers_[v] = static_cast<int>(index);
  }
}

int ItemGraph::producer(const Value *v) const {
  auto it = producers_.find(v);
  return it == producers_.end() ? -1 : it->second;
}

std::optional<std::string> ItemGraph::attributePath(const Value *v) const {
  auto it = attrPaths_.find(v);
  if (it == attrPaths_.end())
    return std::nullopt;
  return it->second;
}

void ItemGraph::findStateSpans() {
  std::unordered_map<const Node *, size_t> itemOf;
  for (size_t i = 0; i < items_.size(); ++i)
    itemOf[items_[i]] = i;
  for (const StateBuffer &state : findStateBuffers(*graph_)) {
    std::optional<StateSpan> span;
    for (Node *n : state.touches) {
      while (n->owningBlock() != graph_->block())
        n = n->owningBlock()->owningNode();
      // Rematerializable nodes (a size read) belong to no stage.
      auto it = itemOf.find(n);
      if (it == itemOf.end())
        continue;
      if (!span)
        span = StateSpan{state.path, it->second, it->second};
      span->first = std::min(span->first, it->second);
      span->last = std::max(span->last, it->second);
    }
    if (span)
      stateSpans_.push_back(std::move(*span));
  }
}

const StateSpan *ItemGraph::stateSplitBy(size_t i) const {
  for (const StateSpan &s : stateSpans_)
    if (s.first < i && i <= s.last)
      return &s;
  return nullptr;
}

llvm::Error ItemGraph::findBlockers() {
  const int n = static_cast<int>(items_.size());
  blockers_.assign(n + 1, std::nullopt);
  // Blocks every cut before items first+1 .. last (a window that must stay
  // in one stage), keeping the first reason found for each position.
  auto block = [&](int first, int last, const std::string &why) {
    for (int i = std::max(first + 1, 1); i <= std::min(last, n - 1); ++i)
      if (!blockers_[i])
        blockers_[i] = why;
  };

  // Last item reading each value; model outputs live to the end.
  std::unordered_map<const Value *, int> lastUse;
  for (int i = 0; i < n; ++i)
    for (Value *v : inputs_[i])
      lastUse[v] = i;
  for (Value *v : modelOutputs_)
    lastUse[v] = n;

  // 1. Live values of kinds that cannot cross.
  for (int i = 0; i < n; ++i)
    for (Value *v : items_[i]->outputs()) {
      auto it = lastUse.find(v);
      if (it == lastUse.end() || boundaryKind(v->type()))
        continue;
      std::string loc = sourceLocation(items_[i]);
      block(i, it->second,
            llvm::formatv("value '{0}' of type {1}{2} cannot cross a stage "
                          "boundary",
                          valueName(v), v->type()->repr_str(),
                          loc.empty() ? std::string() : " (from " + loc + ")"));
    }

  // 2. State lives in one stage: every read and write of it stays together.
  findStateSpans();
  for (const StateSpan &s : stateSpans_)
    block(static_cast<int>(s.first), static_cast<int>(s.last),
          "buffer '" + s.path +
              "' is written in place and read on both sides (state lives in "
              "one stage)");

  // 3. A buffer lives in exactly one stage: all its readers stay together.
  std::map<std::string, std::pair<int, int>> bufferReaders;
  auto isBuffer = [&](Value *v) {
    Node *getAttr = v->node();
    if (getAttr->kind() != c10::prim::GetAttr)
      return false;
    auto cls = getAttr->input()->type()->cast<c10::ClassType>();
    if (!cls)
      return false;
    auto slot = cls->findAttributeSlot(getAttr->s(c10::attr::name));
    return slot && cls->is_buffer(*slot);
  };
  for (int i = 0; i < n; ++i)
    for (Value *v : attributeReads_[i])
      if (isBuffer(v)) {
        auto [it, fresh] = bufferReaders.try_emplace(attrPaths_[v], i, i);
        if (!fresh)
          it->second.second = i;
      }
  for (const auto &[path, range] : bufferReaders)
    block(range.first, range.second,
          "buffer '" + path +
              "' is read on both sides (a buffer lives in one stage)");

  // 4. An in-place write stays in one stage with every later read of the
  // value it writes, so no stage sees a stale copy. Module attributes are
  // read as distinct objects (as in a frozen module): a write to a buffer is
  // rule 2's, not a write to every input.
  torch::jit::AliasDb aliasDb(graph_, /*isFrozen=*/true);
  std::vector<Value *> candidates(modelInputs_.begin(), modelInputs_.end());
  for (int i = 0; i < n; ++i)
    for (Value *v : items_[i]->outputs())
      if (lastUse.count(v))
        candidates.push_back(v);
  for (Value *v : candidates) {
    if (!aliasDb.hasWriters(v))
      continue;
    int from = producer(v) + 1, last = lastUse.count(v) ? lastUse[v] : -1;
    for (int i = std::max(from, 0); i < std::min(last, n); ++i)
      if (aliasDb.writesToAlias(items_[i], {v})) {
        std::string loc = sourceLocation(items_[i]);
        block(i, last,
              "value '" + valueName(v) + "' is written in place by " +
                  items_[i]->kind().toQualString() +
                  (loc.empty() ? std::string() : " (at " + loc + ")") +
                  " and read later");
        break;
      }
  }
  return llvm::Error::success();
}

} // namespace ppc
