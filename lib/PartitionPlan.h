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

} // namespace ppc

#endif // PPC_LIB_PARTITIONPLAN_H
