//===- runtime/train/TrainOptions.h - How a pipeline trains -----*- C++ -*-===//
//
// The options of a training job (Trainer::create, runtime/train/Trainer.h),
// on their own so that the parts below the trainer (the optimizer, the
// learning-rate schedule) read them without the trainer. The fields that
// the public API (include/ppc/Trainer.h) and `ppc train` hold under the same
// name and type are listed once, in runtime/train/TrainOptions.def, which
// drives the copies between them.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_TRAINOPTIONS_H
#define PPC_RUNTIME_TRAIN_TRAINOPTIONS_H

#include "runtime/exec/LossKind.h"
#include "runtime/exec/RunOptions.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/OptimizerKind.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ppc {

struct TrainOptions {
  /// Microbatches, schedule, device, timeout, meta cache, threads, ...: as
  /// for Pipeline. Every schedule kind is allowed.
  RunOptions run;
  LossKind loss = LossKind::MSE;
  /// The model output the loss is computed over (a Tensor); the others are
  /// not trained through.
  int lossOutput = 0;
  /// Labels equal to it count for nothing in cross_entropy and causal_lm
  /// over class indices (transformers' padding label; runtime/exec/Loss.h).
  int64_t ignoreIndex = -100;
  OptimizerKind optimizer = OptimizerKind::SGD;
  /// Learning rate (finite, > 0), SGD momentum and weight decay (finite,
  /// >= 0); Adam and AdamW take
  /// the learning rate and weight decay with torch::optim's other defaults
  /// (AdamW's decay is decoupled; torch.optim.AdamW's default decay 0.01 is
  /// defaultWeightDecay(), runtime/train/Optimizer.h, which ppc train applies).
  double lr = 0.01;
  double momentum = 0;
  double weightDecay = 0;
  /// A schedule in the CSV layout of PyTorch's pipelining runtime to run
  /// instead of run.schedule's (docs/schedules.md); empty for none.
  std::string scheduleCSVPath;
  /// Pick the schedule instead of run.schedule: chooseSchedule()
  /// with the manifest's predicted stage costs, measured ones when it was
  /// split with --cost profile; scheduleNote() says what it picked and why.
  bool autoSchedule = false;
  /// With autoSchedule: leave out schedules that hold more microbatches'
  /// activations at once on some rank.
  std::optional<int> maxActivations;

  // Clipping and learning-rate schedules
  /// Clip the gradients to this global L2 norm (finite, >= 0; 0: off), as
  /// torch.nn.utils.clip_grad_norm_ on the unsplit model (Optimizer.h).
  double clipGradNorm = 0;
  /// The learning rate of each step: lrSchedule.at(lr, step - 1), step the
  /// 1-based global step (its `steps` are the run's).
  LrSchedule lrSchedule;

  // Data parallel
  /// D: the job's WORLD_SIZE ranks run D replicas of one pipeline of
  /// WORLD_SIZE / D ranks (runtime/train/DataParallel.h gives the layout). Each
  /// replica takes its slice of every batch (at::tensor_split into D along
  /// dim 0), splits it into run.microbatches, weights each microbatch's loss
  /// by its rows over the whole batch's, and each stage's gradients are
  /// summed over its replicas before the optimizer step: a step equals one
  /// on the whole batch. At least 1, dividing WORLD_SIZE.
  int dataParallel = 1;

  // bf16 and activation recompute; the precision is
  // run.precision.
  /// Keep only each stage's inputs per microbatch in flight and recompute
  /// its forward for the backward (Executor.h): the same losses and
  /// gradients, bitwise, for less activation memory.
  bool recompute = false;
  /// Seed rank r's random generators (CPU and CUDA: dropout's masks) with
  /// seed + r when set; unset, LibTorch seeds them nondeterministically.
  std::optional<uint64_t> seed;

  /// Called on each rank that writes a checkpoint (Trainer::saveCheckpoint)
  /// once its own files of the checkpoint after step `step` are written and
  /// before it reports them to rank 0; none when empty. A test hook: `ppc
  /// train` sets it to pause there, so that a test can kill a rank
  /// mid-checkpoint.
  std::function<void(int64_t step)> beforeCheckpointReport;
};

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_TRAINOPTIONS_H
