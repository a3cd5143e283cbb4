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

/// How a pipeline trains; the fields mirror `ppc train`'s flags.
struct TrainOptions {
  /// Microbatches, schedule, device, timeout, meta cache, threads, trace:
  /// as for Pipeline, where every schedule of `ppc train --schedule` is
  /// allowed ("gpipe", "1f1b", "interleaved-1f1b", ...).
  RunOptions run;
  /// "mse" or "cross_entropy", over model output `lossOutput` (a tensor).
  std::string loss = "mse";
  int lossOutput = 0;
  /// "sgd" (with momentum and weight decay) or "adam" (learning rate and
  /// weight decay, torch::optim's other defaults).
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
  // --- bf16 and activation recompute (#17), docs/training.md
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
  /// With TrainOptions::measureMemory: the most host bytes held at once in
  /// the step above its start; else -1.
  int64_t peakBytes = -1;

  /// "stats: rank=0 step=1 meta=inferred meta_messages_sent=2
  /// messages_sent=30 step_ms=12.500 peak_activations=0:4,2:3
  /// cache_written=1" (then " peak_bytes=B" when measured).
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
  /// How many inputs the model takes (loadTrainingData's `modelInputs`).
  size_t modelInputCount() const;

  /// One optimizer step over one batch; every rank must call it. Returns
  /// the batch's loss before the update on lossRank(), NaN elsewhere.
  /// Throws: Pipeline::run's errors; a target that does not fit ("the
  /// target has 6 rows, the batch 8"); a NaN or infinite loss ("step 3:
  /// the loss is nan").
  double step(const std::vector<c10::IValue> &inputs, const at::Tensor &target);

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

  /// Waits until every rank has called finish(). Throws: "lost rank R".
  void finish();

  /// This rank's statistics of its last step().
  TrainStats stats() const;
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
