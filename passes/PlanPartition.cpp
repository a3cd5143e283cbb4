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
    if (const StateSpan *state = g.stateSplitBy(p.item))
      return makeError(llvm::formatv(
          "{0} {1} separates the reads and writes of buffer '{2}' (stages {3} "
          "and {4}); split before or after them",
          noun, p.label, state->path, k, k + 1));
    if (const auto &why = g.cutBlocker(p.item))
      return makeError("cannot begin a stage at " + p.label + ": " + *why);
    starts.push_back(p.item);
  }
  return starts;
}

std::string formatBytes(int64_t bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024)
    return llvm::formatv("{0} byte{1}", bytes, bytes == 1 ? "" : "s");
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return llvm::formatv("{0:f1} {1}", value, units[unit]);
}

/// "item 3 (aten::linear in layers.1)" or "items 3-5 (aten::add ...)".
static std::string describeItems(const ItemGraph &g, size_t begin, size_t end) {
  const std::string &path = g.modulePath(begin);
  std::string what = g.item(begin)->kind().toQualString();
  if (!path.empty())
    what += " in " + path;
  if (end - begin == 1)
    return llvm::formatv("item {0} ({1})", begin, what);
  return llvm::formatv("items {0}-{1} (from {2}), which no cut separates,",
                       begin, end - 1, what);
}

/// Step 1 under a memory cap: refuse a cap no partition meets, saying why.
static llvm::Error checkCap(const ItemGraph &g, const StageMemoryModel &memory,
                            int stages, int64_t cap,
                            const CutPredicate &allowed) {
  Segment worst = largestSegment(memory, allowed);
  if (worst.bytes > cap)
    return makeError(llvm::formatv(
        "{0} alone need{1} {2} ({3} bytes), more than --max-stage-memory {4}",
        describeItems(g, worst.begin, worst.end),
        worst.end - worst.begin == 1 ? "s" : "", formatBytes(worst.bytes),
        worst.bytes, cap));
  int64_t need = smallestMemoryCap(memory, stages, allowed);
  if (need > cap)
    return makeError(llvm::formatv("--max-stage-memory {0} is too small for "
                                   "{1} stages: the smallest cap that admits "
                                   "them is {2} ({3})",
                                   cap, stages, need, formatBytes(need)));
  return llvm::Error::success();
}

/// Step 1 for a stage count: the min-max partitioner, under the cap if any.
static llvm::Expected<std::vector<size_t>>
partitionByCost(const ItemGraph &graph, llvm::ArrayRef<int64_t> costs,
                const PartitionRequest &request,
                const StageMemoryModel *memory) {
  CutPredicate allowed = [&](size_t i) { return graph.canCutBefore(i); };
  if (!request.maxStageMemory)
    return minMaxPartition(costs, request.stages, allowed);
  if (!memory)
    return makeError("--max-stage-memory needs the stages' memory, which "
                     "only a cost model run on --example-input measures");
  // Without a cap first: a stage count the cuts cannot give is that error.
  auto uncapped = minMaxPartition(costs, request.stages, allowed);
  if (!uncapped)
    return uncapped.takeError();
  if (llvm::Error err = checkCap(graph, *memory, request.stages,
                                 *request.maxStageMemory, allowed))
    return err;
  MemoryCap cap{*memory, *request.maxStageMemory};
  return minMaxPartition(costs, request.stages, allowed, &cap);
}

llvm::Expected<PartitionPlan> planPartition(const ItemGraph &graph,
                                            llvm::ArrayRef<int64_t> costs,
                                            const PartitionRequest &request,
                                            const torch::jit::Module *module,
                                            const StageMemoryModel *memory) {
  llvm::Expected<std::vector<size_t>> starts = std::vector<size_t>{};
  if (request.splitAt.empty() && request.splitBefore.empty()) {
    starts = partitionByCost(graph, costs, request, memory);
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
