//===- passes/Compile.cpp - The ppc split pipeline ------------------------===//
#include "passes/Compile.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Partitioner.h"
#include "lib/Stage.h"
#include "lib/StageModule.h"
#include "lib/TensorIO.h"
#include "passes/ExtractStage.h"
#include "passes/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

#include <map>
#include <numeric>
#include <set>

namespace ppc {

/// Whether `path` names a submodule of `module`.
static bool hasSubmodule(const torch::jit::Module &module,
                         const std::string &path) {
  for (const auto &named : module.named_modules())
    if (named.name == path)
      return true;
  return false;
}

static llvm::Expected<size_t>
resolveSplitPath(const ItemGraph &g, const std::string &path,
                 const torch::jit::Module *module) {
  for (size_t i = 0; i < g.size(); ++i) {
    llvm::StringRef mp = g.modulePath(i);
    if (mp == path || mp.startswith(path + "."))
      return i;
  }
  if (module && !path.empty() && hasSubmodule(*module, path))
    return makeError("split path '" + path +
                     "' names a submodule that forward never runs");
  return makeError("unknown split path '" + path +
                   "': the model has no submodule of that name");
}

llvm::Expected<std::vector<size_t>>
choosePartition(const ItemGraph &graph, const std::vector<int64_t> &costs,
                const PartitionRequest &request,
                const torch::jit::Module *module) {
  if (request.splitAt.empty())
    return minMaxPartition(costs, request.stages,
                           [&](size_t i) { return graph.canCutBefore(i); });
  std::vector<size_t> starts{0};
  for (size_t k = 0; k < request.splitAt.size(); ++k) {
    const std::string &path = request.splitAt[k];
    auto item = resolveSplitPath(graph, path, module);
    if (!item)
      return item.takeError();
    if (*item == 0)
      return makeError(
          "split path '" + path +
          "' begins at the model's first operation; stage 0 would be "
          "empty");
    if (*item <= starts.back())
      return makeError(
          llvm::formatv("split paths must be in execution order: '{0}' "
                        "does not begin after '{1}'",
                        path, request.splitAt[k - 1]));
    if (auto why = graph.cutBlocker(*item))
      return makeError("cannot begin a stage at '" + path + "': " + *why);
    starts.push_back(*item);
  }
  return starts;
}

namespace {
/// The stage files, their modules' tensors and their boundary facts, built
/// in memory before anything is written.
struct BuiltStage {
  StageModule module;
  std::vector<bool> mutatedInputs;
};
} // namespace

static llvm::Expected<BuiltStage> buildStage(const PartitionPlan &plan,
                                             size_t s,
                                             const torch::jit::Module &model) {
  auto graph = extractStage(plan, s);
  if (!graph)
    return graph.takeError();
  BuiltStage out;
  {
    torch::jit::AliasDb aliasDb(*graph);
    size_t first = plan.graph().self() ? 1 : 0;
    for (size_t i = first; i < (*graph)->inputs().size(); ++i)
      out.mutatedInputs.push_back(aliasDb.hasWriters((*graph)->inputs()[i]));
  }
  auto module = buildStageModule(model, std::move(*graph), static_cast<int>(s));
  if (!module)
    return module.takeError();
  out.module = std::move(*module);
  return out;
}

static void describeBoundaries(const PartitionPlan &plan, Manifest &m) {
  const ItemGraph &g = plan.graph();
  std::map<const torch::jit::Value *, int> modelInputIndex;
  for (size_t i = 0; i < g.modelInputs().size(); ++i) {
    modelInputIndex[g.modelInputs()[i]] = static_cast<int>(i);
    m.modelInputs.push_back({valueName(g.modelInputs()[i]),
                             *boundaryKind(g.modelInputs()[i]->type())});
  }
  for (size_t s = 0; s < plan.numStages(); ++s) {
    StageInfo &info = m.stages[s];
    for (torch::jit::Value *v : plan.inputs(s)) {
      int from = plan.stageOfValue(v);
      ValueRef ref = from < 0 ? ValueRef::fromModelInput(modelInputIndex[v])
                              : ValueRef::fromStage(from, plan.outputIndex(v));
      info.inputs.push_back(
          {valueName(v), *boundaryKind(v->type()), ref, false});
    }
    for (torch::jit::Value *v : plan.outputs(s))
      info.outputs.push_back(
          {valueName(v), *boundaryKind(v->type()), plan.consumers(v)});
  }
  for (torch::jit::Value *v : g.modelOutputs()) {
    int from = plan.stageOfValue(v);
    m.modelOutputs.push_back(
        from < 0 ? ValueRef::fromModelInput(modelInputIndex[v])
                 : ValueRef::fromStage(from, plan.outputIndex(v)));
  }
  m.outputIsTuple = g.outputIsTuple();
}

/// Parameter counts per stage and tensors shared by several stages.
static void describeTensors(const std::vector<BuiltStage> &stages,
                            Manifest &m) {
  std::map<const void *, TiedParameter> byTensor;
  for (size_t s = 0; s < stages.size(); ++s) {
    std::set<const void *> seen;
    for (const auto &t : stages[s].module.tensors) {
      const void *impl = t.tensor.unsafeGetTensorImpl();
      int64_t bytes =
          static_cast<int64_t>(t.tensor.numel() * t.tensor.element_size());
      TiedParameter &tied = byTensor[impl];
      tied.bytes = bytes;
      tied.uses.push_back({static_cast<int>(s), t.path});
      if (!seen.insert(impl).second)
        continue;
      if (t.isParameter) {
        m.stages[s].parameterCount += t.tensor.numel();
        m.stages[s].parameterBytes += bytes;
      } else {
        m.stages[s].bufferBytes += bytes;
      }
    }
  }
  for (auto &[impl, tied] : byTensor) {
    std::set<int> users;
    for (const auto &u : tied.uses)
      users.insert(u.stage);
    if (users.size() > 1)
      m.tiedParameters.push_back(std::move(tied));
  }
  std::sort(m.tiedParameters.begin(), m.tiedParameters.end(),
            [](const TiedParameter &a, const TiedParameter &b) {
              return a.uses[0].path < b.uses[0].path;
            });
}

llvm::Expected<Manifest> compileModel(const CompileOptions &options) {
  auto model = loadModule(options.modelPath);
  if (!model)
    return model.takeError();
  model->eval();
  auto forward = model->find_method("forward");
  if (!forward)
    return makeError("'" + options.modelPath + "' has no forward method");
  auto graph = forward->graph()->copy();
  if (llvm::Error err = runPreparePipeline(graph))
    return std::move(err);

  auto items = ItemGraph::build(graph);
  if (!items)
    return withContext(items.takeError(), options.modelPath);

  std::optional<std::vector<c10::IValue>> example;
  if (options.exampleInput) {
    auto loaded = loadTensors(*options.exampleInput);
    if (!loaded)
      return loaded.takeError();
    example = std::move(*loaded);
  }
  auto costs =
      itemCosts(*items, &*model, options.cost, example ? &*example : nullptr);
  if (!costs)
    return costs.takeError();

  auto starts = choosePartition(*items, *costs, options.partition, &*model);
  if (!starts)
    return starts.takeError();
  auto plan = PartitionPlan::fromStarts(*items, *starts);
  if (!plan)
    return plan.takeError();
  if (llvm::Error err = plan->verify())
    return std::move(err);

  std::vector<BuiltStage> built;
  for (size_t s = 0; s < plan->numStages(); ++s) {
    auto stage = buildStage(*plan, s, *model);
    if (!stage)
      return stage.takeError();
    built.push_back(std::move(*stage));
  }

  Manifest m;
  llvm::SmallString<256> source(options.modelPath);
  llvm::sys::fs::make_absolute(source);
  m.sourcePath = std::string(source);
  auto size = fileSize(options.modelPath);
  auto hash = sha256File(options.modelPath);
  if (!size)
    return size.takeError();
  if (!hash)
    return hash.takeError();
  m.sourceSize = *size;
  m.sourceSha256 = *hash;
  m.costModel = costKindName(options.cost).str();
  std::vector<int64_t> stageCost = stageCosts(*costs, *starts);
  for (size_t s = 0; s < plan->numStages(); ++s) {
    StageInfo info;
    info.index = static_cast<int>(s);
    info.file = "stage_" + std::to_string(s) + ".pt";
    info.predictedCost = static_cast<double>(stageCost[s]);
    if (s > 0 && !options.partition.splitAt.empty())
      info.beginsAt = options.partition.splitAt[s - 1];
    m.stages.push_back(std::move(info));
  }
  describeBoundaries(*plan, m);
  for (size_t s = 0; s < built.size(); ++s)
    for (size_t i = 0; i < built[s].mutatedInputs.size(); ++i)
      m.stages[s].inputs[i].mutated = built[s].mutatedInputs[i];
  describeTensors(built, m);
  if (llvm::Error err = m.verify())
    return std::move(err);

  llvm::Error err = buildDirectoryAtomically(
      options.outDir, "manifest.json", [&](llvm::StringRef tmp) -> llvm::Error {
        for (size_t s = 0; s < built.size(); ++s) {
          llvm::SmallString<256> path(tmp);
          llvm::sys::path::append(path, m.stages[s].file);
          if (llvm::Error e =
                  torchCall("cannot write stage " + std::to_string(s), [&] {
                    built[s].module.module.save(path.str().str());
                  }))
            return e;
          auto stageHash = sha256File(path);
          if (!stageHash)
            return stageHash.takeError();
          m.stages[s].sha256 = *stageHash;
        }
        llvm::SmallString<256> manifestPath(tmp);
        llvm::sys::path::append(manifestPath, "manifest.json");
        return m.save(manifestPath);
      });
  if (err)
    return std::move(err);
  return m;
}

} // namespace ppc
