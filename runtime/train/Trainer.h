//===- runtime/train/Trainer.h - Pipeline training: libppc_runtime's API --===//
//
// Trains a pipeline that `ppc split` produced, on the ranks of a
// torchrun-style launch, as Pipeline (runtime/run/Pipeline.h) runs one. Each
// rank creates one Trainer with the same manifest and options and calls
// step() once per batch; `ppc train` is a thin CLI over this header and
// docs/training.md describes it.
//
// One step:
//   1. every parameter's gradient is cleared;
//   2. the batch is split into microbatches, whose metadata is settled as in
//      Pipeline::run (inferred on the first step of a signature, or taken
//      from the meta cache; gradients have their values' metadata, so the
//      backward sends none);
//   3. the training schedule runs: forwards in training mode (BatchNorm
//      updates its running statistics per microbatch), the loss of each
//      microbatch on the stage producing the chosen model output, weighted
//      by the microbatch's rows over the batch's (the step equals one step
//      on the whole batch with the loss averaged over it), and the
//      backward over the same edges as the forward, gradients of a value
//      read by several stages summed before they travel back;
//   4. tied parameters (the manifest's tied_parameters) get the sum of the
//      gradients of all their copies, over the transport;
//   5. the gradients are clipped by their global norm (clipGradNorm), the
//      step's learning rate set (lrSchedule), and each rank's optimizer
//      (torch::optim) updates its stages' parameters
//      (runtime/train/Optimizer.h).
//
// Every error is one line; a rank that fails makes the others fail within
// the timeout with "lost rank R (...)".
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_TRAINER_H
#define PPC_RUNTIME_TRAIN_TRAINER_H

#include "runtime/link/LaunchEnv.h"
#include "runtime/train/TrainOptions.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ppc {

/// What the last step() did, on every rank (the loss on lossRank() only).
struct StepRecord {
  /// The 1-based global step.
  int step = 0;
  /// The batch's loss before the update: NaN but on lossRank().
  double loss = 0;
  /// The learning rate the step updated with.
  double lr = 0;
  /// The global gradient norm before clipping, with clipGradNorm only.
  std::optional<double> gradNorm;
  /// The batch's rows.
  int64_t samples = -1;
  double seconds = 0;
  /// TrainStats::peakBytes of the step (-1: not measured).
  int64_t peakBytes = -1;
};

/// What one rank did in its last step, for --stats.
struct TrainStats {
  int rank = 0;
  int step = 0;
  MetaSource metaSource = MetaSource::Inferred;
  /// Metadata headers this rank sent in the step (forward; the backward
  /// sends none).
  int64_t metaMessagesSent = 0;
  int64_t messagesSent = 0;
  double stepMs = 0;
  /// Per stage of this rank, the most microbatches whose activations
  /// (forward graph) it held at once.
  std::map<int, int> peakActivations;
  bool cacheWritten = false;
  /// The links the step's messages took, as RunStats::link.
  std::string link;
  // Data parallel
  /// This rank's replica when the job has several (else -1, not printed).
  int replica = -1;
  /// Milliseconds the step waited for the gradients' all-reduce over the
  /// replicas after its schedule (with replicas only): all of it with
  /// PPC_OVERLAP_ALLREDUCE=0, else the part the backward did not hide.
  double allReduceMs = 0;

  /// Peak memory: the most host bytes LibTorch held at once
  /// during the step above what it held at the step's start
  /// (runtime/platform/MemoryMeter.h); -1 unless the meter is installed.
  int64_t peakBytes = -1;

  /// "stats: rank=0 step=1 meta=inferred meta_messages_sent=2
  /// messages_sent=30 step_ms=12.500 peak_activations=0:4,2:3
  /// cache_written=1 peak_rss_mb=512.0 rss_anon_mb=300.1 link=shm
  /// blas=openblas:Cooperlake" (the process's memory as RunStats::line()
  /// gives it; link= only when
  /// the step sent messages; with replicas, " replica=D allreduce_ms=X"
  /// follow; then " peak_bytes=81920" when the memory meter is installed).
  std::string line() const;
};

class Trainer {
public:
  /// As Pipeline::create, and: an option out of range (an OptionError
  /// naming the TrainOptions field and its rule: "lr 0 is not a finite
  /// number above 0", "momentum nan is not a finite number of at least 0";
  /// likewise weightDecay, lossOutput; clipGradNorm and lrSchedule as
  /// checkOptimizerOptions(), runtime/train/Optimizer.h, says);
  /// a loss output that is a model input or not a Tensor; a schedule that
  /// does not fit the placement; autoSchedule with a schedule CSV, or with
  /// no schedule that fits; a schedule CSV that is unreadable, names
  /// stages it cannot place, or would deadlock (its first stuck action
  /// named). A schedule CSV also places the stages: each on the rank whose
  /// row runs it.
  static llvm::Expected<std::unique_ptr<Trainer>>
  create(llvm::StringRef manifestPath, const LaunchEnv &env,
         const TrainOptions &options);

  ~Trainer();

  /// Whether step() reads `inputs` / `target` on this rank.
  bool needsInputs() const;
  bool needsTargets() const;
  /// The rank that computes the loss (of the stage producing the loss
  /// output).
  int lossRank() const;
  int rank() const;
  // Data parallel
  /// This rank's replica (0..replicas()-1) and the number of replicas
  /// (TrainOptions::dataParallel): 0 and 1 without data parallelism.
  /// rank() and lossRank() are ranks of this replica's pipeline; jobRank()
  /// is this rank's RANK (replica() * pipeline ranks + rank()).
  int replica() const;
  int replicas() const;
  int jobRank() const;
  /// Lowercase hex SHA-256 of this rank's parameters (bytes in stage and
  /// parameter order): equal on the replicas of a rank whose weights are
  /// bitwise equal.
  std::string weightsSha256() const;
  // --- end data parallel
  /// The number of stages of the manifest (on every rank).
  int stageCount() const;
  /// How many inputs the model takes, and their names (loadTrainingData's
  /// `modelInputs` and `inputNames`).
  size_t modelInputCount() const;
  std::vector<std::string> modelInputNames() const;

  /// One optimizer step over one batch: `inputs` are the model inputs (as
  /// for Pipeline::run, read where needsInputs()), `target` the loss's
  /// target with the batch along dim 0 (read where needsTargets()).
  /// Returns the batch's loss before the update on lossRank(), NaN
  /// elsewhere. Errors: Pipeline::run's; a target whose rows differ from
  /// the batch's ("the target has 6 rows, the batch 8"); a target that does
  /// not fit the loss ("cannot compute the mse loss of microbatch 0: the
  /// output is float32[2,4], the target float32[2,3]; mse needs equal
  /// shapes"); a NaN or infinite loss ("step 3: the loss is nan"). With
  /// replicas (TrainOptions::dataParallel), the loss returned is the whole
  /// batch's (on every replica's lossRank()), and: a batch of fewer rows
  /// than replicas; "microbatches 3 exceeds the smallest replica's slice
  /// of the batch (2 of 5 rows over dataParallel 2)" (options named by
  /// optionName(), lib/OptionName.h).
  llvm::Expected<double> step(const std::vector<c10::IValue> &inputs,
                              const at::Tensor &target);

  /// The loss of one batch with every stage in eval mode (BatchNorm's
  /// running statistics, no dropout), the model left as it was: the
  /// forwards of the training schedule run over the batch without a graph
  /// (RankContext::prepareEvaluation: no backward, the parameters' gradients
  /// untouched), the loss stage computes the loss in its F as the training
  /// schedule's B would, and the stages go back to training mode. Every
  /// rank must call it. Returns
  /// the batch's mean loss on lossRank(), NaN elsewhere. Errors: step()'s.
  llvm::Expected<double> evaluate(const std::vector<c10::IValue> &inputs,
                                  const at::Tensor &target);
  /// How many terms the mean loss over `target` averages, to weigh batches
  /// in a set's mean: the labels that count for a token loss (Loss.h), the
  /// rows otherwise.
  int64_t lossTerms(const at::Tensor &target) const;

  /// This rank's parameters, named "stage S: path" ("stage 1: fc.weight").
  std::vector<std::pair<std::string, at::Tensor>> namedParameters() const;

  /// Writes this rank's parameter gradients of the last step to `path`
  /// (atomically), as a dict from the parameter's path in the original
  /// model ("layers.0.weight") to its gradient, which Python's torch.load
  /// reads; a parameter without a gradient is left out. Tied copies hold the
  /// summed gradient. Errors: the file cannot be written.
  llvm::Error saveGradients(llvm::StringRef path) const;

  /// Writes the trained stage files (in the mode the model was saved in)
  /// and a manifest of the same layout to `dir`, atomically as a whole
  /// (docs/outputs.md): rank 0 stages a directory beside `dir`, every rank
  /// writes its stages there, and rank 0 writes the manifest and switches
  /// the directory in only once every rank has written its part; on any
  /// failure `dir` stays as it was. Every rank must call it (with
  /// replicas, replica 0's ranks write and the others wait for them). `ppc
  /// run`, `ppc train` and `ppc join` read the result. Errors (on every rank,
  /// the failing rank's own first): `dir` holds something the run reads
  /// ("save 'out' holds the manifest ('out/manifest.json'); refusing to
  /// overwrite it", OutputGuard); an existing non-empty `dir` that is not
  /// an earlier ppc output (checkEarlierOutput); a rank that cannot see the
  /// staged directory or cannot write its files ("the save failed on rank
  /// 0: rank 1 could not save: cannot write 'out/stage_1.pt': No space left
  /// on device"); a lost peer.
  llvm::Error save(llvm::StringRef dir);

  // Checkpoints
  /// Writes the checkpoint after stepsDone() steps to
  /// `dir`/step-<8-digit step> (runtime/train/Checkpoint.h: save()'s stages and
  /// manifest, each stage's optimizer state by parameter path, each rank's
  /// generators, and checkpoint.json last), atomically as save() writes
  /// (a rank killed at any moment leaves no part that resume() takes);
  /// before, rank 0 removes the parts killed runs left in `dir`; after,
  /// the complete checkpoints older than the `keep` newest. Every rank
  /// must call it. Errors: save()'s ("the save failed on rank 0: ...").
  llvm::Error saveCheckpoint(llvm::StringRef dir, int keep);
  /// Continues from the newest complete checkpoint in `dir` (or `dir`
  /// itself, one step directory), verified by rank 0: every rank loads its
  /// stages' parameters and buffers, their optimizer state (by stage and
  /// parameter path: any schedule, placement or microbatch count) and its
  /// generators, and stepsDone() becomes the checkpoint's step. Every rank
  /// must call it, before step(). Returns the checkpoint's path. Errors:
  /// findNewestCheckpoint's (a corrupt newest one is refused); "the
  /// checkpoint 'ck/step-00000004' has 4 stages, the manifest 2"; another
  /// optimizer; stage tensors that differ from the manifest's; a lost peer.
  llvm::Expected<std::string> resume(llvm::StringRef dir);
  /// The steps done: step()s run, plus those of a resumed checkpoint.
  int stepsDone() const;

  /// Waits until every rank has called finish(). Errors: "lost rank R".
  llvm::Error finish();

  /// This rank's schedule, one action per line.
  void printSchedule(llvm::raw_ostream &os) const;
  /// With TrainOptions::autoSchedule, the one line that says which
  /// schedule was picked and the simulated steps of the others; else empty.
  const std::string &scheduleNote() const;

  const TrainStats &stats() const;
  /// The last step(), or all zeros before the first.
  const StepRecord &lastStep() const;

private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_TRAINER_H
