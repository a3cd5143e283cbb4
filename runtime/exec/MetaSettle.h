//===- runtime/exec/MetaSettle.h ------------------------------------------===//
//
// Where a run's boundary metadata comes from.
//
// Settles the boundary metadata of every microbatch signature a rank meets,
// once per signature and rank context (runtime/exec/RankContext.h): the input
// root shares the microbatch signatures, then all ranks agree in one round
// whether the metadata is the user's (--input-meta or the manifest's stage
// meta), the meta cache's (every rank's file complete and agreeing, edge by
// edge, with the peers'), or inferred by the executor from the first microbatch
// of the signature. A later run whose signatures are all known needs no
// agreement and no metadata messages. Every rank sees the same signatures, so
// every rank takes the same decision.
//
// A produced value that contradicts metadata this run did not infer is a
// MetaMismatchError (runtime/exec/TensorMeta.h); when the metadata came from
// the meta cache, the cache lied: this rank's file is removed and the error
// becomes a StaleCacheError, so the next run infers. Internal to
// libppc_runtime.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_METASETTLE_H
#define PPC_RUNTIME_EXEC_METASETTLE_H

#include "lib/Error.h"
#include "lib/Manifest.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/MetaCache.h"
#include "runtime/exec/Microbatch.h"
#include "runtime/exec/RunOptions.h"
#include "runtime/exec/TensorMeta.h"
#include "runtime/link/Transport.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ppc {

/// A meta cache file was wrong: a value this rank produced contradicts the
/// metadata the cache gave. The file has been removed (or could not be);
/// the message says which and that the next run infers.
class StaleCacheError : public llvm::ErrorInfo<StaleCacheError, TypedError> {
public:
  static char ID;
  StaleCacheError(std::string message, std::string path)
      : message_(std::move(message)), path_(std::move(path)) {}
  /// The cache file.
  const std::string &path() const { return path_; }
  std::string describe() const override { return message_; }

private:
  std::string message_;
  std::string path_;
};

/// What the settler needs to know of its rank's job; fixed for its life.
struct MetaScope {
  const Manifest *manifest = nullptr;
  /// The SHA-256 of the manifest's bytes as loaded, and of this rank's
  /// stage files (stage index, hash): the meta cache key.
  std::string manifestSha256;
  std::vector<std::pair<int, std::string>> stageHashes;
  const Placement *placement = nullptr;
  const Schedule *schedule = nullptr;
  Transport *transport = nullptr;
  int rank = 0;
  int worldSize = 1;
  /// The meta cache directory; whether the cache may be used; a user meta
  /// file (empty: the manifest's stage meta, if any).
  std::string cacheDir;
  bool useCache = true;
  std::string inputMetaPath;
  /// Where warnings go.
  llvm::raw_ostream *warnings = nullptr;
  /// The meta cache key's precision ("bf16" under RunOptions::precision
  /// bf16, whose boundary dtypes differ; "" for fp32).
  std::string precision;
};

/// The lowest rank whose stages read model inputs, or -1 when no stage
/// reads one.
int inputRootOf(const Manifest &manifest, const Placement &placement);

class MetaSettler {
public:
  explicit MetaSettler(MetaScope scope);

  /// Whether this rank's stages read model inputs; the input root.
  bool readsInputs() const { return readsInputs_; }
  int inputRoot() const { return inputRoot_; }

  /// Splits `inputs` into microbatches (on ranks that read them), shares
  /// their signatures from the input root, and settles the metadata of each
  /// signature not known yet (agreement, then the cache, the user or
  /// inference); fills `step`'s microbatches, signatures, tables and
  /// inferring flags. Errors: splitMicrobatches's; input ranks that see
  /// different inputs; a user meta file that is unreadable or incomplete;
  /// user metadata on some ranks only; "lost rank R (...)".
  ///
  /// `run` is the schedule the step executes (null: the job's own). Its
  /// mode decides which tables the step gets: a training schedule's forward
  /// values require grad where an inference or evaluation schedule's do not
  /// (Schedule::evaluation, over the training placement), so the two modes
  /// settle, keep and cache their metadata apart.
  llvm::Error prepare(const std::vector<c10::IValue> &inputs,
                      ExecutorStep &step, const Schedule *run = nullptr);
  /// The same for `count` microbatches already split (a streaming window
  /// of several batches, Pipeline::submit): `microbatches` holds them on
  /// ranks that read model inputs and is ignored elsewhere. Without
  /// `waitForSignatureSends` the input root does not wait for its
  /// signature messages to be received (broadcastBytes()'s waitForSends;
  /// the executor's final flush does), so that it can start a window while
  /// the other ranks still run the previous one. Errors: prepare()'s but
  /// splitMicrobatches's; fewer or more than `count` microbatches on a rank
  /// that reads inputs.
  llvm::Error
  prepareMicrobatches(std::vector<std::vector<c10::IValue>> microbatches,
                      int count, ExecutorStep &step,
                      const Schedule *run = nullptr,
                      bool waitForSignatureSends = true);

  /// After a successful run: saves the metadata prepare() left to infer to
  /// the meta cache (a warning when it cannot be written).
  void finish();

  /// `err` from the executor, with a MetaMismatchError against cached
  /// metadata turned into a StaleCacheError (the file removed).
  llvm::Error classify(llvm::Error err);

  /// Where the metadata of the last prepare()'s new signatures came from,
  /// and whether finish() wrote the cache file.
  MetaSource source() const { return source_; }
  bool cacheWritten() const { return cacheWritten_; }
  void clearCacheWritten() { cacheWritten_ = false; }

private:
  llvm::raw_ostream &warnings() { return *scope_.warnings; }
  /// The name of `signature`'s entry in the meta cache: training's forward
  /// values require grad where inference's do not, so they are apart (by
  /// the mode of run_).
  std::string cacheEntry(const Signature &signature) const;
  llvm::Expected<std::vector<Signature>>
  shareSignatures(const std::vector<std::vector<c10::IValue>> &microbatches,
                  int count, bool waitForSends);
  llvm::Expected<std::map<int, std::vector<ValueMeta>>>
  userGiven(std::string &source);
  llvm::Expected<std::map<std::string, MetaTable>>
  userTables(const std::vector<Signature> &signatures);
  bool loadCache(const std::vector<Signature> &signatures);
  /// Prints why loadCache() found no usable file, once every rank's outcome
  /// is known: a routine miss on every rank is one note from rank 0.
  void reportCacheMiss(bool othersHaveCache);
  llvm::Expected<std::map<std::string, MetaTable>>
  agree(const std::vector<Signature> &signatures);
  void saveCache(const std::vector<Signature> &signatures);

  MetaScope scope_;
  bool readsInputs_ = false;
  int inputRoot_ = 0;
  /// The metadata keys this rank needs: its stages' outputs and the values
  /// it receives.
  std::vector<std::pair<int, int>> required_;
  /// The schedule of the last prepare(): the job's or one it was given.
  const Schedule *run_ = nullptr;
  /// The metadata of every signature settled so far, by whether its runs
  /// train (run_->training), then by signature text.
  std::map<bool, std::map<std::string, MetaTable>> known_;
  /// known_ of run_'s mode.
  std::map<std::string, MetaTable> &known() { return known_[run_->training]; }
  /// The signatures the last prepare() settled anew.
  std::vector<Signature> fresh_;
  std::optional<MetaCache> cache_;
  std::string cachePath_;
  /// Why the last loadCache() found no usable cache file ("" if it did),
  /// and whether that is routine (MetaCache::missIsRoutine): reported by
  /// agree() once every rank's outcome is known.
  std::string cacheMiss_;
  bool cacheMissRoutine_ = false;
  MetaSource source_ = MetaSource::Inferred;
  bool cacheWritten_ = false;
};

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_METASETTLE_H
