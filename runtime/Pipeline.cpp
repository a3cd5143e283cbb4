//===- runtime/Pipeline.cpp - The pipeline runtime ------------------------===//
//
// This file implements Pipeline: set-up (manifest, placement, schedule,
// rendezvous, stage loading), the start-up agreement on where metadata comes
// from, and the meta cache. The executor (Executor.h) runs the schedule.
//
// Metadata is settled once per microbatch signature and pipeline: a later
// run() whose signatures are all known runs with no agreement round and no
// metadata messages. Every rank sees the same signatures (the input root
// shares them), so every rank takes the same decision.
//
//===----------------------------------------------------------------------===//
#include "runtime/Pipeline.h"
#include "runtime/PipelineImpl.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/ModelFormat.h"
#include "lib/SafeRead.h"
#include "lib/Stage.h"
#include "lib/TensorIO.h"
#include "lib/ValueWalk.h"
#include "runtime/MetaCache.h"
#include "runtime/Microbatch.h"
#include "runtime/Schedule.h"
#include "runtime/TensorMeta.h"
#include "runtime/Threads.h"
#include "runtime/TorchCompat.h"
#include "runtime/Transport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Logging.h>

#include <chrono>
#include <map>
#include <set>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

/// User metadata as read from JSON: per stage, its outputs' metadata, with
/// sizes of -1 still open.
struct UserStageMeta {
  std::optional<std::vector<ValueMeta>> outputs;
};

bool fromJSON(const llvm::json::Value &json, UserStageMeta &out,
              llvm::json::Path path) {
  llvm::json::ObjectMapper o(json, path);
  std::vector<ValueMeta> outputs;
  if (!o || !o.mapOptional("outputs", outputs))
    return false;
  if (json.getAsObject()->get("outputs"))
    out.outputs = std::move(outputs);
  return true;
}

/// A 62-bit digest of the metadata of `outputs` of stage `producer` over
/// `signatures`, as `tables` holds it. Two ranks that would disagree on any
/// of these values get different digests (up to hash collisions).
int64_t edgeDigest(const std::map<std::string, MetaTable> &tables,
                   const std::vector<std::string> &signatures, int producer,
                   const std::vector<int> &outputs) {
  std::vector<int64_t> words;
  std::string bytes;
  for (const std::string &sig : signatures) {
    bytes += sig;
    bytes += '\n';
    const MetaTable &table = tables.at(sig);
    for (int o : outputs) {
      auto it = table.find({producer, o});
      words.clear();
      if (it != table.end())
        encodeMeta(it->second, words);
      words.push_back(-1); // separates records
      bytes.append(reinterpret_cast<const char *>(words.data()),
                   words.size() * sizeof(int64_t));
    }
  }
  return static_cast<int64_t>(llvm::xxHash64(bytes) >> 2);
}

/// Whether `a` and `b` name the same file, or would once written: the same
/// existing file (links and other spellings included), or the same name in
/// the same real directory.
bool sameFile(llvm::StringRef a, llvm::StringRef b) {
  bool same = false;
  if (!llvm::sys::fs::equivalent(a, b, same))
    return same;
  auto location = [](llvm::StringRef path) {
    llvm::SmallString<256> dir, real;
    dir = llvm::sys::path::parent_path(path);
    if (dir.empty())
      dir = ".";
    if (llvm::sys::fs::real_path(dir, real))
      return std::string();
    llvm::sys::path::append(real, llvm::sys::path::filename(path));
    return std::string(real);
  };
  std::string la = location(a);
  return !la.empty() && la == location(b);
}
} // namespace

llvm::Error Pipeline::Impl::init() {
  int n = static_cast<int>(manifest.stages.size());
  for (int s = 0; s < n; ++s)
    if (placement.rankOf(s) == env.rank)
      for (const StageInput &in : manifest.stages[s].inputs)
        if (in.source.isModelInput())
          readsInputs = true;
  inputRoot = -1;
  for (int s = 0; s < n && inputRoot < 0; ++s)
    for (const StageInput &in : manifest.stages[s].inputs)
      if (in.source.isModelInput()) {
        inputRoot = placement.rankOf(s);
        break;
      }
  if (inputRoot < 0)
    return makeError("manifest: no stage reads a model input");

  plan.manifest = &manifest;
  plan.schedule = &schedule;
  plan.rank = env.rank;
  plan.stages = &stages;
  plan.loss = loss;
  plan.globalUses = outputUses(manifest);
  std::map<std::pair<int, int>, int> &localUses = plan.localUses;
  for (const StageInfo &s : manifest.stages)
    for (const StageInput &in : s.inputs)
      if (!in.source.isModelInput() && placement.rankOf(s.index) == env.rank)
        ++localUses[{in.source.stage, in.source.output}];
  // Training collects no model outputs: the loss stage keeps its own.
  if (placement.outputRank() == env.rank && !training())
    for (const ValueRef &ref : manifest.modelOutputs)
      ++localUses[{ref.stage, ref.output}];
  std::set<std::pair<int, int>> required;
  for (int s : placement.stagesOf(env.rank))
    for (size_t o = 0; o < manifest.stages[s].outputs.size(); ++o)
      required.insert({s, static_cast<int>(o)});
  for (const Edge &e : schedule.edges) {
    int from = placement.rankOf(e.producer), to = placement.rankOf(e.consumer);
    if (from == to)
      continue;
    if (from == env.rank)
      for (int o : e.outputs)
        ++localUses[{e.producer, o}];
    if (to == env.rank)
      for (int o : e.outputs)
        required.insert({e.producer, o});
  }
  requiredMeta.assign(required.begin(), required.end());
  stats.rank = env.rank;
  return llvm::Error::success();
}

/// Reads the user metadata: the --input-meta file ({"stages": [{"outputs":
/// [meta, ...]}, ...]}), or else the manifest's per-stage "meta" objects
/// ({"outputs": [...]}). Both use the one metadata JSON reader.
llvm::Expected<std::map<int, std::vector<ValueMeta>>>
Pipeline::Impl::userGiven(std::string &source) {
  std::map<int, std::vector<ValueMeta>> given;
  if (options.inputMetaPath.empty()) {
    source = "the manifest's stage meta";
    for (const StageInfo &s : manifest.stages) {
      if (!s.meta)
        continue;
      auto meta = readJSON<UserStageMeta>(
          *s.meta, llvm::formatv("stages[{0}].meta", s.index).str());
      if (!meta)
        return withContext(meta.takeError(), "manifest");
      if (meta->outputs)
        given[s.index] = std::move(*meta->outputs);
    }
    return given;
  }
  source = "input meta '" + options.inputMetaPath + "'";
  auto buffer =
      readFileBounded(options.inputMetaPath, kMaxUserMetaBytes, "input meta");
  if (!buffer)
    return buffer.takeError();
  auto json = parseJSONBounded((*buffer)->getBuffer(), kMaxJSONDepth, source);
  if (!json)
    return json.takeError();
  const llvm::json::Object *top = json->getAsObject();
  const llvm::json::Value *stagesJSON = top ? top->get("stages") : nullptr;
  if (!stagesJSON)
    return makeError(source + ": expected {\"stages\": [...]}");
  auto stages = readJSON<std::vector<UserStageMeta>>(*stagesJSON, "stages");
  if (!stages)
    return withContext(stages.takeError(), source);
  for (size_t s = 0; s < stages->size(); ++s)
    if ((*stages)[s].outputs)
      given[static_cast<int>(s)] = std::move(*(*stages)[s].outputs);
  return given;
}

/// The user metadata of the values this rank needs, per signature (a size
/// of -1 becomes the signature's batch size), validated and checked
/// against the manifest's kinds.
llvm::Expected<std::map<std::string, MetaTable>>
Pipeline::Impl::userTables(const std::vector<std::string> &signatures) {
  std::string source;
  auto given = userGiven(source);
  if (!given)
    return given.takeError();
  std::map<std::string, MetaTable> tables;
  for (const std::string &sig : signatures) {
    MetaTable &table = tables[sig];
    for (const auto &[stage, output] : requiredMeta) {
      auto it = given->find(stage);
      if (it == given->end() || output >= static_cast<int>(it->second.size()))
        return makeError(
            llvm::formatv("{0} has no metadata for stage {1} output {2}",
                          source, stage, output)
                .str());
      ValueMeta meta = it->second[output];
      if (llvm::Error err = resolveMeta(meta, signatureBatchSize(sig)))
        return withContext(std::move(err),
                           llvm::formatv("{0}: stages[{1}].outputs[{2}]",
                                         source, stage, output)
                               .str());
      ValueKind declared = manifest.stages[stage].outputs[output].kind;
      if (meta.kind != declared)
        return makeError(
            llvm::formatv("{0}: stage {1} output {2} is a {3} in the "
                          "manifest, not a {4}",
                          source, stage, output, kindName(declared),
                          kindName(meta.kind))
                .str());
      table[{stage, output}] = std::move(meta);
    }
  }
  return tables;
}

llvm::Expected<std::vector<std::string>> Pipeline::Impl::shareSignatures(
    const std::vector<c10::IValue> &inputs,
    std::vector<std::vector<c10::IValue>> &microbatches) {
  const int count = schedule.microbatches;
  std::vector<std::string> signatures(count);
  if (readsInputs) {
    auto split = splitMicrobatches(inputs, manifest.modelInputs.size(), count);
    if (!split)
      return split.takeError();
    microbatches = std::move(*split);
    for (int m = 0; m < count; ++m)
      signatures[m] = microbatchSignature(microbatches[m]);
  }
  std::string blob = llvm::join(signatures, "\n");
  if (llvm::Error err = transport->broadcastBytes(blob, inputRoot))
    return err;
  llvm::SmallVector<llvm::StringRef, 8> parts;
  llvm::StringRef(blob).split(parts, '\n');
  if (static_cast<int>(parts.size()) != count)
    return makeError(llvm::formatv("rank {0} shared {1} microbatch signatures, "
                                   "expected {2}",
                                   inputRoot, parts.size(), count)
                         .str());
  for (int m = 0; m < count; ++m) {
    if (readsInputs && parts[m] != signatures[m])
      return makeError(
          llvm::formatv("the input on rank {0} differs from the input "
                        "on rank {1} (microbatch {2}: {3} vs {4})",
                        env.rank, inputRoot, m, signatures[m], parts[m])
              .str());
    signatures[m] = parts[m].str();
  }
  return signatures;
}

bool Pipeline::Impl::loadCache(const std::vector<std::string> &signatures) {
  MetaCacheKey key;
  key.manifestSha256 = manifestSha256;
  for (const auto &[index, stage] : stages)
    key.stages.push_back({index, manifest.stages[index].sha256});
  key.layout = placement.describe();
  cachePath = MetaCache::filePath(metaCacheDir(), env.rank, env.worldSize);
  std::string warning;
  cache = MetaCache::load(cachePath, key, warning);
  if (!warning.empty()) {
    warnings() << "warning: " << warning << "; inferring shapes\n";
    return false;
  }
  for (const std::string &sig : signatures) {
    const MetaTable *table = cache->find(cacheEntry(sig), requiredMeta);
    if (!table)
      return false;
    for (const auto &[key, meta] : *table) {
      const StageInfo *stage =
          key.first < static_cast<int>(manifest.stages.size())
              ? &manifest.stages[key.first]
              : nullptr;
      if (!stage || key.second >= static_cast<int>(stage->outputs.size()) ||
          stage->outputs[key.second].kind != meta.kind) {
        warnings() << "warning: meta cache '" << cachePath
                   << "' does not match the manifest (stage " << key.first
                   << " output " << key.second << "); inferring shapes\n";
        return false;
      }
    }
  }
  return true;
}

llvm::Expected<std::map<std::string, MetaTable>>
Pipeline::Impl::agreeOnMetadata(const std::vector<std::string> &signatures) {
  bool userRequested = !options.inputMetaPath.empty();
  for (const StageInfo &s : manifest.stages)
    userRequested |= s.meta.has_value();
  std::optional<std::map<std::string, MetaTable>> user;
  if (userRequested) {
    auto t = userTables(signatures);
    if (!t)
      return t.takeError();
    user = std::move(*t);
  }
  bool cacheComplete = options.useMetaCache && !user && loadCache(signatures);

  // One agreement: two flags, then per edge between ranks the smallest
  // digest and the smallest negated digest of what its producer rank will
  // send and its consumer rank expects from the cache. The two agree iff
  // every rank involved holds the same metadata for the edge; ranks not
  // on the edge (or without a complete cache) pass the neutral maximum.
  constexpr int64_t kNeutral = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> agreed{user ? 1 : 0, cacheComplete ? 1 : 0};
  std::vector<const Edge *> remote;
  std::map<std::string, MetaTable> cached;
  if (cacheComplete)
    for (const std::string &sig : signatures)
      cached[sig] = *cache->find(cacheEntry(sig), requiredMeta);
  for (const Edge &e : schedule.edges) {
    int from = placement.rankOf(e.producer), to = placement.rankOf(e.consumer);
    if (from == to)
      continue;
    remote.push_back(&e);
    if (cacheComplete && (env.rank == from || env.rank == to)) {
      int64_t d = edgeDigest(cached, signatures, e.producer, e.outputs);
      agreed.insert(agreed.end(), {d, -d});
    } else {
      agreed.insert(agreed.end(), {kNeutral, kNeutral});
    }
  }
  if (llvm::Error err = transport->agreeMin(agreed))
    return err;
  if (agreed[0]) {
    stats.metaSource = MetaSource::User;
    return std::move(*user);
  }
  if (user)
    return makeError("user metadata was given on some ranks only");
  stats.metaSource = MetaSource::Inferred;
  if (!agreed[1])
    return std::map<std::string, MetaTable>();
  for (size_t k = 0; k < remote.size(); ++k) {
    int64_t lowest = agreed[2 + 2 * k], highest = -agreed[3 + 2 * k];
    if (lowest != highest) {
      const Edge &e = *remote[k];
      warnings() << llvm::formatv(
          "warning: the meta caches of ranks {0} and {1} disagree on stage "
          "{2} -> {3}; inferring shapes\n",
          placement.rankOf(e.producer), placement.rankOf(e.consumer),
          e.producer,
          e.collector ? std::string("output") : std::to_string(e.consumer));
      return std::map<std::string, MetaTable>();
    }
  }
  stats.metaSource = MetaSource::Cache;
  return cached;
}

llvm::Error Pipeline::Impl::cacheWasWrong(llvm::Error err) {
  if (stats.metaSource != MetaSource::Cache)
    return err;
  std::error_code removed = llvm::sys::fs::remove(cachePath);
  return makeError(llvm::toString(std::move(err)) + " (the meta cache '" +
                   cachePath + "' is wrong; " +
                   (removed ? "remove it and run again to infer)"
                            : "it was removed; run again to infer)"));
}

void Pipeline::Impl::saveCache(const std::vector<std::string> &signatures,
                               std::map<std::string, MetaTable> &tables) {
  for (const std::string &sig : signatures) {
    MetaTable kept;
    for (const auto &key : requiredMeta)
      if (tables[sig].count(key))
        kept[key] = tables[sig][key];
    cache->put(cacheEntry(sig), std::move(kept));
  }
  if (llvm::Error err = cache->save())
    warnings() << "warning: cannot save the meta cache: "
               << llvm::toString(std::move(err)) << "\n";
  else
    stats.cacheWritten = true;
}

llvm::Error Pipeline::Impl::prepareStep(const std::vector<c10::IValue> &inputs,
                                        ExecutorStep &step,
                                        std::vector<std::string> &fresh) {
  const int count = schedule.microbatches;
  // 1. Microbatches and their signatures, shared by the input root.
  auto shared = shareSignatures(inputs, step.microbatches);
  if (!shared)
    return shared.takeError();
  step.signatures = std::move(*shared);
  step.tables = &known;
  step.inferring.assign(count, false);
  fresh.clear();
  for (int m = 0; m < count; ++m)
    if (!known.count(step.signatures[m]) &&
        !llvm::is_contained(fresh, step.signatures[m]))
      fresh.push_back(step.signatures[m]);
  step.onMetaMismatch = [this](llvm::Error err) {
    return cacheWasWrong(std::move(err));
  };
  step.trace = trace ? &*trace : nullptr;
  step.runIndex = runs++;
  if (fresh.empty())
    return llvm::Error::success();

  // 2. Where the metadata of new signatures comes from: all ranks agree.
  auto agreed = agreeOnMetadata(fresh);
  if (!agreed)
    return agreed.takeError();
  for (auto &[sig, table] : *agreed)
    known[sig] = std::move(table);
  if (stats.metaSource == MetaSource::Inferred) {
    std::vector<std::string> seen;
    for (int m = 0; m < count; ++m)
      if (llvm::is_contained(fresh, step.signatures[m]) &&
          !llvm::is_contained(seen, step.signatures[m])) {
        seen.push_back(step.signatures[m]);
        step.inferring[m] = true;
      }
  }
  return llvm::Error::success();
}

void Pipeline::Impl::finishStep(const std::vector<std::string> &fresh) {
  if (!fresh.empty() && stats.metaSource == MetaSource::Inferred && cache)
    saveCache(fresh, known);
}

llvm::Expected<std::vector<c10::IValue>>
Pipeline::Impl::run(const std::vector<c10::IValue> &inputs) {
  Clock::time_point start = Clock::now();
  at::NoGradGuard noGrad;
  int64_t sentBefore = transport->messagesSent();
  stats.metaMessagesSent = 0;
  stats.cacheWritten = false;

  ExecutorStep step;
  std::vector<std::string> fresh;
  if (llvm::Error err = prepareStep(inputs, step, fresh))
    return err;
  double preparedMs = msSince(start);
  auto done = execute(plan, step);
  if (!done)
    return done.takeError();
  stats.metaMessagesSent = done->metaMessagesSent;
  stats.firstOutputMs = preparedMs + done->firstOutputMs;

  // Model outputs on the output rank.
  std::vector<c10::IValue> result;
  if (env.rank == placement.outputRank()) {
    for (size_t k = 0; k < done->outputParts.size(); ++k) {
      const ValueRef &ref = manifest.modelOutputs[k];
      auto joined = concatMicrobatches(
          done->outputParts[k], manifest.output(ref).kind, static_cast<int>(k));
      if (!joined)
        return joined.takeError();
      result.push_back(std::move(*joined));
    }
  }
  finishStep(fresh);
  stats.messagesSent = transport->messagesSent() - sentBefore;
  stats.totalMs = msSince(start);
  return result;
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

namespace {
/// Checks the options that need no manifest, before anything is built;
/// returns the device. Everything here bounds what a run may allocate.
llvm::Expected<DeviceKind> checkOptions(const RunOptions &options) {
  if (options.microbatches < 1 || options.microbatches > kMaxMicrobatches)
    return makeError(llvm::formatv("--microbatches {0} is not in 1..{1}",
                                   options.microbatches, kMaxMicrobatches)
                         .str());
  int cores = availableCores();
  int maxThreads = std::max(4, 4 * cores);
  if (options.threads < 0 || options.threads > maxThreads)
    return makeError(llvm::formatv("--threads {0} is not in 1..{1} (4 per "
                                   "core), or 0 for the default",
                                   options.threads, maxThreads)
                         .str());
  if (options.timeout.count() <= 0)
    return makeError("--timeout must be positive");
  std::optional<DeviceKind> device =
      llvm::StringSwitch<std::optional<DeviceKind>>(options.device)
          .Case("cpu", DeviceKind::CPU)
          .Case("cuda", DeviceKind::CUDA)
          .Default(std::nullopt);
  if (!device)
    return makeError("unknown device '" + options.device +
                     "' (expected cpu or cuda)");
  return *device;
}

/// Sets this process's intra-op threads: `threads`, or the cores shared by
/// the ranks on this machine.
void setThreads(int threads, const LaunchEnv &env) {
  boundThreads(threads > 0 ? threads : defaultThreads(env.localWorldSize));
}

/// c10d and Gloo report through glog (or c10's own logger), which prints
/// "WARNING: Logging before InitGoogleLogging()" and socket diagnostics
/// ahead of ppc's own error line; unless asked for, only fatal messages
/// pass.
void setTorchLogging(bool show) { compat::setTorchLogging(show); }
} // namespace

/// Loads the manifest and places its stages on the ranks.
llvm::Error Pipeline::Impl::loadManifest() {
  // Hash the very bytes that are parsed: the cache key then names the
  // manifest that was used, even if the file changes meanwhile.
  auto loaded = Manifest::load(manifestPath, &manifestSha256);
  if (!loaded)
    return loaded.takeError();
  manifest = std::move(*loaded);
  auto placed = Placement::create(static_cast<int>(manifest.stages.size()),
                                  env.worldSize);
  if (!placed)
    return placed.takeError();
  placement = *placed;
  return llvm::Error::success();
}

/// Builds the schedule and proves it deadlock-free before any rank runs it.
llvm::Error Pipeline::Impl::planSchedule() {
  auto built =
      !training() ? buildSchedule(manifest, placement, options.schedule,
                                  options.microbatches)
      : scheduleCSV.empty()
          ? buildTrainingSchedule(manifest, placement, options.schedule,
                                  options.microbatches)
          : trainingScheduleFromCSV(manifest, placement, scheduleCSV,
                                    options.microbatches, "--schedule-csv");
  if (!built)
    return built.takeError();
  schedule = std::move(*built);
  return simulateSchedule(manifest, schedule);
}

/// Loads this rank's stages (onto the transport's device).
llvm::Error Pipeline::Impl::loadStages(DeviceKind device) {
  formatOf(manifest).warmUp();
  std::string dir = manifestDirectory(manifestPath);
  for (int s : placement.stagesOf(env.rank)) {
    auto stage = Stage::load(manifest, dir, s);
    if (!stage)
      return stage.takeError();
    if (device == DeviceKind::CUDA)
      stage->executable().to(transport->device());
    stages.emplace(s, std::move(*stage));
  }
  return llvm::Error::success();
}

/// Finds the stage output the loss reads: model output `loss.modelOutput`,
/// a Tensor produced by a stage.
static llvm::Error resolveLoss(const Manifest &manifest, LossSpec &loss) {
  int outputs = static_cast<int>(manifest.modelOutputs.size());
  if (loss.modelOutput < 0 || loss.modelOutput >= outputs)
    return makeError(llvm::formatv("--loss-output {0} is not in 0..{1} (the "
                                   "model has {2} output{3})",
                                   loss.modelOutput, outputs - 1, outputs,
                                   outputs == 1 ? "" : "s")
                         .str());
  const ValueRef &ref = manifest.modelOutputs[loss.modelOutput];
  if (ref.isModelInput())
    return makeError(llvm::formatv("model output {0} is model input {1} "
                                   "itself; there is nothing to train",
                                   loss.modelOutput, ref.modelInput)
                         .str());
  ValueKind kind = manifest.output(ref).kind;
  if (kind != ValueKind::Tensor)
    return makeError(llvm::formatv("model output {0} is a {1}; the loss needs "
                                   "a Tensor (choose another with "
                                   "--loss-output)",
                                   loss.modelOutput, kindName(kind))
                         .str());
  loss.stage = ref.stage;
  loss.output = ref.output;
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Pipeline::Impl>>
Pipeline::Impl::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                       const RunOptions &options, std::optional<LossSpec> loss,
                       std::string scheduleCSV) {
  auto device = checkOptions(options);
  if (!device)
    return device.takeError();
  setTorchLogging(options.torchLogs);
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->options = options;
  impl->manifestPath = manifestPath.str();
  impl->scheduleCSV = std::move(scheduleCSV);
  if (llvm::Error err = impl->loadManifest())
    return err;
  if (loss) {
    if (llvm::Error err = resolveLoss(impl->manifest, *loss))
      return err;
    impl->loss = loss;
  }
  if (llvm::Error err = impl->planSchedule())
    return err;
  if (llvm::Error err = impl->init())
    return err;
  setThreads(options.threads, env);

  // Meet the others before loading stages: a rank that then fails to load
  // makes the others fail fast with "lost rank R" instead of waiting for a
  // rendezvous that never completes. Training uses one more channel, for
  // the tied parameters' gradients.
  auto transport = connectTransport(env, *device, options.timeout);
  if (!transport)
    return transport.takeError();
  impl->transport = std::move(*transport);
  impl->plan.transport = impl->transport.get();
  impl->transport->setChannelCount(impl->schedule.channelCount() +
                                   (impl->training() ? 1 : 0));
  // Every rank derives the same sorted list from the whole schedule.
  std::set<Transport::Link> links;
  for (size_t r = 0; r < impl->schedule.ranks.size(); ++r)
    for (const Action &a : impl->schedule.ranks[r])
      if (a.kind == ActionKind::SendF || a.kind == ActionKind::SendB)
        links.insert(
            {channelOf(impl->schedule, a), static_cast<int>(r), a.peerRank});
  if (llvm::Error err = impl->transport->connectLinks(
          std::vector<Transport::Link>(links.begin(), links.end())))
    return err;
  if (llvm::Error err = impl->loadStages(*device))
    return err;
  if (!options.tracePath.empty())
    impl->trace.emplace(env.rank);
  return impl;
}

llvm::Expected<std::unique_ptr<Pipeline>>
Pipeline::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                 const RunOptions &options) {
  auto impl = Impl::create(manifestPath, env, options, std::nullopt, "");
  if (!impl)
    return impl.takeError();
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(*impl)));
}

bool Pipeline::needsInputs() const { return impl_->readsInputs; }
int Pipeline::outputRank() const { return impl_->placement.outputRank(); }
int Pipeline::rank() const { return impl_->env.rank; }
bool Pipeline::outputIsTuple() const { return impl_->manifest.outputIsTuple; }
const RunStats &Pipeline::stats() const { return impl_->stats; }

void Pipeline::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->schedule, impl_->env.rank, os);
}

c10::IValue valueOnDevice(const c10::IValue &value, c10::Device device) {
  if (value.isTensor())
    return value.toTensor().to(device);
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor &t : value.toTensorList().vec())
      out.push_back(t.to(device));
    return out;
  }
  if (value.isList()) {
    c10::impl::GenericList out(value.toList().elementType());
    for (const c10::IValue &v : value.toList().vec())
      out.push_back(valueOnDevice(v, device));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> out;
    for (const c10::IValue &v : value.toTupleRef().elements())
      out.push_back(valueOnDevice(v, device));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  return value;
}

llvm::Expected<std::vector<c10::IValue>>
valuesOnDevice(const std::vector<c10::IValue> &values, c10::Device device,
               const std::string &what) {
  return torchCall("cannot move " + what + " to " + device.str(), [&] {
    std::vector<c10::IValue> out;
    out.reserve(values.size());
    for (const c10::IValue &v : values)
      out.push_back(valueOnDevice(v, device));
    return out;
  });
}

llvm::Expected<std::vector<c10::IValue>>
Pipeline::run(const std::vector<c10::IValue> &inputs) {
  c10::Device device = impl_->transport->device();
  if (device.is_cpu())
    return impl_->run(inputs);
  auto onDevice = valuesOnDevice(inputs, device, "the inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto result = impl_->run(*onDevice);
  if (!result)
    return result.takeError();
  // Outputs are written and returned on the CPU whatever ran them.
  return valuesOnDevice(*result, c10::kCPU, "the outputs");
}

llvm::Error Pipeline::Impl::writeTrace() {
  if (!trace)
    return llvm::Error::success();
  std::vector<std::string> ranks;
  if (llvm::Error err = transport->gatherBytes(trace->eventsJSON(), 0, ranks,
                                               "the trace events"))
    return err;
  trace.reset();
  if (env.rank != 0)
    return llvm::Error::success();
  return writeTraceFile(options.tracePath, ranks);
}

llvm::Error Pipeline::finish() {
  if (llvm::Error err = impl_->writeTrace())
    return err;
  return impl_->transport->barrier();
}

/// The meta cache directory of a run with `options`.
static std::string metaCacheDirOf(const RunOptions &options,
                                  llvm::StringRef manifestPath) {
  return options.metaCacheDir.empty() ? manifestDirectory(manifestPath)
                                      : options.metaCacheDir;
}

std::string Pipeline::Impl::metaCacheDir() const {
  return metaCacheDirOf(options, manifestPath);
}

/// Refuses an --output that would replace a file the run reads or keeps:
/// the input, the manifest, a stage file or a meta cache file; for a
/// directory input, an output directory that is the input directory or
/// holds the manifest or a stage file (output files are named after input
/// files). Every rank checks (before meeting the others), so all fail alike
/// and at once.
static llvm::Error checkOutputPath(llvm::StringRef manifestPath,
                                   llvm::StringRef inputPath,
                                   llvm::StringRef outputPath,
                                   const LaunchEnv &env,
                                   const RunOptions &options) {
  auto refuse = [&](const llvm::Twine &what) {
    return makeError("--output '" + outputPath + "' is " + what +
                     "; refusing to overwrite it");
  };
  // A rank that does not read inputs may not see them (another host): the
  // output rank checks again once the input root has described them.
  bool directory = llvm::sys::fs::is_directory(inputPath);
  if (llvm::sys::fs::exists(inputPath) && llvm::sys::fs::exists(outputPath) &&
      directory != llvm::sys::fs::is_directory(outputPath))
    return makeError("--output '" + outputPath + "' is " +
                     (directory ? "not a directory" : "a directory") +
                     "; the input '" + inputPath + "' is " +
                     (directory ? "one" : "not"));
  if (sameFile(outputPath, inputPath))
    return refuse(directory ? "the input directory" : "the input file");
  if (sameFile(outputPath, manifestPath))
    return refuse("the manifest");
  if (directory && sameFile(outputPath, manifestDirectory(manifestPath)))
    return refuse("the manifest's directory");
  std::string cacheDir = metaCacheDirOf(options, manifestPath);
  for (int r = 0; r < env.worldSize; ++r)
    if (sameFile(outputPath, MetaCache::filePath(cacheDir, r, env.worldSize)))
      return refuse("a meta cache file");
  // A manifest that does not load is reported by Pipeline::create.
  auto manifest = Manifest::load(manifestPath);
  if (!manifest) {
    llvm::consumeError(manifest.takeError());
    return llvm::Error::success();
  }
  std::string dir = manifestDirectory(manifestPath);
  for (const StageInfo &stage : manifest->stages) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, stage.file);
    if (sameFile(outputPath, path))
      return refuse(llvm::formatv("the file of stage {0}", stage.index));
    if (directory &&
        sameFile(outputPath, llvm::sys::path::parent_path(path.str())))
      return refuse(
          llvm::formatv("the directory of the file of stage {0}", stage.index));
  }
  return llvm::Error::success();
}

size_t Pipeline::inputCount() const {
  return impl_->manifest.modelInputs.size();
}

int Pipeline::inputRoot() const { return impl_->inputRoot; }

llvm::Error Pipeline::shareFromInputRoot(std::string &bytes) {
  return impl_->transport->broadcastBytes(bytes, impl_->inputRoot);
}

namespace {
/// The forms of a `ppc run` input (docs/runtime.md, "Many batches per
/// launch").
enum class InputForm { Single, List, Directory };

std::optional<InputForm> parseFormName(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<InputForm>>(name)
      .Case("single", InputForm::Single)
      .Case("list", InputForm::List)
      .Case("directory", InputForm::Directory)
      .Default(std::nullopt);
}

llvm::StringRef formName(InputForm form) {
  switch (form) {
  case InputForm::Single:
    return "single";
  case InputForm::List:
    return "list";
  case InputForm::Directory:
    return "directory";
  }
  return "single";
}

/// The input as one rank sees it: its form, its batches, --repeat, and a
/// directory's file names. The input root's is shared with every rank: the
/// output rank needs the form and the names, which it may not be able to
/// read itself, and every rank the number of runs.
struct BatchPlan {
  InputForm form = InputForm::Single;
  int64_t count = 1;
  int64_t repeat = 1;
  std::vector<std::string> names;

  /// "ppc-batches FORM COUNT REPEAT\n" then each name and a NUL (a file
  /// name holds no NUL; it may hold a newline).
  std::string encode() const {
    std::string out = llvm::formatv("ppc-batches {0} {1} {2}\n", formName(form),
                                    count, repeat)
                          .str();
    for (const std::string &name : names) {
      out += name;
      out.push_back('\0');
    }
    return out;
  }

  /// Parses what rank `root` shared, checking what a peer sent before using
  /// it: the output rank names files after `names`.
  static llvm::Expected<BatchPlan> decode(llvm::StringRef bytes, int root) {
    auto bad = [&](llvm::StringRef why) {
      return makeError(llvm::formatv("rank {0} shared a malformed description "
                                     "of the input ({1})",
                                     root, why)
                           .str());
    };
    auto [head, rest] = bytes.split('\n');
    llvm::SmallVector<llvm::StringRef, 4> words;
    head.split(words, ' ');
    BatchPlan plan;
    std::optional<InputForm> form =
        words.size() == 4 && words[0] == "ppc-batches" ? parseFormName(words[1])
                                                       : std::nullopt;
    if (!form || words[2].getAsInteger(10, plan.count) ||
        words[3].getAsInteger(10, plan.repeat))
      return bad("bad header");
    plan.form = *form;
    if (plan.count < 1 || plan.count > kMaxBatches ||
        (plan.form == InputForm::Single && plan.count != 1) ||
        plan.repeat < 1 || plan.repeat > kMaxRepeat)
      return bad("a count out of range");
    while (!rest.empty()) {
      size_t end = rest.find('\0');
      llvm::StringRef name = rest.take_front(end);
      if (end == llvm::StringRef::npos || name.contains('/') ||
          !name.endswith(".pt") ||
          static_cast<int64_t>(plan.names.size()) >= plan.count)
        return bad("a bad file name");
      plan.names.push_back(name.str());
      rest = rest.drop_front(end + 1);
    }
    if (static_cast<int64_t>(plan.names.size()) !=
        (plan.form == InputForm::Directory ? plan.count : 0))
      return bad("the file names do not match the count");
    return plan;
  }

  /// "a list of 3 batches", for messages.
  std::string describe() const {
    switch (form) {
    case InputForm::Single:
      return "one batch";
    case InputForm::List:
      return llvm::formatv("a list of {0} batch{1}", count,
                           count == 1 ? "" : "es");
    case InputForm::Directory:
      return llvm::formatv("a directory of {0} file{1}", count,
                           count == 1 ? "" : "s");
    }
    return "";
  }

  /// Why `other` (another rank's view of the input) differs, or "".
  std::string difference(const BatchPlan &other) const {
    if (form != other.form || count != other.count)
      return describe() + " vs " + other.describe();
    for (size_t b = 0; b < names.size(); ++b)
      if (names[b] != other.names[b])
        return llvm::formatv("file {0} is '{1}' vs '{2}'", b, names[b],
                             other.names[b]);
    return "";
  }

  /// How run errors name batch `b` of repetition `pass` when there are
  /// several: "batch 2 ('c.pt'), repeat 3 of 5"; "" when there is one.
  std::string label(int64_t b, int64_t pass) const {
    if (form == InputForm::Single && repeat == 1)
      return "";
    std::string out;
    if (form != InputForm::Single)
      out = llvm::formatv("batch {0}", b);
    if (form == InputForm::Directory)
      out += " ('" + names[b] + "')";
    if (repeat > 1)
      out += llvm::formatv("{0}repeat {1} of {2}", out.empty() ? "" : ", ",
                           pass + 1, repeat);
    return out;
  }
};

/// The input of a rank that reads model inputs: a single batch or a list
/// is read whole; a directory's files are read as their batches come, so
/// that only one batch is in memory at a time.
struct BatchInput {
  BatchPlan plan;
  std::string path;
  size_t modelInputs = 0;
  int microbatches = 1;
  /// Single and List: the batches.
  std::vector<std::vector<c10::IValue>> batches;

  /// Checks that `inputs` fit the model and --microbatches, so that a bad
  /// batch of a list fails before the first batch runs.
  llvm::Error check(const std::vector<c10::IValue> &inputs,
                    const llvm::Twine &what) const {
    auto split = splitMicrobatches(inputs, modelInputs, microbatches);
    if (!split)
      return withContext(split.takeError(), what);
    return llvm::Error::success();
  }

  llvm::Expected<std::vector<c10::IValue>> batch(int64_t b) const {
    if (plan.form != InputForm::Directory)
      return batches[b];
    llvm::SmallString<256> file(path);
    llvm::sys::path::append(file, plan.names[b]);
    auto loaded = loadTensors(file);
    if (!loaded)
      return loaded.takeError();
    if (llvm::Error err = check(*loaded, "input '" + file + "'"))
      return err;
    return loaded;
  }
};

/// The most bytes a directory's file names may take: they are shared with
/// every rank (Transport::broadcastBytes moves at most 64 MiB).
constexpr size_t kMaxNameBytes = 32 << 20;

/// The regular files (or links to them) of `dir` whose names end in .pt,
/// sorted bytewise. Errors: "cannot read input directory 'd': ...", "input
/// directory 'd' holds no .pt files", more than kMaxBatches of them or of
/// kMaxNameBytes in their names.
llvm::Expected<std::vector<std::string>>
listInputDirectory(llvm::StringRef dir) {
  std::vector<std::string> names;
  size_t bytes = 0;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    llvm::sys::fs::file_status status;
    if (!name.endswith(".pt") || llvm::sys::fs::status(it->path(), status) ||
        !llvm::sys::fs::is_regular_file(status))
      continue;
    bytes += name.size() + 1;
    if (static_cast<int64_t>(names.size()) == kMaxBatches ||
        bytes > kMaxNameBytes)
      return makeError(llvm::formatv("input directory '{0}' holds more than "
                                     "{1} .pt files or {2} MiB of their names",
                                     dir, kMaxBatches, kMaxNameBytes >> 20)
                           .str());
    names.push_back(name.str());
  }
  if (ec)
    return makeError("cannot read input directory '" + dir +
                     "': " + ec.message());
  if (names.empty())
    return makeError("input directory '" + dir + "' holds no .pt files");
  std::sort(names.begin(), names.end());
  return names;
}

/// Opens the input on a rank that reads model inputs.
llvm::Expected<BatchInput> openInput(llvm::StringRef path,
                                     const Pipeline &pipeline,
                                     const RunOptions &options,
                                     int64_t repeat) {
  BatchInput input;
  input.path = path.str();
  input.modelInputs = pipeline.inputCount();
  input.microbatches = options.microbatches;
  input.plan.repeat = repeat;
  if (llvm::sys::fs::is_directory(path)) {
    auto names = listInputDirectory(path);
    if (!names)
      return names.takeError();
    input.plan.form = InputForm::Directory;
    input.plan.names = std::move(*names);
    input.plan.count = static_cast<int64_t>(input.plan.names.size());
    return input;
  }
  auto loaded = loadInputBatches(path, input.modelInputs);
  if (!loaded)
    return loaded.takeError();
  input.batches = std::move(loaded->batches);
  input.plan.count = static_cast<int64_t>(input.batches.size());
  if (!loaded->isList)
    return input;
  input.plan.form = InputForm::List;
  if (input.plan.count > kMaxBatches)
    return makeError(llvm::formatv("input '{0}' holds {1} batches; the limit "
                                   "is {2}",
                                   path, input.plan.count, kMaxBatches)
                         .str());
  for (size_t b = 0; b < input.batches.size(); ++b)
    if (llvm::Error err =
            input.check(input.batches[b],
                        llvm::formatv("input '{0}' batch {1}", path, b).str()))
      return err;
  return input;
}

/// Gives every rank the input root's plan; an input rank that sees another
/// input fails.
llvm::Expected<BatchPlan> sharePlan(Pipeline &pipeline,
                                    const std::optional<BatchInput> &input) {
  std::string bytes = input ? input->plan.encode() : std::string();
  if (llvm::Error err = pipeline.shareFromInputRoot(bytes))
    return err;
  auto plan = BatchPlan::decode(bytes, pipeline.inputRoot());
  if (!plan)
    return plan.takeError();
  if (input) {
    std::string why = input->plan.difference(*plan);
    if (!why.empty())
      return makeError(llvm::formatv("the input on rank {0} differs from the "
                                     "input on rank {1} ({2})",
                                     pipeline.rank(), pipeline.inputRoot(), why)
                           .str());
  }
  return plan;
}

/// Folds one run's stats into the launch's.
void addRun(RunStats &total, const RunStats &run, bool first) {
  if (first) {
    total = run;
    return;
  }
  if (run.metaSource == MetaSource::Inferred)
    total.metaSource = MetaSource::Inferred;
  total.metaMessagesSent += run.metaMessagesSent;
  total.messagesSent += run.messagesSent;
  total.cacheWritten |= run.cacheWritten;
  total.batches += run.batches;
}
} // namespace

llvm::Expected<RunStats>
runPipelineFiles(llvm::StringRef manifestPath, llvm::StringRef inputPath,
                 llvm::StringRef outputPath, const LaunchEnv &env,
                 const RunOptions &options, llvm::raw_ostream *schedule,
                 int64_t repeat) {
  if (repeat < 1 || repeat > kMaxRepeat)
    return makeError(
        llvm::formatv("--repeat {0} is not in 1..{1}", repeat, kMaxRepeat)
            .str());
  if (llvm::Error err =
          checkOutputPath(manifestPath, inputPath, outputPath, env, options))
    return err;
  auto created = Pipeline::create(manifestPath, env, options);
  if (!created)
    return created.takeError();
  Pipeline &pipeline = **created;
  if (schedule) {
    pipeline.printSchedule(*schedule);
    schedule->flush();
  }
  std::optional<BatchInput> input;
  if (pipeline.needsInputs()) {
    auto opened = openInput(inputPath, pipeline, options, repeat);
    if (!opened)
      return opened.takeError();
    input = std::move(*opened);
  }
  auto shared = sharePlan(pipeline, input);
  if (!shared)
    return shared.takeError();
  const BatchPlan &plan = *shared;

  bool writes = env.rank == pipeline.outputRank();
  bool tuple = pipeline.outputIsTuple();
  bool directory = plan.form == InputForm::Directory;
  if (writes && llvm::sys::fs::exists(outputPath) &&
      directory != llvm::sys::fs::is_directory(outputPath))
    return makeError("--output '" + outputPath + "' is " +
                     (directory ? "not a directory" : "a directory") +
                     "; the input on rank " +
                     llvm::Twine(pipeline.inputRoot()) + " is " +
                     (directory ? "one" : "not"));
  if (writes && directory) {
    if (std::error_code ec = llvm::sys::fs::create_directories(outputPath))
      return makeError("cannot create --output directory '" + outputPath +
                       "': " + ec.message());
  }
  // The last repetition's outputs, unless written as they come.
  std::vector<std::vector<c10::IValue>> kept;
  RunStats total;
  Clock::time_point start = Clock::now();
  for (int64_t pass = 0; pass < plan.repeat; ++pass) {
    bool last = pass + 1 == plan.repeat;
    for (int64_t b = 0; b < plan.count; ++b) {
      std::vector<c10::IValue> inputs;
      if (input) {
        auto loaded = input->batch(b);
        if (!loaded)
          return loaded.takeError();
        inputs = std::move(*loaded);
      }
      auto outputs = pipeline.run(inputs);
      if (!outputs) {
        std::string label = plan.label(b, pass);
        return label.empty() ? outputs.takeError()
                             : withContext(outputs.takeError(), label);
      }
      addRun(total, pipeline.stats(), pass == 0 && b == 0);
      if (!writes || !last)
        continue;
      if (!directory) {
        kept.push_back(std::move(*outputs));
        continue;
      }
      llvm::SmallString<256> file(outputPath);
      llvm::sys::path::append(file, plan.names[b]);
      if (llvm::Error err = saveTensors(file, *outputs, tuple))
        return err;
    }
  }
  total.totalMs = msSince(start);
  if (writes && plan.form == InputForm::List)
    if (llvm::Error err = saveTensorList(outputPath, kept, tuple))
      return err;
  if (writes && plan.form == InputForm::Single)
    if (llvm::Error err = saveTensors(outputPath, kept.front(), tuple))
      return err;
  if (llvm::Error err = pipeline.finish())
    return err;
  return total;
}

} // namespace ppc
