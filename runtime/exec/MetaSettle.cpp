//===- runtime/exec/MetaSettle.cpp ----------------------------------------===//
//
// Where a run's boundary metadata comes from.
// Where a run's boundary metadata comes from
//
// This file implements MetaSettler (see MetaSettle.h): sharing the microbatch
// signatures, the start-up agreement, the user's metadata, and the meta
// cache's loading, saving and removal when it lied.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/MetaSettle.h"

#include "lib/Error.h"
#include "lib/SafeRead.h"
#include "runtime/exec/StatusRecord.h"
#include "runtime/link/Collectives.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"

#include <limits>
#include <set>

namespace ppc {

char StaleCacheError::ID;

namespace {
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
                   const std::vector<Signature> &signatures, int producer,
                   const std::vector<int> &outputs) {
  std::vector<int64_t> words;
  std::string bytes;
  for (const Signature &sig : signatures) {
    bytes += sig.text;
    bytes += '\n';
    const MetaTable &table = tables.at(sig.text);
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
} // namespace

int inputRootOf(const Manifest &manifest, const Placement &placement) {
  for (const StageInfo &s : manifest.stages)
    for (const StageInput &in : s.inputs)
      if (in.source.isModelInput())
        return placement.rankOf(s.index);
  return -1;
}

MetaSettler::MetaSettler(MetaScope scope) : scope_(std::move(scope)) {
  const Manifest &manifest = *scope_.manifest;
  const Placement &placement = *scope_.placement;
  const int rank = scope_.rank;
  inputRoot_ = inputRootOf(manifest, placement);
  std::set<std::pair<int, int>> required;
  for (int s : placement.stagesOf(rank)) {
    for (const StageInput &in : manifest.stages[s].inputs)
      readsInputs_ |= in.source.isModelInput();
    for (size_t o = 0; o < manifest.stages[s].outputs.size(); ++o)
      required.insert({s, static_cast<int>(o)});
  }
  for (const Edge &e : scope_.schedule->edges)
    if (placement.rankOf(e.consumer) == rank &&
        placement.rankOf(e.producer) != rank)
      for (int o : e.outputs)
        required.insert({e.producer, o});
  required_.assign(required.begin(), required.end());
}

std::string MetaSettler::cacheEntry(const Signature &signature) const {
  return run_->training ? "train " + signature.text : signature.text;
}

/// Reads the user metadata: the --input-meta file ({"stages": [{"outputs":
/// [meta, ...]}, ...]}), or else the manifest's per-stage "meta" objects
/// ({"outputs": [...]}). Both use the one metadata JSON reader.
llvm::Expected<std::map<int, std::vector<ValueMeta>>>
MetaSettler::userGiven(std::string &source) {
  std::map<int, std::vector<ValueMeta>> given;
  const std::string &path = scope_.inputMetaPath;
  if (path.empty()) {
    source = "the manifest's stage meta";
    for (const StageInfo &s : scope_.manifest->stages) {
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
  source = "input meta '" + path + "'";
  auto buffer = readFileBounded(path, kMaxUserMetaBytes, "input meta");
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
/// of -1 becomes the signature's rows), validated and checked against the
/// manifest's kinds.
llvm::Expected<std::map<std::string, MetaTable>>
MetaSettler::userTables(const std::vector<Signature> &signatures) {
  std::string source;
  auto given = userGiven(source);
  if (!given)
    return given.takeError();
  const Manifest &manifest = *scope_.manifest;
  std::map<std::string, MetaTable> tables;
  for (const Signature &sig : signatures) {
    MetaTable &table = tables[sig.text];
    for (const auto &[stage, output] : required_) {
      auto it = given->find(stage);
      if (it == given->end() || output >= static_cast<int>(it->second.size()))
        return makeError(
            llvm::formatv("{0} has no metadata for stage {1} output {2}",
                          source, stage, output)
                .str());
      ValueMeta meta = it->second[output];
      if (llvm::Error err = resolveMeta(meta, sig.rows))
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

llvm::Expected<std::vector<Signature>> MetaSettler::shareSignatures(
    const std::vector<std::vector<c10::IValue>> &microbatches, int count,
    bool waitForSends) {
  std::vector<std::string> texts(count);
  if (readsInputs_) {
    if (static_cast<int>(microbatches.size()) != count)
      return makeError(llvm::formatv("internal error: {0} microbatches for a "
                                     "schedule of {1}",
                                     microbatches.size(), count)
                           .str());
    for (int m = 0; m < count; ++m)
      texts[m] = Signature::of(microbatches[m]).text;
  }
  std::string blob = llvm::join(texts, "\n");
  if (llvm::Error err =
          broadcastBytes(*scope_.transport, blob, inputRoot_,
                         "the microbatch signatures", waitForSends))
    return beforeRun(std::move(err), scope_.transport->globalRank(scope_.rank));
  llvm::SmallVector<llvm::StringRef, 8> parts;
  llvm::StringRef(blob).split(parts, '\n');
  if (static_cast<int>(parts.size()) != count)
    return makeError(llvm::formatv("rank {0} shared {1} microbatch signatures, "
                                   "expected {2}",
                                   inputRoot_, parts.size(), count)
                         .str());
  std::vector<Signature> signatures;
  for (int m = 0; m < count; ++m) {
    if (readsInputs_ && parts[m] != texts[m])
      return makeError(
          llvm::formatv("the input on rank {0} differs from the input "
                        "on rank {1} (microbatch {2}: {3} vs {4})",
                        scope_.rank, inputRoot_, m, texts[m], parts[m])
              .str());
    signatures.push_back(Signature::parse(parts[m]));
  }
  return signatures;
}

bool MetaSettler::loadCache(const std::vector<Signature> &signatures) {
  const Manifest &manifest = *scope_.manifest;
  MetaCacheKey key;
  key.manifestSha256 = scope_.manifestSha256;
  key.stages = scope_.stageHashes;
  key.layout = scope_.placement->describe();
  key.precision = scope_.precision;
  cachePath_ =
      MetaCache::filePath(scope_.cacheDir, scope_.rank, scope_.worldSize);
  cacheMiss_.clear();
  cache_ = MetaCache::load(cachePath_, key, cacheMiss_);
  cacheMissRoutine_ = cache_->missIsRoutine();
  if (!cacheMiss_.empty())
    return false;
  for (const Signature &sig : signatures) {
    const MetaTable *table = cache_->find(cacheEntry(sig), required_);
    if (!table)
      return false;
    for (const auto &[key, meta] : *table) {
      const StageInfo *stage =
          key.first < static_cast<int>(manifest.stages.size())
              ? &manifest.stages[key.first]
              : nullptr;
      if (!stage || key.second >= static_cast<int>(stage->outputs.size()) ||
          stage->outputs[key.second].kind != meta.kind) {
        cacheMiss_ = llvm::formatv("meta cache '{0}' does not match the "
                                   "manifest (stage {1} output {2})",
                                   cachePath_, key.first, key.second);
        cacheMissRoutine_ = false;
        return false;
      }
    }
  }
  return true;
}

llvm::Expected<std::map<std::string, MetaTable>>
MetaSettler::agree(const std::vector<Signature> &signatures) {
  const Manifest &manifest = *scope_.manifest;
  const Placement &placement = *scope_.placement;
  const int rank = scope_.rank;
  bool userRequested = !scope_.inputMetaPath.empty();
  for (const StageInfo &s : manifest.stages)
    userRequested |= s.meta.has_value();
  std::optional<std::map<std::string, MetaTable>> user;
  if (userRequested) {
    auto t = userTables(signatures);
    if (!t)
      return t.takeError();
    user = std::move(*t);
  }
  bool cacheComplete = scope_.useCache && !user && loadCache(signatures);

  // One agreement: three flags (the third, negated, says whether any rank
  // has a complete cache), then per edge between ranks the smallest
  // digest and the smallest negated digest of what its producer rank will
  // send and its consumer rank expects from the cache. The two agree iff
  // every rank involved holds the same metadata for the edge; ranks not
  // on the edge (or without a complete cache) pass the neutral maximum.
  constexpr int64_t kNeutral = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> agreed{user ? 1 : 0, cacheComplete ? 1 : 0,
                              cacheComplete ? -1 : 0};
  std::vector<const Edge *> remote;
  std::map<std::string, MetaTable> cached;
  if (cacheComplete)
    for (const Signature &sig : signatures)
      cached[sig.text] = *cache_->find(cacheEntry(sig), required_);
  for (const Edge &e : run_->edges) {
    int from = placement.rankOf(e.producer), to = placement.rankOf(e.consumer);
    if (from == to)
      continue;
    remote.push_back(&e);
    if (cacheComplete && (rank == from || rank == to)) {
      int64_t d = edgeDigest(cached, signatures, e.producer, e.outputs);
      agreed.insert(agreed.end(), {d, -d});
    } else {
      agreed.insert(agreed.end(), {kNeutral, kNeutral});
    }
  }
  if (llvm::Error err = agreeMin(*scope_.transport, agreed))
    return err;
  if (agreed[0]) {
    source_ = MetaSource::User;
    return std::move(*user);
  }
  if (user)
    return makeError("user metadata was given on some ranks only");
  source_ = MetaSource::Inferred;
  if (!agreed[1]) {
    reportCacheMiss(/*othersHaveCache=*/agreed[2] < 0);
    return std::map<std::string, MetaTable>();
  }
  for (size_t k = 0; k < remote.size(); ++k) {
    int64_t lowest = agreed[3 + 2 * k], highest = -agreed[4 + 2 * k];
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
  source_ = MetaSource::Cache;
  return cached;
}

void MetaSettler::reportCacheMiss(bool othersHaveCache) {
  if (cacheMiss_.empty())
    return;
  // No cache anywhere yet, or every rank's outdated by a re-split: the
  // normal first run, one note for the job. A file missing beside others'
  // complete ones, or one that is corrupt, is worth each rank's warning.
  if (cacheMissRoutine_ && !othersHaveCache) {
    if (scope_.rank == 0)
      warnings() << "note: " << cacheMiss_
                 << "; inferring shapes (saved there for later runs)\n";
    return;
  }
  warnings() << "warning: " << cacheMiss_ << "; inferring shapes\n";
}

llvm::Error MetaSettler::classify(llvm::Error err) {
  return llvm::handleErrors(
      std::move(err), [&](std::unique_ptr<MetaMismatchError> mismatch) {
        std::string message = mismatch->message();
        if (source_ != MetaSource::Cache)
          return llvm::Error(std::move(mismatch));
        std::error_code removed = llvm::sys::fs::remove(cachePath_);
        return llvm::Error(llvm::make_error<StaleCacheError>(
            message + " (the meta cache '" + cachePath_ + "' is wrong; " +
                (removed ? "remove it and run again to infer)"
                         : "it was removed; run again to infer)"),
            cachePath_));
      });
}

void MetaSettler::saveCache(const std::vector<Signature> &signatures) {
  for (const Signature &sig : signatures) {
    MetaTable kept;
    const MetaTable &table = known()[sig.text];
    for (const auto &key : required_) {
      auto it = table.find(key);
      if (it != table.end())
        kept[key] = it->second;
    }
    cache_->put(cacheEntry(sig), std::move(kept));
  }
  if (llvm::Error err = cache_->save())
    warnings() << "warning: cannot save the meta cache: "
               << llvm::toString(std::move(err)) << "\n";
  else
    cacheWritten_ = true;
}

llvm::Error MetaSettler::prepare(const std::vector<c10::IValue> &inputs,
                                 ExecutorStep &step, const Schedule *run) {
  const int count = (run ? run : scope_.schedule)->microbatches;
  std::vector<std::vector<c10::IValue>> microbatches;
  if (readsInputs_) {
    auto split =
        splitMicrobatches(inputs, scope_.manifest->modelInputs.size(), count);
    if (!split)
      return split.takeError();
    microbatches = std::move(*split);
  }
  return prepareMicrobatches(std::move(microbatches), count, step, run);
}

llvm::Error MetaSettler::prepareMicrobatches(
    std::vector<std::vector<c10::IValue>> microbatches, int count,
    ExecutorStep &step, const Schedule *run, bool waitForSignatureSends) {
  run_ = run ? run : scope_.schedule;
  // 1. Microbatches and their signatures, shared by the input root.
  auto shared = shareSignatures(microbatches, count, waitForSignatureSends);
  if (!shared)
    return shared.takeError();
  step.microbatches = std::move(microbatches);
  step.signatures = std::move(*shared);
  step.tables = &known();
  step.inferring.assign(count, false);
  fresh_.clear();
  for (const Signature &sig : step.signatures)
    if (!known().count(sig.text) && !llvm::is_contained(fresh_, sig))
      fresh_.push_back(sig);
  if (fresh_.empty())
    return llvm::Error::success();

  // 2. Where the metadata of new signatures comes from: all ranks agree.
  auto agreed = agree(fresh_);
  if (!agreed)
    return agreed.takeError();
  for (auto &[sig, table] : *agreed)
    known()[sig] = std::move(table);
  if (source_ == MetaSource::Inferred) {
    std::vector<Signature> seen;
    for (int m = 0; m < count; ++m)
      if (llvm::is_contained(fresh_, step.signatures[m]) &&
          !llvm::is_contained(seen, step.signatures[m])) {
        seen.push_back(step.signatures[m]);
        step.inferring[m] = true;
      }
  }
  return llvm::Error::success();
}

void MetaSettler::finish() {
  if (!fresh_.empty() && source_ == MetaSource::Inferred && cache_)
    saveCache(fresh_);
  fresh_.clear();
}

} // namespace ppc
