//===- passes/Compile.cpp - The ppc split pipeline ------------------------===//
#include "passes/Compile.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/ModelFormat.h"
#include "lib/OutputGuard.h"
#include "lib/Partitioner.h"
#include "lib/StateBuffers.h"
#include "lib/TensorIO.h"
#include "lib/TorchScriptStage.h"
#include "passes/ExtractStage.h"
#include "passes/Passes.h"
#include "passes/RefineProfile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>

#include <map>
#include <numeric>
#include <set>

namespace ppc {

namespace {
/// The stage files, their modules' tensors and their boundary facts, built
/// in memory before anything is written.
struct CompiledStage {
  BuiltStage stage;
  std::vector<bool> mutatedInputs;
  std::vector<StateTensor> state;
};
} // namespace

/// The dimension an aten::index_copy_ among the buffer's touches writes
/// along (a constant, normalised), or -1.
static int64_t indexDimOf(const StateBuffer &b, int64_t rank) {
  static const c10::Symbol indexCopy =
      c10::Symbol::fromQualString("aten::index_copy_");
  for (const torch::jit::Node *n : b.touches) {
    if (n->kind() != indexCopy || n->inputs().size() < 2)
      continue;
    auto dim = torch::jit::constant_as<int64_t>(n->input(1));
    if (dim && *dim >= -rank && *dim < rank)
      return *dim < 0 ? *dim + rank : *dim;
  }
  return -1;
}

/// The stage's state buffers (lib/StateBuffers.h), described from the
/// tensors the built stage holds under their paths.
static llvm::Expected<std::vector<StateTensor>>
describeState(const std::vector<StateBuffer> &buffers, const BuiltStage &stage,
              size_t s) {
  std::vector<StateTensor> out;
  for (const StateBuffer &b : buffers) {
    auto t = llvm::find_if(
        stage.tensors, [&](const StageTensor &t) { return t.path == b.path; });
    if (t == stage.tensors.end())
      return makeError(llvm::formatv("stage {0} writes buffer '{1}' but does "
                                     "not hold it",
                                     s, b.path));
    auto dtype = manifestDTypeName(t->tensor.scalar_type());
    if (!dtype)
      return makeError(llvm::formatv("stage {0}'s state buffer '{1}' has "
                                     "dtype {2}, which ppc does not carry",
                                     s, b.path,
                                     c10::toString(t->tensor.scalar_type())));
    out.push_back({b.path, *dtype, t->tensor.sizes().vec(),
                   indexDimOf(b, t->tensor.dim())});
  }
  return out;
}

static llvm::Expected<CompiledStage> buildStage(const PartitionPlan &plan,
                                                size_t s,
                                                const ModelFormat &format,
                                                const ModelGraph &model) {
  auto graph = extractStage(plan, s);
  if (!graph)
    return graph.takeError();
  CompiledStage out;
  if (llvm::Error err = torchCall(
          "cannot analyze stage " + std::to_string(s) + "'s writes", [&] {
            // Module attributes as distinct objects (as ItemGraph reads
            // them): a write to a buffer writes no input.
            torch::jit::AliasDb aliasDb(*graph, /*isFrozen=*/true);
            size_t first = plan.graph().self() ? 1 : 0;
            for (size_t i = first; i < (*graph)->inputs().size(); ++i)
              out.mutatedInputs.push_back(
                  aliasDb.hasWriters((*graph)->inputs()[i]));
          }))
    return err;
  std::vector<StateBuffer> buffers = findStateBuffers(**graph);
  auto stage = format.buildStage(model, std::move(*graph), static_cast<int>(s));
  if (!stage)
    return stage.takeError();
  out.stage = std::move(*stage);
  auto state = describeState(buffers, out.stage, s);
  if (!state)
    return state.takeError();
  out.state = std::move(*state);
  return out;
}

static void describeBoundaries(const PartitionPlan &plan,
                               const ModelFormat &format,
                               const ModelGraph &model, Manifest &m) {
  const ItemGraph &g = plan.graph();
  auto shapeOf = [&](const torch::jit::Value *v) {
    return format.staticShape(model, *v).value_or(std::vector<int64_t>{});
  };
  std::map<const torch::jit::Value *, int> modelInputIndex;
  for (size_t i = 0; i < g.modelInputs().size(); ++i) {
    const torch::jit::Value *v = g.modelInputs()[i];
    modelInputIndex[v] = static_cast<int>(i);
    ModelInput in{valueName(v), *boundaryKind(v->type()), shapeOf(v), {}};
    // Recorded only where a dynamic dimension has a bound: elsewhere the
    // largest shape is the shape itself.
    auto largest = format.largestShape(model, *v);
    if (largest && *largest != in.shape)
      in.maxShape = std::move(*largest);
    m.modelInputs.push_back(std::move(in));
  }
  auto labels = valueLabels(g);
  for (size_t s = 0; s < plan.numStages(); ++s) {
    StageInfo &info = m.stages[s];
    info.modules = stageModules(plan, s);
    for (torch::jit::Value *v : plan.inputs(s)) {
      int from = plan.stageOfValue(v);
      ValueRef ref = from < 0 ? ValueRef::fromModelInput(modelInputIndex[v])
                              : ValueRef::fromStage(from, plan.outputIndex(v));
      info.inputs.push_back(
          {valueName(v), *boundaryKind(v->type()), ref, false});
    }
    for (torch::jit::Value *v : plan.outputs(s))
      info.outputs.push_back({valueName(v), *boundaryKind(v->type()),
                              plan.consumers(v), labels[v], shapeOf(v)});
  }
  for (torch::jit::Value *v : g.modelOutputs()) {
    int from = plan.stageOfValue(v);
    m.modelOutputs.push_back(
        from < 0 ? ValueRef::fromModelInput(modelInputIndex[v])
                 : ValueRef::fromStage(from, plan.outputIndex(v)));
  }
  m.outputIsTuple = g.outputIsTuple();
}

/// Parameter counts per stage, each stage's weights (StageInfo::weights)
/// and tensors shared by several stages.
static llvm::Error describeTensors(const std::vector<CompiledStage> &stages,
                                   Manifest &m) {
  std::map<const void *, TiedParameter> byTensor;
  for (size_t s = 0; s < stages.size(); ++s) {
    std::map<const void *, size_t> seen;
    std::vector<StageWeight> &weights = m.stages[s].weights.emplace();
    for (const StageTensor &t : stages[s].stage.tensors) {
      const void *impl = t.tensor.unsafeGetTensorImpl();
      int64_t bytes =
          static_cast<int64_t>(t.tensor.numel() * t.tensor.element_size());
      TiedParameter &tied = byTensor[impl];
      tied.bytes = bytes;
      tied.uses.push_back({static_cast<int>(s), t.path});
      auto [it, fresh] = seen.try_emplace(impl, weights.size());
      if (!fresh) {
        weights[it->second].tied.push_back(t.path);
        continue;
      }
      auto dtype = manifestDTypeName(t.tensor.scalar_type());
      if (!dtype)
        return makeError(llvm::formatv("stage {0}'s weight '{1}' has dtype "
                                       "{2}, which ppc does not carry",
                                       s, t.path,
                                       c10::toString(t.tensor.scalar_type())));
      weights.push_back(
          {t.path, *dtype, t.tensor.sizes().vec(), t.isParameter, {}});
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
  return llvm::Error::success();
}

namespace {
/// The model in ppc's graph, prepared by the passes, and its format.
struct PreparedModel {
  const ModelFormat *format;
  ModelGraph model;
};
} // namespace

/// Steps 1 and 2: load the model with the format its contents name, and run
/// the format's prepare passes on its graph.
static llvm::Expected<PreparedModel> loadPrepared(const std::string &path) {
  auto file = readModelFile(path);
  if (!file)
    return file.takeError();
  auto model = file->format->loadModel(file->buffer, path);
  if (!model)
    return model.takeError();
  if (llvm::Error err = runPasses(model->graph, file->format->preparePasses()))
    return err;
  return PreparedModel{file->format, std::move(*model)};
}

namespace {
/// Step 3's results besides the ItemGraph.
struct Analysis {
  std::vector<int64_t> costs;
  /// Per item, what the flops model left out (itemCosts()).
  std::vector<std::string> uncounted;
  std::optional<StageMemoryModel> memory;
};
} // namespace

/// The example input, checked against the model inputs.
static llvm::Expected<std::vector<c10::IValue>>
loadExample(const ItemGraph &items, const std::string &path) {
  auto loaded = loadTensors(path);
  if (!loaded)
    return loaded.takeError();
  if (llvm::Error err = checkExampleInput(items, *loaded))
    return withContext(std::move(err), "example input '" + path + "'");
  return loaded;
}

/// The cost of each item under the chosen model and, with an example
/// input, what stages would hold. A program without weights is never run:
/// its flops are counted on the shapes its file recorded, and what its
/// stages would hold is not measured.
static llvm::Expected<Analysis> analyze(const ItemGraph &items,
                                        const PreparedModel &prepared,
                                        const CompileOptions &options) {
  const torch::jit::Module &model = prepared.model.module;
  bool withoutWeights =
      hasMetaTensors(moduleSlots(TorchScriptStage(model), {}));
  if (withoutWeights && options.partition.maxStageMemory)
    return makeError("--max-stage-memory measures the activations on "
                     "--example-input, which needs the program's weights: "
                     "give them with --weights");
  Analysis out;
  std::optional<std::vector<c10::IValue>> example;
  if (options.exampleInput) {
    auto loaded = loadExample(items, *options.exampleInput);
    if (!loaded)
      return loaded.takeError();
    example = std::move(*loaded);
    if (!withoutWeights) {
      auto memory = stageMemoryModel(items, model, *example);
      if (!memory)
        return memory.takeError();
      out.memory = std::move(*memory);
    }
  }
  ShapeOf recorded;
  if (withoutWeights)
    recorded = [&](const torch::jit::Value &v) {
      return prepared.format->exampleShape(prepared.model, v);
    };
  auto costs =
      itemCosts(items, &model, options.cost, example ? &*example : nullptr,
                &out.uncounted, recorded);
  if (!costs)
    return costs.takeError();
  out.costs = std::move(*costs);
  const PartitionRequest &request = options.partition;
  if (options.cost == CostKind::Profile && request.splitAt.empty() &&
      request.stages > 1) {
    auto refined = refineProfiledCosts(items, model, *example, request,
                                       out.memory ? &*out.memory : nullptr,
                                       std::move(out.costs));
    if (!refined)
      return refined.takeError();
    out.costs = std::move(*refined);
  }
  return out;
}

/// Step 1b: the weights from --weights, bound into the model's module, and
/// the notes on what holds no data. Errors: WeightSource's, and --cost
/// profile on a program without weights.
static llvm::Error bindModelWeights(const CompileOptions &options,
                                    ModelGraph &model,
                                    std::vector<std::string> &notes) {
  TorchScriptStage whole(model.module);
  std::set<std::string> state;
  for (const StateBuffer &b : findStateBuffers(*model.graph))
    state.insert(b.path);
  std::vector<WeightSlot> slots = moduleSlots(whole, state);
  if (options.weights.given()) {
    std::vector<std::string> names;
    for (const WeightSlot &slot : slots)
      names.insert(names.end(), slot.names.begin(), slot.names.end());
    auto source = WeightSource::open(options.weights, names);
    if (!source)
      return source.takeError();
    // Meta state buffers stay without data: each rank makes its zeros.
    std::vector<WeightSlot> bound;
    for (const WeightSlot &slot : slots)
      if (!(slot.isState && slot.current.is_meta()))
        bound.push_back(slot);
    auto report =
        bindInto(whole, bound, source->get(), /*inPlace=*/true, "the model");
    if (!report)
      return report.takeError();
    notes.push_back(llvm::formatv(
        "bound {0} tensors ({1}) from '{2}'{3}", report->boundTensors,
        formatBytes(
            static_cast<int64_t>(report->mappedBytes + report->copiedBytes)),
        options.weights.path,
        (*source)->prefix().empty()
            ? std::string()
            : " (the program's names carry the prefix '" + (*source)->prefix() +
                  "')"));
    for (const auto &[missing, tied] : report->configTies)
      notes.push_back("checkpoint '" + printable(options.weights.path, 512) +
                      "' lacks '" + printable(missing) +
                      "': its config.json ties word embeddings, so it is '" +
                      printable(tied) + "'");
    slots = moduleSlots(whole, state);
  }
  size_t zeroState = 0;
  std::string missing;
  for (const WeightSlot &slot : slots)
    if (slot.current.is_meta()) {
      if (slot.isState)
        ++zeroState;
      else if (missing.empty())
        missing = slot.names.front();
    }
  if (zeroState > 0)
    notes.push_back(llvm::formatv(
        "{0} state buffer{1} of the program hold{2} no data (exported on the "
        "meta device): each rank starts {3} as zeros, as static caches do",
        zeroState, zeroState == 1 ? "" : "s", zeroState == 1 ? "s" : "",
        zeroState == 1 ? "it" : "them"));
  // The profile cost times the model on --example-input: that needs real
  // weights (the flops cost runs a program without them on the meta device).
  if (!missing.empty() && options.cost == CostKind::Profile)
    return makeError("--cost " + costKindName(options.cost) +
                     " runs the model on --example-input, which needs its "
                     "weights, and this program has none for '" +
                     missing +
                     "' (exported without weights): give them with "
                     "--weights, or use --cost params or nodes");
  if (!missing.empty())
    notes.push_back("the program carries no data for its weights (exported "
                    "without weights): the stages carry none either, and "
                    "ppc run, verify, train and generate read them from "
                    "--weights");
  return llvm::Error::success();
}

/// Option combinations that cannot work, found before any file is read.
static llvm::Error checkOptions(const CompileOptions &options) {
  bool needs = needsExampleInput(options.cost);
  if (needs && !options.exampleInput)
    return makeError("the " + costKindName(options.cost) +
                     " cost model needs an example input "
                     "(--example-input IN.pt)");
  if (!needs && options.exampleInput)
    return makeError("--example-input is only used by --cost flops and "
                     "--cost profile");
  if (auto cap = options.partition.maxStageMemory) {
    if (*cap <= 0)
      return makeError("--max-stage-memory " + std::to_string(*cap) +
                       " is not a byte count above 0");
    if (!needs)
      return makeError("--max-stage-memory needs --cost profile or flops, "
                       "which measure activations on --example-input");
    if (!options.partition.splitAt.empty())
      return makeError("--max-stage-memory applies to --stages, not to "
                       "--split-at");
  }
  return llvm::Error::success();
}

/// The manifest's facts about the source model: absolute path, size, hash.
static llvm::Error describeSource(const std::string &modelPath, Manifest &m) {
  llvm::SmallString<256> source(modelPath);
  llvm::sys::fs::make_absolute(source);
  m.sourcePath = std::string(source);
  auto size = fileSize(modelPath);
  if (!size)
    return size.takeError();
  auto hash = sha256File(modelPath);
  if (!hash)
    return hash.takeError();
  m.sourceSize = *size;
  m.sourceSha256 = *hash;
  return llvm::Error::success();
}

/// Everything the manifest says except the stage files' hashes, which exist
/// only once the files are written.
static llvm::Expected<Manifest>
describeManifest(const CompileOptions &options, const ModelFormat &format,
                 const ModelGraph &model, const PartitionPlan &plan,
                 llvm::ArrayRef<int64_t> costs,
                 const std::vector<CompiledStage> &built) {
  Manifest m;
  m.format = format.name().str();
  if (llvm::Error err = describeSource(options.modelPath, m))
    return err;
  m.costModel = costKindName(options.cost).str();
  std::vector<int64_t> stageCost = stageCosts(costs, plan.starts());
  for (size_t s = 0; s < plan.numStages(); ++s) {
    StageInfo info;
    info.index = static_cast<int>(s);
    info.file = "stage_" + std::to_string(s) + format.stageExtension().str();
    info.predictedCost = static_cast<double>(stageCost[s]);
    if (s > 0 && !options.partition.splitAt.empty())
      info.beginsAt = options.partition.splitAt[s - 1];
    m.stages.push_back(std::move(info));
  }
  describeBoundaries(plan, format, model, m);
  for (size_t s = 0; s < built.size(); ++s) {
    for (size_t i = 0; i < built[s].mutatedInputs.size(); ++i)
      m.stages[s].inputs[i].mutated = built[s].mutatedInputs[i];
    m.stages[s].state = built[s].state;
  }
  if (llvm::Error err = describeTensors(built, m))
    return err;
  if (llvm::Error err = m.verify())
    return err;
  return m;
}

/// Step 5: writes the stage files, records their hashes in `m`, and writes
/// the manifest, all into a directory that replaces OUTDIR at the end.
static llvm::Error writeOutput(const CompileOptions &options,
                               std::vector<CompiledStage> &built, Manifest &m) {
  return buildDirectoryAtomically(
      options.outDir,
      [](llvm::StringRef dir) { return checkEarlierOutput(dir); },
      [&](llvm::StringRef tmp) -> llvm::Error {
        for (size_t s = 0; s < built.size(); ++s) {
          llvm::SmallString<256> path(tmp);
          llvm::sys::path::append(path, m.stages[s].file);
          if (llvm::Error e =
                  saveExecutable(*built[s].stage.executable, path,
                                 "cannot write stage " + std::to_string(s)))
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
}

/// One warning per stage holding items whose operations the cost model
/// could not count: its predicted share may be far from what it takes.
static std::vector<std::string>
uncountedWarnings(const PartitionPlan &plan, const CompileOptions &options,
                  const std::vector<std::string> &uncounted) {
  std::vector<std::string> warnings;
  if (uncounted.empty())
    return warnings;
  const ItemGraph &g = plan.graph();
  for (size_t s = 0; s < plan.numStages(); ++s) {
    std::vector<std::string> what;
    for (size_t i = plan.stageBegin(s); i < plan.stageEnd(s); ++i)
      if (!uncounted[i].empty())
        what.push_back(uncounted[i] + (g.modulePath(i).empty()
                                           ? std::string()
                                           : " of " + g.modulePath(i)));
    if (what.empty())
      continue;
    warnings.push_back(llvm::formatv(
        "the {0} cost model cannot count all of stage {1}: {2}; its "
        "predicted share may be far from what it takes; --cost profile "
        "measures it",
        costKindName(options.cost), s, llvm::join(what, "; ")));
  }
  return warnings;
}

llvm::Expected<CompileResult> compileModel(const CompileOptions &options) {
  if (llvm::Error err = checkOptions(options))
    return err;
  OutputGuard guard;
  guard.keep(options.modelPath, "the model");
  if (llvm::Error err =
          guard.claimReplacedDirectory("output directory", options.outDir))
    return err;
  auto model = loadPrepared(options.modelPath);
  if (!model)
    return model.takeError();
  std::vector<std::string> notes;
  if (llvm::Error err = bindModelWeights(options, model->model, notes))
    return err;
  auto items = ItemGraph::build(model->model.graph);
  if (!items)
    return withContext(items.takeError(), options.modelPath);
  auto analysis = analyze(*items, *model, options);
  if (!analysis)
    return analysis.takeError();
  const std::vector<int64_t> &costs = analysis->costs;
  const StageMemoryModel *memory =
      analysis->memory ? &*analysis->memory : nullptr;
  auto plan = planPartition(*items, costs, options.partition,
                            &model->model.module, memory);
  if (!plan)
    return plan.takeError();

  std::vector<CompiledStage> built;
  for (size_t s = 0; s < plan->numStages(); ++s) {
    auto stage = buildStage(*plan, s, *model->format, model->model);
    if (!stage)
      return stage.takeError();
    built.push_back(std::move(*stage));
  }
  auto manifest = describeManifest(options, *model->format, model->model, *plan,
                                   costs, built);
  if (!manifest)
    return manifest.takeError();
  if (llvm::Error err = writeOutput(options, built, *manifest))
    return err;
  CompileResult result{std::move(*manifest),
                       {},
                       uncountedWarnings(*plan, options, analysis->uncounted),
                       std::move(notes)};
  if (memory)
    result.stageMemory = stageMemories(*memory, plan->starts());
  return result;
}

} // namespace ppc
