//===- runtime/train/Optimizer.h - A training step's parameter update -----===//
//
// What Trainer::step does once the gradients of a step are complete (tied
// copies summed): clip them by their global norm, set the step's learning
// rate, and let the optimizer update this rank's parameters; and the
// creation of that optimizer (torch::optim's SGD, Adam or AdamW).
//
// The update of one step (every rank of the pipeline, in the same order):
//   1. with TrainOptions::clipGradNorm X > 0: the squared L2 norms of this
//      rank's gradients are summed (a tied parameter once, on the stage of
//      its first use, as the unsplit model holds it once) and all-reduced
//      over the pipeline's ranks, so every rank has the same total norm N;
//      with c = X / (N + 1e-6) < 1 every gradient (tied copies too) is
//      multiplied by c, in float32 as torch.nn.utils.clip_grad_norm_ does;
//   2. every parameter group's learning rate is set to
//      TrainOptions::lrSchedule.at(lr, step - 1) (LrSchedule.h);
//   3. optimizer->step().
//
// Internal to libppc_runtime: not installed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_OPTIMIZER_H
#define PPC_RUNTIME_TRAIN_OPTIMIZER_H

#include "runtime/train/TrainOptions.h"

#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <vector>

namespace ppc {

class RankContext;

/// The weight decay of `kind` when none is given: torch.optim's default
/// (0.01 for AdamW, 0 for SGD and Adam).
double defaultWeightDecay(OptimizerKind kind);

/// options.optimizer over `params` with the options' learning rate,
/// momentum (SGD) and weight decay, torch::optim's defaults otherwise.
std::unique_ptr<torch::optim::Optimizer>
createOptimizer(const TrainOptions &options, std::vector<at::Tensor> params);

/// The options' own checks: clipGradNorm ("clipGradNorm -1 is not a finite
/// number of at least 0") and the LR schedule's (LrSchedule::check).
llvm::Error checkOptimizerOptions(const TrainOptions &options);

/// What update() did.
struct UpdateResult {
  double lr = 0;
  /// The global gradient norm before clipping; only with clipping on.
  std::optional<double> gradNorm;
};

/// Steps 1-3 above for global step `step` (1-based); `optimizer` is null on
/// a rank without parameters, which still takes part in the all-reduce.
/// Errors: LostRankError; "the optimizer step failed: ...".
llvm::Expected<UpdateResult>
updateParameters(RankContext &ctx, torch::optim::Optimizer *optimizer,
                 const TrainOptions &options, int step);

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_OPTIMIZER_H
