//===- lib/PartitionPlan.h - Node-to-stage assignment -----------*- C++ -*-===//
//
// A PartitionPlan assigns every item of an ItemGraph to a stage (contiguous
// item ranges) and derives the boundary values: for each stage its ordered
// inputs (model inputs first, by index; then stage outputs by producer
// stage and position) and its ordered outputs (by producing item), each with
// the later stages that consume it. A value consumed by several later stages
// is one output with several consumers: it goes directly from its producer
// to each of them, never forwarded through the stages between.
//
// Creating a plan does not check it; verify() does, and passes only
// materialize a verified plan.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_PARTITIONPLAN_H
#define PPC_LIB_PARTITIONPLAN_H

#include "lib/ItemGraph.h"
#include "lib/Manifest.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace ppc {

class PartitionPlan {
public:
  /// A plan whose stage s holds items [starts[s], starts[s+1]).
  /// Errors: starts not strictly ascending from 0, or an index out of range.
  static llvm::Expected<PartitionPlan> fromStarts(const ItemGraph &graph,
                                                  std::vector<size_t> starts);

  /// Checks that the plan can be materialized: no stage is empty, every
  /// item is in exactly one stage, every value crossing a boundary is
  /// declared as an output of its producer and an input of each consumer,
  /// has a kind that can cross, and flows only forward (the stage graph is
  /// acyclic and nothing is consumed before it is produced), and every cut
  /// is one the ItemGraph allows. Errors name the stage and value.
  llvm::Error verify() const;

  const ItemGraph &graph() const { return *graph_; }
  size_t numStages() const { return starts_.size(); }
  const std::vector<size_t> &starts() const { return starts_; }
  size_t stageBegin(size_t s) const { return starts_[s]; }
  size_t stageEnd(size_t s) const {
    return s + 1 < starts_.size() ? starts_[s + 1] : graph_->size();
  }
  int stageOfItem(size_t item) const;
  /// Stage producing `v`, or -1 for a model input.
  int stageOfValue(const torch::jit::Value *v) const;

  const std::vector<torch::jit::Value *> &inputs(size_t s) const {
    return inputs_[s];
  }
  const std::vector<torch::jit::Value *> &outputs(size_t s) const {
    return outputs_[s];
  }
  /// Later stages reading output `v`, ascending.
  const std::vector<int> &consumers(const torch::jit::Value *v) const;
  /// Index of `v` among its producer stage's outputs.
  int outputIndex(const torch::jit::Value *v) const;

private:
  explicit PartitionPlan(const ItemGraph &graph) : graph_(&graph) {}
  void deriveBoundaries();

  const ItemGraph *graph_;
  std::vector<size_t> starts_;
  std::vector<std::vector<torch::jit::Value *>> inputs_, outputs_;
  std::unordered_map<const torch::jit::Value *, std::vector<int>> consumers_;
  std::unordered_map<const torch::jit::Value *, int> outputIndex_;
};

/// A readable name for every value an item of `graph` produces (the
/// manifest's StageOutput::label): "MODULE:OP", the module path the
/// producing operation runs on behalf of (ItemGraph::modulePath) and the
/// operation's name ("features.3:add", "layer2.1.relu:relu"; an in-place
/// "relu_" is named "relu"), or "OP" alone for code of the top-level forward
/// ("flatten"). For the outputs of a
/// prim::If or prim::Loop item, the operation producing the value in its
/// first block names it (the `add` of `if self.use_res_connect: return x +
/// self.conv(x)`), when that operation is inside the block. A name that
/// repeats gets "_1", "_2", ... in graph order, so every name is unique and
/// does not depend on where the stages are cut.
std::unordered_map<const torch::jit::Value *, std::string>
valueLabels(const ItemGraph &graph);

/// The module paths stage `s` of `plan` runs code of (the manifest's
/// StageInfo::modules): for each of its items in order, the shortest prefix
/// of the item's module path ("layer2" of "layer2.0.conv1", cut at dots) all
/// of whose items are in stage s, else the item's full path; each path once.
/// Items of the top-level forward (path "") add nothing.
std::vector<std::string> stageModules(const PartitionPlan &plan, size_t s);

} // namespace ppc

#endif // PPC_LIB_PARTITIONPLAN_H
