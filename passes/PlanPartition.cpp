//===- passes/PlanPartition.cpp - Choose where stages begin ---------------===//
//
// This file implements planPartition(): resolving split points to items,
// checking them, or asking the min-max partitioner. See PlanPartition.h.
//
//===----------------------------------------------------------------------===//
#include "passes/PlanPartition.h"

#include "lib/Error.h"
#include "lib/Partitioner.h"

#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/jit/api/module.h>

namespace ppc {

namespace {
/// A named place where a stage begins, resolved to its first item.
struct SplitPoint {
  /// How errors quote it: 'layer3' for a module path, '%x' for a value.
  std::string label;
  size_t item;
};
} // namespace

/// Whether `path` names a submodule of `module`.
static bool hasSubmodule(const torch::jit::Module &module,
                         const std::string &path) {
  for (const auto &named : module.named_modules())
    if (named.name == path)
      return true;
  return false;
}

/// The first item run on behalf of module `path` or one of its submodules.
static llvm::Expected<size_t> resolveModulePath(const ItemGraph &g,
                                                const std::string &path,
                                                const torch::jit::Module *m) {
  for (size_t i = 0; i < g.size(); ++i) {
    llvm::StringRef mp = g.modulePath(i);
    if (mp == path || mp.startswith(path + "."))
      return i;
  }
  if (m && !path.empty() && hasSubmodule(*m, path))
    return makeError("split path '" + path +
                     "' names a submodule that forward never runs");
  return makeError("unknown split path '" + path +
                   "': the model has no submodule of that name");
}

/// The item producing the value named `name` ("%x" or "x").
static llvm::Expected<size_t> resolveValueName(const ItemGraph &g,
                                               llvm::StringRef name) {
  for (size_t i = 0; i < g.size(); ++i)
    for (torch::jit::Value *v : g.item(i)->outputs())
      if (v->debugName() == name)
        return i;
  return makeError("no operation produces '%" + name + "'");
}

static llvm::Expected<std::vector<SplitPoint>>
resolveSplitPoints(const ItemGraph &g, const PartitionRequest &request,
                   const torch::jit::Module *module) {
  std::vector<SplitPoint> points;
  for (const std::string &path : request.splitAt) {
    auto item = resolveModulePath(g, path, module);
    if (!item)
      return item.takeError();
    points.push_back({"'" + path + "'", *item});
  }
  for (const std::string &raw : request.splitBefore) {
    llvm::StringRef name = llvm::StringRef(raw).ltrim('%');
    auto item = resolveValueName(g, name);
    if (!item)
      return item.takeError();
    points.push_back({"'%" + name.str() + "'", *item});
  }
  return points;
}

/// Step 2: the starts of the named points, each checked.
static llvm::Expected<std::vector<size_t>>
startsOf(const ItemGraph &g, const std::vector<SplitPoint> &points,
         llvm::StringRef noun) {
  std::vector<size_t> starts{0};
  for (size_t k = 0; k < points.size(); ++k) {
    const SplitPoint &p = points[k];
    if (p.item == 0)
      return makeError(llvm::formatv("{0} {1} begins at the model's first "
                                     "operation; stage 0 would be empty",
                                     noun, p.label));
    if (p.item <= starts.back())
      return makeError(llvm::formatv("{0}s must be in execution order: {1} "
                                     "does not begin after {2}",
                                     noun, p.label, points[k - 1].label));
    if (const auto &why = g.cutBlocker(p.item))
      return makeError("cannot begin a stage at " + p.label + ": " + *why);
    starts.push_back(p.item);
  }
  return starts;
}

llvm::Expected<PartitionPlan> planPartition(const ItemGraph &graph,
                                            llvm::ArrayRef<int64_t> costs,
                                            const PartitionRequest &request,
                                            const torch::jit::Module *module) {
  llvm::Expected<std::vector<size_t>> starts = std::vector<size_t>{};
  if (request.splitAt.empty() && request.splitBefore.empty()) {
    starts = minMaxPartition(costs, request.stages,
                             [&](size_t i) { return graph.canCutBefore(i); });
  } else {
    auto points = resolveSplitPoints(graph, request, module);
    if (!points)
      return points.takeError();
    starts = startsOf(graph, *points,
                      request.splitAt.empty() ? "split point" : "split path");
  }
  if (!starts)
    return starts.takeError();
  auto plan = PartitionPlan::fromStarts(graph, std::move(*starts));
  if (!plan)
    return plan.takeError();
  if (llvm::Error err = plan->verify())
    return err;
  return plan;
}

} // namespace ppc
