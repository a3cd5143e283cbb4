//===- ppc/Trainer.h - Pipeline training from a C++ program -----*- C++ -*-===//
//
// Part of libppc_runtime's public API (ppc/ppc.h): trains a pipeline that
// `ppc split` produced, on the ranks of a torchrun-style launch, as `ppc
// train` does (docs/training.md). Each rank constructs one Trainer with the
// same manifest and options, calls step() once per batch, optionally
// save(), and finish() at the end. Errors are thrown as ppc::api::Error
// (ppc/Error.h).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PUBLIC_TRAINER_H
#define PPC_PUBLIC_TRAINER_H

#include "ppc/Error.h"
#include "ppc/Pipeline.h"

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ppc {
class Trainer;
} // namespace ppc

namespace ppc::api {

/// How a pipeline trains; the fields mirror `ppc train`'s flags. (Those of
/// the internal options' names and types are copied by the list in
/// runtime/train/TrainOptions.def.)
struct TrainOptions {
  /// Microbatches, schedule, device, timeout, meta cache, threads, trace:
  /// as for Pipeline, where every schedule of `ppc train --schedule` is
  /// allowed ("gpipe", "1f1b", "interleaved-1f1b", ...).
  RunOptions run;
  /// "mse", "cross_entropy" or "causal_lm", over model output `lossOutput`
  /// (a tensor). cross_entropy reads class scores from the last dimension
  /// when the target is the output's shape without it (logits [B, T, V],
  /// labels [B, T]); causal_lm is transformers' ForCausalLMLoss (labels
  /// shifted by one). Over class indices both are the mean over the batch's
  /// labels that are not `ignoreIndex`, wherever they fall among the
  /// microbatches (docs/training.md).
  std::string loss = "mse";
  int lossOutput = 0;
  int64_t ignoreIndex = -100;
  /// "sgd" (with momentum and weight decay), "adam" or "adamw" (learning
  /// rate and weight decay, decoupled for adamw; torch::optim's other
  /// defaults).
  std::string optimizer = "sgd";
  /// Learning rate (finite, > 0), momentum and weight decay (finite, >= 0).
  double lr = 0.01;
  double momentum = 0;
  double weightDecay = 0;
  /// A schedule in the CSV layout of PyTorch's pipelining runtime to run
  /// instead of run.schedule's (docs/schedules.md); empty for none.
  std::string scheduleCSVPath;
  /// Pick the schedule from the manifest's stage costs instead of
  /// run.schedule (scheduleNote() says which and why); with
  /// maxActivations, leave out schedules that hold more microbatches'
  /// activations at once on some rank.
  bool autoSchedule = false;
  std::optional<int> maxActivations;

  // Clipping and learning-rate schedules
  /// Clip the gradients to this global L2 norm (>= 0; 0: off), as
  /// torch.nn.utils.clip_grad_norm_ on the unsplit model.
  double clipGradNorm = 0;
  /// "constant", "linear" or "cosine" after `warmupSteps` of linear
  /// warm-up, over `steps` steps down to `minLr` (docs/training.md); each
  /// step's rate depends on its global step only.
  std::string lrSchedule = "constant";
  int warmupSteps = 0;
  double minLr = 0;
  int steps = 1;

  // Data parallel
  /// `ppc train --data-parallel`: the WORLD_SIZE ranks run this many
  /// replicas of one pipeline (it must divide WORLD_SIZE; docs/training.md
  /// gives the rank layout), each on its slice of every batch, with each
  /// stage's gradients summed over its replicas: a step equals one on the
  /// whole batch.
  int dataParallel = 1;

  // bf16 and activation recompute, docs/training.md
  /// "fp32" or "bf16" (the stages' forwards under autocast to bfloat16).
  std::string precision = "fp32";
  /// Keep only each stage's inputs per microbatch and recompute its forward
  /// for the backward (bitwise the same gradients).
  bool recompute = false;
  /// Seed rank r's random generators with seed + r.
  std::optional<uint64_t> seed;
  /// Count the host memory LibTorch allocates, process-wide from now on
  /// (TrainStats::peakBytes).
  bool measureMemory = false;
};

/// What the last step() did, on every rank.
struct StepRecord {
  int step = 0;
  /// The batch's loss before the update on lossRank(), NaN elsewhere.
  double loss = 0;
  /// The learning rate of the update, and with clipGradNorm the global
  /// gradient norm before clipping (the same on every rank).
  double lr = 0;
  std::optional<double> gradNorm;
  int64_t samples = -1;
  double seconds = 0;
  /// The most host bytes held at once in the step above its start, with
  /// measureMemory; else -1.
  int64_t peakBytes = -1;
};

/// What one rank did in its last step(), as `ppc train --stats` reports it.
struct TrainStats {
  int rank = 0;
  int step = 0;
  /// "inferred", "cache" or "user".
  std::string metaSource = "inferred";
  int64_t metaMessagesSent = 0;
  int64_t messagesSent = 0;
  double stepMs = 0;
  /// Per stage of this rank, the most microbatches whose activations it
  /// held at once.
  std::map<int, int> peakActivations;
  bool cacheWritten = false;
  // Data parallel
  /// This rank's replica with dataParallel > 1 (else -1), and the
  /// milliseconds its step waited for the gradients' all-reduce after the
  /// schedule (the part the backward did not hide).
  int replica = -1;
  double allReduceMs = 0;

  /// With TrainOptions::measureMemory: the most host bytes held at once in
  /// the step above its start; else -1.
  int64_t peakBytes = -1;

  /// "stats: rank=0 step=1 meta=inferred meta_messages_sent=2
  /// messages_sent=30 step_ms=12.500 peak_activations=0:4,2:3
  /// cache_written=1" (with replicas, " replica=1 allreduce_ms=0.400"
  /// follow; then " peak_bytes=B" when measured).
  std::string line() const;
};

class Trainer {
public:
  /// As Pipeline's constructor, and throws: an option out of range ("lr 0
  /// is not a finite number above 0"), an unknown loss, optimizer or
  /// schedule name; a loss output that is not a tensor; a schedule that
  /// does not fit the placement; an unreadable or deadlocking schedule CSV.
  explicit Trainer(const std::string &manifestPath,
                   const TrainOptions &options = {});
  ~Trainer();
  Trainer(Trainer &&) noexcept;
  Trainer &operator=(Trainer &&) noexcept;

  /// Whether step() reads `inputs` / `target` on this rank (the others may
  /// pass empty ones).
  bool needsInputs() const;
  bool needsTargets() const;
  /// The rank that computes the loss, and this process's rank.
  int lossRank() const;
  int rank() const;
  // Data parallel
  /// This process's replica (0..replicas()-1) and the number of replicas;
  /// with replicas, rank() and lossRank() are ranks of this replica's
  /// pipeline (RANK = replica() * WORLD_SIZE / replicas() + rank()).
  int replica() const;
  int replicas() const;
  /// How many inputs the model takes (loadTrainingData's `modelInputs`),
  /// and their names (its `inputNames`: data may give them by name).
  size_t modelInputCount() const;
  std::vector<std::string> modelInputNames() const;

  /// One optimizer step over one batch; every rank must call it. Returns
  /// the batch's loss before the update on lossRank(), NaN elsewhere.
  /// Throws: Pipeline::run's errors; a target that does not fit ("the
  /// target has 6 rows, the batch 8"); a NaN or infinite loss ("step 3:
  /// the loss is nan").
  double step(const std::vector<c10::IValue> &inputs, const at::Tensor &target);

  /// The batch's loss with the stages in eval mode (BatchNorm's running
  /// statistics, no dropout), the parameters and their gradients left as
  /// they were; every rank must call it. Returns it on lossRank(), NaN
  /// elsewhere. Throws: step()'s errors.
  double evaluate(const std::vector<c10::IValue> &inputs,
                  const at::Tensor &target);
  /// This rank's parameters, named "stage S: path" ("stage 1: fc.weight").
  std::vector<std::pair<std::string, at::Tensor>> namedParameters() const;

  /// Writes this rank's parameter gradients of the last step to `path`, a
  /// dict from parameter path to gradient that torch.load reads. Throws:
  /// the file cannot be written.
  void saveGradients(const std::string &path) const;

  /// Writes the trained stages and a manifest to `dir`, atomically as a
  /// whole, as `ppc train --save` does; `ppc run` reads the result. Every
  /// rank must call it. Throws: `dir` holds something else or what the run
  /// reads; a rank cannot write its part; a lost peer.
  void save(const std::string &dir);

  // Checkpoints
  /// Writes the checkpoint after stepsDone() steps to DIR/step-<8-digit
  /// step> atomically, as `ppc train --checkpoint-dir` does (stages,
  /// manifest, optimizer state, generators, checkpoint.json), then removes
  /// the complete ones older than the `keep` newest. Every rank must call
  /// it. Throws as save() does.
  void saveCheckpoint(const std::string &dir, int keep = 3);
  /// Continues from the newest complete checkpoint in `dir` (verified;
  /// a corrupt newest one is refused), as `ppc train --resume`: the next
  /// step() is step stepsDone() + 1. Every rank must call it, before
  /// step(). Returns the checkpoint's path. Throws: no complete checkpoint,
  /// a corrupt one, another number of stages or optimizer, a lost peer.
  std::string resume(const std::string &dir);
  /// The steps done, those of a resumed checkpoint included.
  int stepsDone() const;

  /// Waits until every rank has called finish(). Throws: "lost rank R".
  void finish();

  /// This rank's statistics of its last step().
  TrainStats stats() const;
  /// The last step(): its learning rate, gradient norm, loss, ...
  StepRecord lastStep() const;
  /// This rank's schedule, one action per line.
  std::string schedule() const;
  /// With autoSchedule, the line saying which schedule was picked; else
  /// empty.
  std::string scheduleNote() const;

private:
  std::unique_ptr<ppc::Trainer> impl_;
};

} // namespace ppc::api

#endif // PPC_PUBLIC_TRAINER_H
