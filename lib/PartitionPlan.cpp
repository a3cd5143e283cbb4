//===- lib/PartitionPlan.cpp - Node-to-stage assignment -------------------===//
#include "lib/PartitionPlan.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <set>

using torch::jit::Value;

namespace ppc {

llvm::Expected<PartitionPlan>
PartitionPlan::fromStarts(const ItemGraph &graph, std::vector<size_t> starts) {
  if (starts.empty() || starts[0] != 0)
    return makeError("a partition must start its first stage at item 0");
  for (size_t s = 1; s < starts.size(); ++s) {
    if (starts[s] <= starts[s - 1])
      return makeError(llvm::formatv("stage {0} would be empty", s - 1));
    if (starts[s] >= graph.size())
      return makeError(llvm::formatv("stage {0} would be empty", s));
  }
  PartitionPlan plan(graph);
  plan.starts_ = std::move(starts);
  plan.deriveBoundaries();
  return plan;
}

int PartitionPlan::stageOfItem(size_t item) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end(), item);
  return static_cast<int>(it - starts_.begin()) - 1;
}

int PartitionPlan::stageOfValue(const Value *v) const {
  int p = graph_->producer(v);
  return p < 0 ? -1 : stageOfItem(static_cast<size_t>(p));
}

const std::vector<int> &PartitionPlan::consumers(const Value *v) const {
  static const std::vector<int> none;
  auto it = consumers_.find(v);
  return it == consumers_.end() ? none : it->second;
}

int PartitionPlan::outputIndex(const Value *v) const {
  auto it = outputIndex_.find(v);
  return it == outputIndex_.end() ? -1 : it->second;
}

void PartitionPlan::deriveBoundaries() {
  const ItemGraph &g = *graph_;
  size_t numStages = starts_.size();
  inputs_.assign(numStages, {});
  outputs_.assign(numStages, {});

  std::unordered_map<const Value *, int> modelInputIndex;
  for (size_t i = 0; i < g.modelInputs().size(); ++i)
    modelInputIndex[g.modelInputs()[i]] = static_cast<int>(i);

  // Which stages read each value produced elsewhere.
  for (size_t s = 0; s < numStages; ++s) {
    std::set<const Value *> seen;
    std::vector<Value *> ins;
    for (size_t i = stageBegin(s); i < stageEnd(s); ++i)
      for (Value *v : g.inputs(i))
        if (stageOfValue(v) != static_cast<int>(s) && seen.insert(v).second)
          ins.push_back(v);
    // Model inputs first by index, then by producing item (graph order).
    std::stable_sort(ins.begin(), ins.end(), [&](Value *a, Value *b) {
      auto key = [&](Value *v) {
        int p = g.producer(v);
        return p < 0 ? std::make_pair(-1, modelInputIndex[v])
                     : std::make_pair(p, 0);
      };
      return key(a) < key(b);
    });
    for (Value *v : ins)
      if (g.producer(v) >= 0)
        consumers_[v].push_back(static_cast<int>(s));
    inputs_[s] = std::move(ins);
  }

  std::set<const Value *> modelOutputs(g.modelOutputs().begin(),
                                       g.modelOutputs().end());
  for (size_t s = 0; s < numStages; ++s)
    for (size_t i = stageBegin(s); i < stageEnd(s); ++i)
      for (Value *v : g.item(i)->outputs())
        if (consumers_.count(v) || modelOutputs.count(v)) {
          outputIndex_[v] = static_cast<int>(outputs_[s].size());
          outputs_[s].push_back(v);
        }
  // Within a stage, order inputs from other stages by (stage, output index)
  // so both sides derive the same order from the plan alone.
  for (size_t s = 0; s < numStages; ++s)
    std::stable_sort(inputs_[s].begin(), inputs_[s].end(),
                     [&](Value *a, Value *b) {
                       auto key = [&](Value *v) {
                         int st = stageOfValue(v);
                         return st < 0 ? std::make_pair(-1, modelInputIndex[v])
                                       : std::make_pair(st, outputIndex_[v]);
                       };
                       return key(a) < key(b);
                     });
}

llvm::Error PartitionPlan::verify() const {
  const ItemGraph &g = *graph_;
  if (starts_.empty() || starts_[0] != 0)
    return makeError("plan: the first stage must begin at item 0");
  for (size_t s = 0; s < numStages(); ++s) {
    if (stageEnd(s) <= stageBegin(s))
      return makeError(llvm::formatv("plan: stage {0} is empty", s));
    if (s > 0 && !g.canCutBefore(stageBegin(s)))
      return makeError(llvm::formatv(
          "plan: stage {0} cannot begin there: {1}", s,
          g.cutBlocker(stageBegin(s)).value_or("no cut allowed")));
  }
  for (size_t s = 0; s < numStages(); ++s) {
    std::set<const Value *> available(inputs_[s].begin(), inputs_[s].end());
    for (Value *v : inputs_[s]) {
      int from = stageOfValue(v);
      if (from >= static_cast<int>(s))
        return makeError(
            llvm::formatv("plan: stage {0} reads '{1}' from stage {2}, "
                          "which does not run before it",
                          s, valueName(v), from));
      if (!boundaryKind(v->type()))
        return makeError(
            llvm::formatv("plan: '{0}' of type {1} cannot cross from "
                          "stage {2} to stage {3}",
                          valueName(v), v->type()->repr_str(), from, s));
      if (from >= 0) {
        const auto &c = consumers(v);
        if (outputIndex(v) < 0 ||
            std::find(c.begin(), c.end(), static_cast<int>(s)) == c.end())
          return makeError(
              llvm::formatv("plan: '{0}' crosses from stage {1} to {2} "
                            "but is not declared there",
                            valueName(v), from, s));
      }
    }
    for (size_t i = stageBegin(s); i < stageEnd(s); ++i) {
      for (Value *v : g.inputs(i))
        if (!available.count(v))
          return makeError(
              llvm::formatv("plan: stage {0} reads '{1}' before it is "
                            "produced",
                            s, valueName(v)));
      for (Value *v : g.item(i)->outputs())
        available.insert(v);
    }
  }
  for (Value *v : g.modelOutputs())
    if (g.producer(v) >= 0 && outputIndex(v) < 0)
      return makeError("plan: model output '" + valueName(v) +
                       "' is not a stage output");
  return llvm::Error::success();
}

} // namespace ppc

namespace ppc {

/// The node that makes output `k` of `n`: for a prim::If or prim::Loop,
/// the node inside its first block that makes the matching block output,
/// followed down; else `n` itself. `k` becomes that node's output index.
static torch::jit::Node *originOf(torch::jit::Node *n, size_t &k) {
  while (!n->blocks().empty()) {
    torch::jit::Block *b = n->blocks()[0];
    // A loop body's outputs are the continue condition, then the carried
    // values.
    size_t index = n->kind() == c10::prim::Loop ? k + 1 : k;
    if (index >= b->outputs().size())
      break;
    Value *v = b->outputs()[index];
    torch::jit::Node *inner = v->node();
    if (inner->owningBlock() != b)
      break; // the block returns a value from outside it
    k = v->offset();
    n = inner;
  }
  return n;
}

std::unordered_map<const Value *, std::string>
valueLabels(const ItemGraph &graph) {
  std::unordered_map<const Value *, std::string> labels;
  std::unordered_map<std::string, int> seen;
  for (size_t i = 0; i < graph.size(); ++i) {
    torch::jit::Node *item = graph.item(i);
    for (size_t k = 0; k < item->outputs().size(); ++k) {
      size_t offset = k;
      torch::jit::Node *origin = originOf(item, offset);
      std::string path;
      if (torch::jit::ScopePtr scope = origin->scope();
          scope && !scope->isBlank())
        path = scope->name().toUnqualString();
      if (path.empty())
        path = graph.modulePath(i);
      // An in-place variant ("relu_") is named as the operation it is.
      llvm::StringRef op = origin->kind().toUnqualString();
      if (op.size() > 1 && op.endswith("_") && !op.startswith("_"))
        op = op.drop_back();
      std::string base = op.str();
      if (!path.empty())
        base = path + ":" + base;
      int count = seen[base]++;
      labels[item->output(k)] =
          count == 0 ? base : base + "_" + std::to_string(count);
    }
  }
  return labels;
}

/// Whether `prefix` is `path` or a module containing it ("layer2" of
/// "layer2.0.conv1", not of "layer20").
static bool containsPath(llvm::StringRef prefix, llvm::StringRef path) {
  return path == prefix ||
         (path.startswith(prefix) && path[prefix.size()] == '.');
}

std::vector<std::string> stageModules(const PartitionPlan &plan, size_t s) {
  const ItemGraph &g = plan.graph();
  // For each prefix of the stage's paths: whether an item outside the stage
  // runs code of it.
  std::unordered_map<std::string, bool> sharedOutside;
  for (size_t i = plan.stageBegin(s); i < plan.stageEnd(s); ++i) {
    llvm::StringRef path = g.modulePath(i);
    for (size_t dot = 0; dot != llvm::StringRef::npos;) {
      dot = path.find('.', dot + 1);
      sharedOutside.emplace(path.substr(0, dot).str(), false);
    }
  }
  for (size_t i = 0; i < g.size(); ++i) {
    if (i == plan.stageBegin(s)) {
      i = plan.stageEnd(s) - 1;
      continue;
    }
    for (auto &[prefix, shared] : sharedOutside)
      if (!shared && containsPath(prefix, g.modulePath(i)))
        shared = true;
  }
  std::vector<std::string> modules;
  std::set<std::string> listed;
  for (size_t i = plan.stageBegin(s); i < plan.stageEnd(s); ++i) {
    llvm::StringRef path = g.modulePath(i);
    if (path.empty())
      continue;
    std::string chosen = path.str();
    for (size_t dot = 0; dot != llvm::StringRef::npos;) {
      dot = path.find('.', dot + 1);
      std::string prefix = path.substr(0, dot).str();
      if (!sharedOutside[prefix]) {
        chosen = prefix;
        break;
      }
    }
    if (listed.insert(chosen).second)
      modules.push_back(chosen);
  }
  return modules;
}

} // namespace ppc
