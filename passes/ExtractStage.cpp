//===- passes/ExtractStage.cpp - Materialize one stage of a plan ----------===//
#include "passes/ExtractStage.h"

#include "lib/Error.h"

#include <unordered_map>

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace ppc {

namespace {
class Extractor {
public:
  Extractor(const PartitionPlan &plan, size_t stage)
      : plan(plan), g(plan.graph()), stage(stage),
        out(std::make_shared<Graph>()) {}

  llvm::Expected<std::shared_ptr<Graph>> run() {
    if (Value *self = g.self())
      env[self] = out->addInput("self")->setType(self->type());
    for (Value *v : plan.inputs(stage))
      env[v] = out->addInput()->copyMetadata(v);

    for (size_t i = plan.stageBegin(stage); i < plan.stageEnd(stage); ++i) {
      Node *item = g.item(i);
      Node *clone = out->createClone(item, [&](Value *v) { return lookup(v); });
      if (missing)
        return makeError("stage " + std::to_string(stage) +
                         " has no value for '" + valueName(missing) + "'");
      out->insertNode(clone);
      for (size_t k = 0; k < item->outputs().size(); ++k)
        env[item->output(k)] = clone->output(k);
    }

    std::vector<Value *> results;
    for (Value *v : plan.outputs(stage))
      results.push_back(env.at(v));
    Node *tuple = out->insertNode(out->createTuple(results));
    out->registerOutput(tuple->output());
    return std::move(out);
  }

private:
  /// The stage graph's value for `v`, cloning rematerializable producers
  /// on first use.
  Value *lookup(Value *v) {
    if (auto it = env.find(v); it != env.end())
      return it->second;
    if (!g.isRematerializable(v)) {
      missing = v;
      return out->addInput(); // placeholder; run() reports the error
    }
    Node *producer = v->node();
    Node *clone =
        out->createClone(producer, [&](Value *in) { return lookup(in); });
    out->insertNode(clone);
    for (size_t k = 0; k < producer->outputs().size(); ++k)
      env[producer->output(k)] = clone->output(k);
    return env.at(v);
  }

  const PartitionPlan &plan;
  const ItemGraph &g;
  size_t stage;
  std::shared_ptr<Graph> out;
  std::unordered_map<Value *, Value *> env;
  Value *missing = nullptr;
};
} // namespace

llvm::Expected<std::shared_ptr<Graph>> extractStage(const PartitionPlan &plan,
                                                    size_t stage) {
  auto graph = torchCall("cannot extract stage " + std::to_string(stage),
                         [&]() -> llvm::Expected<std::shared_ptr<Graph>> {
                           return Extractor(plan, stage).run();
                         });
  if (!graph)
    return graph.takeError();
  return std::move(*graph);
}

} // namespace ppc
