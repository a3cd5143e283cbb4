//===- lib/ItemGraph.h - What the partitioner sees of a graph ---*- C++ -*-===//
//
// ItemGraph is the analysis ppc split partitions. It classifies the
// top-level nodes of an inlined, cleaned model graph:
//
//  1. Rematerializable values are cheap to recompute in every stage that
//     needs them: constants (and prim::Uninitialized), the module `self` and
//     attribute reads from it (parameters, buffers, submodules, flags), and
//     pure non-tensor nodes whose inputs are all rematerializable (e.g. an int
//     list of constants). Their nodes belong to no stage; each consumer stage
//     clones them.
//  2. Every other top-level node is an item. Items keep graph order, which
//     is topological; a partition is a list of contiguous item ranges. A
//     node with blocks (prim::If, prim::Loop) is one item, and values its
//     blocks read from outside count as its inputs.
//  3. The prim::TupleConstruct that only packs the graph's return value is
//     no item: its elements are the model outputs.
//
// For each position between items it records whether a cut there is
// possible, and if not, why: a live value of a kind that cannot cross
// (ValueKind), a state buffer (lib/StateBuffers.h) touched on both sides, a
// buffer read on both sides, or an in-place write that must stay with the
// later reads of the value it writes.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_ITEMGRAPH_H
#define PPC_LIB_ITEMGRAPH_H

#include "lib/Manifest.h"

#include "llvm/Support/Error.h"

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ppc {

/// The boundary kind of a TorchScript type, or nullopt if values of that
/// type cannot cross a stage boundary.
std::optional<ValueKind> boundaryKind(const c10::TypePtr &type);

/// "file:line" of the code that produced a node, or "" when unknown.
std::string sourceLocation(const torch::jit::Node *node);

/// A readable name of a value: its debug name, else "%<unique>".
std::string valueName(const torch::jit::Value *value);

/// A buffer the model writes in place, and the items that touch it: every
/// cut between `first` and `last` would separate its reads and writes.
struct StateSpan {
  std::string path;
  size_t first, last;
};

class ItemGraph {
public:
  /// Analyzes `graph`, which must stay alive and unchanged while the
  /// ItemGraph is used. If the first graph input is a module, it is `self`.
  /// Errors: a model input or output of a kind that cannot cross
  /// ("model output 0 has type Dict(str, Tensor), which ppc cannot ..."),
  /// or LibTorch failing on the graph ("cannot analyze the model graph: ...").
  static llvm::Expected<ItemGraph>
  build(std::shared_ptr<torch::jit::Graph> graph);

  const std::shared_ptr<torch::jit::Graph> &graph() const { return graph_; }
  size_t size() const { return items_.size(); }
  torch::jit::Node *item(size_t i) const { return items_[i]; }
  /// Non-rematerializable values item `i` reads (including from inside its
  /// blocks), in first-use order, without duplicates.
  const std::vector<torch::jit::Value *> &inputs(size_t i) const {
    return inputs_[i];
  }
  /// Attribute values (GetAttr results rooted at self) item `i` reads,
  /// including from inside its blocks.
  const std::vector<torch::jit::Value *> &attributeReads(size_t i) const {
    return attributeReads_[i];
  }

  bool isRematerializable(const torch::jit::Value *v) const {
    return remat_.count(v) != 0;
  }
  torch::jit::Value *self() const { return self_; }
  /// Model inputs: the graph inputs other than self.
  const std::vector<torch::jit::Value *> &modelInputs() const {
    return modelInputs_;
  }
  const std::vector<torch::jit::Value *> &modelOutputs() const {
    return modelOutputs_;
  }
  bool outputIsTuple() const { return outputIsTuple_; }

  /// Index of the item producing `v`, or -1 for a model input.
  int producer(const torch::jit::Value *v) const;

  /// Attribute path of a value read from self ("layers.4.weight"), or
  /// nullopt if `v` is not such a read. The path of self is "".
  std::optional<std::string> attributePath(const torch::jit::Value *v) const;

  /// The module instance path item `i` runs on behalf of ("layer2.0.conv1"),
  /// "" for code of the top-level forward.
  const std::string &modulePath(size_t i) const { return modulePaths_[i]; }

  /// Whether a stage may begin at item `i` (0 < i < size()); if not, why.
  const std::optional<std::string> &cutBlocker(size_t i) const {
    return blockers_[i];
  }
  bool canCutBefore(size_t i) const {
    return i > 0 && i < size() && !blockers_[i];
  }

  /// The model's state buffers, in the order of their first touch.
  const std::vector<StateSpan> &stateSpans() const { return stateSpans_; }
  /// The first state buffer whose touches a cut before item `i` separates,
  /// or null.
  const StateSpan *stateSplitBy(size_t i) const;

private:
  explicit ItemGraph(std::shared_ptr<torch::jit::Graph> graph)
      : graph_(std::move(graph)) {}
  /// build() without the exception guard.
  static llvm::Expected<ItemGraph>
  analyze(std::shared_ptr<torch::jit::Graph> graph);
  void classify();
  void collectNestedAttributeReads(torch::jit::Node *node,
                                   std::vector<torch::jit::Value *> &reads);
  llvm::Error findBlockers();
  void findStateSpans();

  std::shared_ptr<torch::jit::Graph> graph_;
  torch::jit::Value *self_ = nullptr;
  std::vector<torch::jit::Value *> modelInputs_, modelOutputs_;
  bool outputIsTuple_ = false;
  std::vector<torch::jit::Node *> items_;
  std::vector<std::vector<torch::jit::Value *>> inputs_, attributeReads_;
  std::vector<std::string> modulePaths_;
  std::vector<std::optional<std::string>> blockers_;
  std::vector<StateSpan> stateSpans_;
  std::unordered_map<const torch::jit::Value *, std::string> attrPaths_;
  std::unordered_map<const torch::jit::Value *, int> producers_;
  std::unordered_set<const torch::jit::Value *> remat_;
};

} // namespace ppc

#endif // PPC_LIB_ITEMGRAPH_H
