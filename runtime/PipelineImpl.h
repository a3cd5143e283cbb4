//===- runtime/PipelineImpl.h - Pipeline's internals ------------*- C++ -*-===//
//
// The state behind Pipeline (runtime/Pipeline.h), shared with Trainer
// (runtime/Trainer.h), which runs the same set-up, agreement and executor
// with a training schedule. Internal to libppc_runtime: not installed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PIPELINEIMPL_H
#define PPC_RUNTIME_PIPELINEIMPL_H

#include "lib/Manifest.h"
#include "lib/Stage.h"
#include "runtime/Executor.h"
#include "runtime/MetaCache.h"
#include "runtime/Pipeline.h"
#include "runtime/Schedule.h"
#include "runtime/TensorMeta.h"
#include "runtime/Trace.h"
#include "runtime/Transport.h"

#include "llvm/Support/raw_ostream.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

struct Pipeline::Impl {
  LaunchEnv env;
  RunOptions options;
  /// Training (Trainer): the schedule has backward actions, stages run in
  /// training mode, the loss is computed on `loss->stage`, and meta cache
  /// entries are kept apart from inference's (their tensors require grad).
  std::optional<LossSpec> loss;
  bool training() const { return loss.has_value(); }
  /// The meta cache entry of a signature: training's forward values
  /// require grad where inference's do not, so they have entries of their
  /// own ("train " + signature).
  std::string cacheEntry(const std::string &signature) const {
    return training() ? "train " + signature : signature;
  }
  /// Training: a schedule CSV (PyTorch's layout) to run instead of
  /// options.schedule's.
  std::string scheduleCSV;
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
  /// What the executor needs; its uses of each value are set by init().
  ExecutorPlan plan;
  /// The metadata keys this rank needs: its stages' outputs and the values
  /// it receives.
  std::vector<std::pair<int, int>> requiredMeta;

  llvm::raw_ostream &warnings() {
    return options.warnings ? *options.warnings : llvm::errs();
  }

  /// The actions of every run, when RunOptions::tracePath asks for them,
  /// and how many runs there were.
  std::optional<TraceRecorder> trace;
  int64_t runs = 0;
  /// Ships every rank's events to rank 0, which writes the trace file.
  llvm::Error writeTrace();
  /// The metadata of every signature settled so far, on this rank.
  std::map<std::string, MetaTable> known;
  /// The meta cache of this run, when one is used, and its file.
  std::optional<MetaCache> cache;
  std::string cachePath;

  /// Loads the manifest and stages, builds and simulates the schedule and
  /// meets the other ranks (Pipeline::create's errors).
  static llvm::Expected<std::unique_ptr<Impl>>
  create(llvm::StringRef manifestPath, const LaunchEnv &env,
         const RunOptions &options, std::optional<LossSpec> loss,
         std::string scheduleCSV);
  llvm::Error init();
  /// The meta cache directory of this run.
  std::string metaCacheDir() const;
  /// Per stage, the JSON metadata of its outputs that the user gave, and a
  /// name for that source in messages.
  llvm::Expected<std::map<int, std::vector<ValueMeta>>>
  userGiven(std::string &source);
  llvm::Error loadManifest();
  llvm::Error planSchedule();
  llvm::Error loadStages(DeviceKind device);
  llvm::Expected<std::map<std::string, MetaTable>>
  userTables(const std::vector<std::string> &signatures);
  /// Splits the inputs (on ranks that read them) and shares the input
  /// root's signatures; returns the signature of each microbatch.
  llvm::Expected<std::vector<std::string>>
  shareSignatures(const std::vector<c10::IValue> &inputs,
                  std::vector<std::vector<c10::IValue>> &microbatches);
  /// Loads this rank's meta cache and returns whether it holds, for every
  /// signature, every value this rank needs, with the manifest's kinds.
  bool loadCache(const std::vector<std::string> &signatures);
  /// The start-up agreement: where the metadata comes from, on all ranks.
  llvm::Expected<std::map<std::string, MetaTable>>
  agreeOnMetadata(const std::vector<std::string> &signatures);
  /// An error for a produced value that contradicts cached metadata: the
  /// cache lied, so this rank's file is removed and the next run infers.
  llvm::Error cacheWasWrong(llvm::Error err);
  void saveCache(const std::vector<std::string> &signatures,
                 std::map<std::string, MetaTable> &tables);

  /// Splits `inputs` into microbatches (on ranks that read them), shares
  /// their signatures, and settles the metadata of each new signature
  /// (agreement, then the cache, the user or inference). `fresh` receives
  /// the signatures this step infers or loads.
  llvm::Error prepareStep(const std::vector<c10::IValue> &inputs,
                          ExecutorStep &step, std::vector<std::string> &fresh);
  /// Saves the metadata of `fresh` signatures after a run that inferred it.
  void finishStep(const std::vector<std::string> &fresh);
  llvm::Expected<std::vector<c10::IValue>>
  run(const std::vector<c10::IValue> &inputs);
};

/// `value` with every tensor it holds (in lists and tuples too) on
/// `device`. Throws what LibTorch throws (a device copy failing).
c10::IValue valueOnDevice(const c10::IValue &value, c10::Device device);

/// valueOnDevice() of each of `values`. Errors: "cannot move WHAT to
/// cuda:0: ..." with the first line of LibTorch's message.
llvm::Expected<std::vector<c10::IValue>>
valuesOnDevice(const std::vector<c10::IValue> &values, c10::Device device,
               const std::string &what);

} // namespace ppc

#endif // PPC_RUNTIME_PIPELINEIMPL_H
