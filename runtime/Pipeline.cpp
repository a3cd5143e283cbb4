//===- runtime/Pipeline.cpp - The pipeline runtime ------------------------===//
//
// This file implements Pipeline: set-up (manifest, placement, schedule,
// rendezvous, stage loading), the start-up agreement on where metadata comes
// from, and the one executor that runs any schedule.
//
// The executor, per action of this rank's schedule:
//   F(s, m)      gathers stage s's inputs (microbatch m's slice of a model
//                input, or a value produced or received earlier), giving a
//                stage that mutates an input its own copy when the value has
//                other uses; runs the stage; checks (or, on an inference
//                microbatch, records) the metadata of its outputs.
//   SEND_F(e, m) on an inference microbatch first sends the edge's metadata
//                header (length, then the int64 words), then the values'
//                wire tensors.
//   RECV_F(e, m) on an inference microbatch first receives the header and
//                records it; then allocates buffers from the metadata and
//                receives the wire tensors.
//   OUT(m)       keeps microbatch m's model outputs for concatenation.
// The inference microbatch of a signature is its first microbatch; every
// stage sees microbatches in increasing order in both schedules, so it is
// also the first one each stage and edge handles with that signature.
//
//===----------------------------------------------------------------------===//
#include "runtime/Pipeline.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/Stage.h"
#include "lib/TensorIO.h"
#include "runtime/MetaCache.h"
#include "runtime/Microbatch.h"
#include "runtime/Schedule.h"
#include "runtime/TensorMeta.h"
#include "runtime/Transport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Logging.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

/// How errors name the values of one edge and microbatch.
std::string describeEdge(const Edge &edge, int microbatch) {
  return llvm::formatv("stage {0} -> {1} of microbatch {2}", edge.producer,
                       edge.collector ? std::string("output")
                                      : std::to_string(edge.consumer),
                       microbatch);
}

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

/// A value of one microbatch: (stage, output, microbatch).
using ValueKey = std::tuple<int, int, int>;

/// A copy of `value` for a stage that writes to its input in place.
c10::IValue cloneValue(const c10::IValue &value) {
  if (value.isTensor())
    return value.toTensor().clone();
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor &t : value.toTensorList())
      out.push_back(t.clone());
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elems;
    for (const c10::IValue &e : value.toTupleRef().elements())
      elems.push_back(cloneValue(e));
    return c10::ivalue::Tuple::create(std::move(elems));
  }
  return value;
}
} // namespace

struct Pipeline::Impl {
  LaunchEnv env;
  RunOptions options;
  std::string manifestPath;
  Manifest manifest;
  std::string manifestSha256;
  Placement placement;
  Schedule schedule;
  std::map<int, Stage> stages;
  std::unique_ptr<Transport> transport;
  RunStats stats;

  /// Lowest rank whose stages read model inputs: it shares the signatures.
  int inputRoot = 0;
  bool readsInputs = false;
  /// Uses of each stage output anywhere in the pipeline (consumer input
  /// slots plus model outputs): above one, a mutating consumer copies.
  std::map<std::pair<int, int>, int> globalUses;
  std::map<int, int> modelInputUses;
  /// Uses of each stage output on this rank (local input slots, remote
  /// edges it is sent on, model outputs collected here).
  std::map<std::pair<int, int>, int> localUses;
  /// The metadata keys this rank needs: its stages' outputs and the values
  /// it receives.
  std::vector<std::pair<int, int>> requiredMeta;

  llvm::raw_ostream &warnings() {
    return options.warnings ? *options.warnings : llvm::errs();
  }

  llvm::Error loadManifest();
  llvm::Error planSchedule();
  llvm::Error init();
  llvm::Error loadStages(DeviceKind device);
  llvm::Expected<std::map<std::string, MetaTable>>
  userTables(const std::vector<std::string> &signatures);
  llvm::Expected<std::vector<c10::IValue>>
  run(const std::vector<c10::IValue> &inputs);
};

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

  for (const StageInfo &s : manifest.stages)
    for (const StageInput &in : s.inputs) {
      if (in.source.isModelInput()) {
        ++modelInputUses[in.source.modelInput];
        continue;
      }
      ++globalUses[{in.source.stage, in.source.output}];
      if (placement.rankOf(s.index) == env.rank)
        ++localUses[{in.source.stage, in.source.output}];
    }
  for (const ValueRef &ref : manifest.modelOutputs) {
    ++globalUses[{ref.stage, ref.output}];
    if (placement.outputRank() == env.rank)
      ++localUses[{ref.stage, ref.output}];
  }
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

/// Reads a JSON file or value of user metadata: {"stages": [{"outputs":
/// [meta, ...]}, ...]} or, per stage in the manifest, {"outputs": [...]}.
llvm::Expected<std::map<std::string, MetaTable>>
Pipeline::Impl::userTables(const std::vector<std::string> &signatures) {
  // Per stage: the JSON list of output metadata, where given.
  std::map<int, const llvm::json::Array *> given;
  std::optional<llvm::json::Value> file;
  std::string source;
  if (!options.inputMetaPath.empty()) {
    source = "input meta '" + options.inputMetaPath + "'";
    auto buffer =
        llvm::MemoryBuffer::getFile(options.inputMetaPath, /*IsText=*/true);
    if (!buffer)
      return makeError("cannot read " + source + ": " +
                       buffer.getError().message());
    auto json = llvm::json::parse((*buffer)->getBuffer());
    if (!json)
      return makeError(
          source + " is not valid JSON: " + llvm::toString(json.takeError()));
    file = std::move(*json);
    const llvm::json::Object *top = file->getAsObject();
    const llvm::json::Array *stageArray =
        top ? top->getArray("stages") : nullptr;
    if (!stageArray)
      return makeError(source + ": expected {\"stages\": [...]}");
    for (size_t s = 0; s < stageArray->size(); ++s)
      if (const llvm::json::Object *o = (*stageArray)[s].getAsObject())
        if (const llvm::json::Array *outs = o->getArray("outputs"))
          given[static_cast<int>(s)] = outs;
  } else {
    source = "the manifest's stage meta";
    for (const StageInfo &s : manifest.stages)
      if (s.meta)
        if (const llvm::json::Object *o = s.meta->getAsObject())
          if (const llvm::json::Array *outs = o->getArray("outputs"))
            given[s.index] = outs;
  }

  std::map<std::string, MetaTable> tables;
  for (const std::string &sig : signatures) {
    MetaTable &table = tables[sig];
    int64_t batch = signatureBatchSize(sig);
    for (const auto &[stage, output] : requiredMeta) {
      auto it = given.find(stage);
      if (it == given.end() || output >= static_cast<int>(it->second->size()))
        return makeError(
            llvm::formatv("{0} has no metadata for stage {1} output {2}",
                          source, stage, output)
                .str());
      auto meta = metaFromJSON(
          (*it->second)[output],
          llvm::formatv("{0}: stages[{1}].outputs[{2}]", source, stage, output),
          batch);
      if (!meta)
        return meta.takeError();
      ValueKind declared = manifest.stages[stage].outputs[output].kind;
      if (meta->kind != declared)
        return makeError(
            llvm::formatv("{0}: stage {1} output {2} is a {3} in the "
                          "manifest, not a {4}",
                          source, stage, output, kindName(declared),
                          kindName(meta->kind))
                .str());
      table[{stage, output}] = std::move(*meta);
    }
  }
  return tables;
}

llvm::Expected<std::vector<c10::IValue>>
Pipeline::Impl::run(const std::vector<c10::IValue> &inputs) {
  Clock::time_point start = Clock::now();
  at::NoGradGuard noGrad;
  const int count = schedule.microbatches;
  int64_t sentBefore = transport->messagesSent();
  stats.metaMessagesSent = 0;
  stats.cacheWritten = false;

  // 1. Microbatches and their signatures, shared by the input root.
  std::vector<std::vector<c10::IValue>> microbatches;
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
    return std::move(err);
  {
    llvm::SmallVector<llvm::StringRef, 8> parts;
    llvm::StringRef(blob).split(parts, '\n');
    if (static_cast<int>(parts.size()) != count)
      return makeError(
          llvm::formatv("rank {0} shared {1} microbatch signatures, "
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
  }
  std::vector<std::string> distinct;
  std::vector<bool> inferring(count, false);
  for (int m = 0; m < count; ++m)
    if (std::find(distinct.begin(), distinct.end(), signatures[m]) ==
        distinct.end()) {
      distinct.push_back(signatures[m]);
      inferring[m] = true;
    }

  // 2. Where the metadata comes from: all ranks agree.
  bool userRequested = !options.inputMetaPath.empty();
  for (const StageInfo &s : manifest.stages)
    userRequested |= s.meta.has_value();
  std::map<std::string, MetaTable> tables;
  std::optional<std::map<std::string, MetaTable>> user;
  if (userRequested) {
    auto t = userTables(distinct);
    if (!t)
      return t.takeError();
    user = std::move(*t);
  }
  std::optional<MetaCache> cache;
  bool cacheComplete = false;
  if (options.useMetaCache && !user) {
    MetaCacheKey key;
    key.manifestSha256 = manifestSha256;
    for (const auto &[index, stage] : stages)
      key.stages.push_back({index, manifest.stages[index].sha256});
    key.layout = placement.describe();
    std::string dir = options.metaCacheDir.empty()
                          ? manifestDirectory(manifestPath)
                          : options.metaCacheDir;
    std::string warning;
    cache = MetaCache::load(MetaCache::filePath(dir, env.rank, env.worldSize),
                            key, warning);
    if (!warning.empty())
      warnings() << "warning: " << warning << "; inferring shapes\n";
    cacheComplete = true;
    for (const std::string &sig : distinct)
      cacheComplete &= cache->find(sig, requiredMeta) != nullptr;
  }
  std::vector<int64_t> flags{user ? 1 : 0, cacheComplete ? 1 : 0};
  if (llvm::Error err = transport->agreeMin(flags))
    return std::move(err);
  if (flags[0]) {
    stats.metaSource = MetaSource::User;
    tables = std::move(*user);
  } else if (flags[1]) {
    stats.metaSource = MetaSource::Cache;
    for (const std::string &sig : distinct)
      tables[sig] = *cache->find(sig, requiredMeta);
  } else {
    if (user)
      return makeError("user metadata was given on some ranks only");
    stats.metaSource = MetaSource::Inferred;
  }
  const bool infer = stats.metaSource == MetaSource::Inferred;

  // 3. Execute this rank's schedule.
  std::map<ValueKey, c10::IValue> values;
  std::map<ValueKey, int> remaining;
  std::vector<std::vector<c10::IValue>> outputParts(
      manifest.modelOutputs.size());
  const std::vector<Action> &actions = schedule.ranks[env.rank];
  size_t lastOfFirst = 0;
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].microbatch == 0)
      lastOfFirst = i;
  c10::Device device = transport->device();

  auto store = [&](int stage, int output, int m, c10::IValue value) {
    auto it = localUses.find({stage, output});
    if (it == localUses.end() || it->second == 0)
      return;
    values[{stage, output, m}] = std::move(value);
    remaining[{stage, output, m}] = it->second;
  };
  auto take = [&](int stage, int output, int m) -> llvm::Expected<c10::IValue> {
    auto it = values.find({stage, output, m});
    if (it == values.end())
      return makeError(llvm::formatv("internal error: stage {0} output {1} of "
                                     "microbatch {2} is not on rank {3}",
                                     stage, output, m, env.rank)
                           .str());
    c10::IValue v = it->second;
    if (--remaining[{stage, output, m}] == 0) {
      values.erase(it);
      remaining.erase({stage, output, m});
    }
    return v;
  };
  auto metaFor = [&](int m, int stage,
                     int output) -> llvm::Expected<const ValueMeta *> {
    MetaTable &table = tables[signatures[m]];
    auto it = table.find({stage, output});
    if (it == table.end())
      return makeError(
          llvm::formatv("no metadata for stage {0} output {1} ('{2}') for "
                        "microbatch signature {3}",
                        stage, output,
                        manifest.stages[stage].outputs[output].name,
                        signatures[m])
              .str());
    return &it->second;
  };

  for (size_t i = 0; i < actions.size(); ++i) {
    const Action &a = actions[i];
    const int m = a.microbatch;
    switch (a.kind) {
    case ActionKind::Forward: {
      const StageInfo &info = manifest.stages[a.stage];
      std::vector<c10::IValue> args;
      for (const StageInput &in : info.inputs) {
        c10::IValue v;
        bool shared;
        if (in.source.isModelInput()) {
          v = microbatches[m][in.source.modelInput];
          shared = modelInputUses[in.source.modelInput] > 1;
        } else {
          auto got = take(in.source.stage, in.source.output, m);
          if (!got)
            return got.takeError();
          v = std::move(*got);
          shared = globalUses[{in.source.stage, in.source.output}] > 1;
        }
        args.push_back(in.mutated && shared ? cloneValue(v) : v);
      }
      auto outputs = stages.at(a.stage).run(std::move(args));
      if (!outputs)
        return outputs.takeError();
      for (size_t o = 0; o < outputs->size(); ++o) {
        int out = static_cast<int>(o);
        MetaTable &table = tables[signatures[m]];
        auto it = table.find({a.stage, out});
        if (infer && inferring[m] && it == table.end()) {
          table[{a.stage, out}] =
              ValueMeta::of((*outputs)[o], info.outputs[o].kind);
        } else {
          auto meta = metaFor(m, a.stage, out);
          if (!meta)
            return meta.takeError();
          if (llvm::Error err = checkValue(
                  (*outputs)[o], **meta,
                  llvm::formatv(
                      "stage {0} output {1} ('{2}') of microbatch {3}", a.stage,
                      o, info.outputs[o].name, m)))
            return std::move(err);
        }
        store(a.stage, out, m, std::move((*outputs)[o]));
      }
      break;
    }
    case ActionKind::SendF: {
      const Edge &edge = schedule.edges[a.edge];
      int channel = a.edge + 1;
      std::string what = describeEdge(edge, m);
      std::vector<c10::IValue> vals;
      std::vector<ValueMeta> metas;
      for (int o : edge.outputs) {
        auto v = take(edge.producer, o, m);
        if (!v)
          return v.takeError();
        auto meta = metaFor(m, edge.producer, o);
        if (!meta)
          return meta.takeError();
        metas.push_back(**meta);
        vals.push_back(std::move(*v));
      }
      if (infer && inferring[m]) {
        std::vector<int64_t> words =
            encodeHeader(edge.producer, edge.consumer, m, metas);
        at::Tensor length =
            at::tensor({static_cast<int64_t>(words.size())}, at::kLong);
        at::Tensor header = at::tensor(words, at::kLong);
        if (llvm::Error err =
                transport->send(length.to(device), a.peerRank, channel,
                                "the metadata of " + what))
          return std::move(err);
        if (llvm::Error err =
                transport->send(header.to(device), a.peerRank, channel,
                                "the metadata of " + what))
          return std::move(err);
        ++stats.metaMessagesSent;
      }
      for (size_t k = 0; k < vals.size(); ++k)
        for (at::Tensor &t : toWire(vals[k], metas[k].kind))
          if (t.numel() > 0)
            if (llvm::Error err =
                    transport->send(t.to(device), a.peerRank, channel, what))
              return std::move(err);
      break;
    }
    case ActionKind::RecvF: {
      const Edge &edge = schedule.edges[a.edge];
      int channel = a.edge + 1;
      std::string what = describeEdge(edge, m);
      MetaTable &table = tables[signatures[m]];
      if (infer && inferring[m]) {
        at::Tensor length =
            at::empty({1}, at::TensorOptions(at::kLong).device(device));
        if (llvm::Error err = transport->recv(length, a.peerRank, channel,
                                              "the metadata of " + what))
          return std::move(err);
        int64_t words = length.cpu().item<int64_t>();
        if (words < 6 || words > (int64_t(1) << 24))
          return makeError(
              llvm::formatv("metadata header of {0}: bad length {1}", what,
                            words)
                  .str());
        at::Tensor header =
            at::empty({words}, at::TensorOptions(at::kLong).device(device));
        if (llvm::Error err = transport->recv(header, a.peerRank, channel,
                                              "the metadata of " + what))
          return std::move(err);
        header = header.cpu();
        auto metas = decodeHeader(
            llvm::ArrayRef<int64_t>(header.data_ptr<int64_t>(), words),
            edge.producer, edge.consumer, m, edge.outputs.size());
        if (!metas)
          return metas.takeError();
        for (size_t k = 0; k < edge.outputs.size(); ++k) {
          ValueKind declared =
              manifest.stages[edge.producer].outputs[edge.outputs[k]].kind;
          if ((*metas)[k].kind != declared)
            return makeError(
                llvm::formatv("{0}: value {1} is a {2}, the manifest "
                              "declares {3}",
                              what, k, kindName((*metas)[k].kind),
                              kindName(declared))
                    .str());
          table[{edge.producer, edge.outputs[k]}] = (*metas)[k];
        }
      }
      for (int o : edge.outputs) {
        auto meta = metaFor(m, edge.producer, o);
        if (!meta)
          return meta.takeError();
        std::vector<at::Tensor> wire = allocateWire(**meta, device);
        for (at::Tensor &t : wire)
          if (t.numel() > 0)
            if (llvm::Error err = transport->recv(t, a.peerRank, channel, what))
              return std::move(err);
        store(edge.producer, o, m, fromWire(std::move(wire), **meta));
      }
      break;
    }
    case ActionKind::Output: {
      for (size_t k = 0; k < manifest.modelOutputs.size(); ++k) {
        const ValueRef &ref = manifest.modelOutputs[k];
        auto v = take(ref.stage, ref.output, m);
        if (!v)
          return v.takeError();
        outputParts[k].push_back(std::move(*v));
      }
      break;
    }
    case ActionKind::Backward:
    case ActionKind::SendB:
    case ActionKind::RecvB:
      return makeError("this runtime runs inference schedules only");
    }
    if (i == lastOfFirst)
      stats.firstOutputMs = msSince(start);
  }
  if (llvm::Error err = transport->flushSends())
    return std::move(err);

  // 4. Model outputs on the output rank.
  std::vector<c10::IValue> result;
  if (env.rank == placement.outputRank()) {
    for (size_t k = 0; k < outputParts.size(); ++k) {
      const ValueRef &ref = manifest.modelOutputs[k];
      auto joined = concatMicrobatches(
          outputParts[k], manifest.output(ref).kind, static_cast<int>(k));
      if (!joined)
        return joined.takeError();
      result.push_back(device.is_cpu() ? *joined : *joined);
    }
  }

  // 5. Save what was inferred.
  if (infer && cache) {
    for (const std::string &sig : distinct) {
      MetaTable kept;
      for (const auto &key : requiredMeta)
        if (tables[sig].count(key))
          kept[key] = tables[sig][key];
      cache->put(sig, std::move(kept));
    }
    if (llvm::Error err = cache->save())
      warnings() << "warning: cannot save the meta cache: "
                 << llvm::toString(std::move(err)) << "\n";
    else
      stats.cacheWritten = true;
  }
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
  int cores =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
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
  if (threads <= 0)
    threads =
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                        std::max(1, env.localWorldSize));
  at::set_num_threads(threads);
}

/// c10d and Gloo report through glog, which prints "WARNING: Logging
/// before InitGoogleLogging()" and socket diagnostics ahead of ppc's own
/// error line; unless asked for, only fatal messages pass.
void setTorchLogging(bool show) {
  FLAGS_minloglevel = show ? google::GLOG_INFO : google::GLOG_FATAL;
}
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
  auto built = buildSchedule(manifest, placement, options.schedule,
                             options.microbatches);
  if (!built)
    return built.takeError();
  schedule = std::move(*built);
  return simulateSchedule(manifest, schedule);
}

/// Loads this rank's stages (onto the transport's device).
llvm::Error Pipeline::Impl::loadStages(DeviceKind device) {
  std::string dir = manifestDirectory(manifestPath);
  for (int s : placement.stagesOf(env.rank)) {
    auto stage = Stage::load(manifest, dir, s);
    if (!stage)
      return stage.takeError();
    if (device == DeviceKind::CUDA)
      stage->module().to(transport->device());
    stages.emplace(s, std::move(*stage));
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Pipeline>>
Pipeline::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                 const RunOptions &options) {
  auto device = checkOptions(options);
  if (!device)
    return device.takeError();
  setTorchLogging(options.torchLogs);
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->options = options;
  impl->manifestPath = manifestPath.str();
  if (llvm::Error err = impl->loadManifest())
    return err;
  if (llvm::Error err = impl->planSchedule())
    return err;
  if (llvm::Error err = impl->init())
    return err;
  setThreads(options.threads, env);

  // Meet the others before loading stages: a rank that then fails to load
  // makes the others fail fast with "lost rank R" instead of waiting for a
  // rendezvous that never completes.
  auto transport = connectTransport(env, *device, options.timeout);
  if (!transport)
    return transport.takeError();
  impl->transport = std::move(*transport);
  impl->transport->setChannelCount(
      static_cast<int>(impl->schedule.edges.size()) + 1);
  if (llvm::Error err = impl->loadStages(*device))
    return err;
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

bool Pipeline::needsInputs() const { return impl_->readsInputs; }
int Pipeline::outputRank() const { return impl_->placement.outputRank(); }
int Pipeline::rank() const { return impl_->env.rank; }
bool Pipeline::outputIsTuple() const { return impl_->manifest.outputIsTuple; }
const RunStats &Pipeline::stats() const { return impl_->stats; }

void Pipeline::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->schedule, impl_->env.rank, os);
}

llvm::Expected<std::vector<c10::IValue>>
Pipeline::run(const std::vector<c10::IValue> &inputs) {
  std::vector<c10::IValue> onDevice;
  c10::Device device = impl_->transport->device();
  for (const c10::IValue &v : inputs)
    onDevice.push_back(v.isTensor() && !device.is_cpu()
                           ? c10::IValue(v.toTensor().to(device))
                           : v);
  auto result = impl_->run(onDevice);
  if (!result)
    return result.takeError();
  for (c10::IValue &v : *result)
    if (v.isTensor())
      v = v.toTensor().cpu();
  return result;
}

llvm::Error Pipeline::finish() { return impl_->transport->barrier(); }

llvm::Expected<RunStats>
runPipelineFiles(llvm::StringRef manifestPath, llvm::StringRef inputPath,
                 llvm::StringRef outputPath, const LaunchEnv &env,
                 const RunOptions &options, llvm::raw_ostream *schedule) {
  auto pipeline = Pipeline::create(manifestPath, env, options);
  if (!pipeline)
    return pipeline.takeError();
  if (schedule) {
    (*pipeline)->printSchedule(*schedule);
    schedule->flush();
  }
  std::vector<c10::IValue> inputs;
  if ((*pipeline)->needsInputs()) {
    auto loaded = loadTensors(inputPath);
    if (!loaded)
      return loaded.takeError();
    inputs = std::move(*loaded);
  }
  auto outputs = (*pipeline)->run(inputs);
  if (!outputs)
    return outputs.takeError();
  if (env.rank == (*pipeline)->outputRank())
    if (llvm::Error err =
            saveTensors(outputPath, *outputs, (*pipeline)->outputIsTuple()))
      return std::move(err);
  if (llvm::Error err = (*pipeline)->finish())
    return std::move(err);
  return (*pipeline)->stats();
}

} // namespace ppc
