//===- runtime/train/Optimizer.cpp - A training step's parameter update ---===//
//
// This file implements the optimizer's creation and the update of a step
// (see Optimizer.h): gradient clipping by the norm all ranks agree on, the
// learning-rate schedule, and the optimizer step.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Optimizer.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/exec/RankContext.h"
#include "runtime/link/Collectives.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <numeric>
#include <set>

namespace ppc {

double defaultWeightDecay(OptimizerKind kind) {
  return kind == OptimizerKind::AdamW ? 0.01 : 0;
}

std::unique_ptr<torch::optim::Optimizer>
createOptimizer(const TrainOptions &options, std::vector<at::Tensor> params) {
  switch (options.optimizer) {
  case OptimizerKind::SGD:
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(options.lr)
                    .momentum(options.momentum)
                    .weight_decay(options.weightDecay));
  case OptimizerKind::Adam:
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(options.lr)
                    .weight_decay(options.weightDecay));
  case OptimizerKind::AdamW:
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(options.lr)
                    .weight_decay(options.weightDecay));
  }
  return nullptr;
}

llvm::Error checkOptimizerOptions(const TrainOptions &options) {
  if (llvm::Error err = checkOption(
          "clipGradNorm", RealRule::atLeast(0).problem(options.clipGradNorm)))
    return err;
  return options.lrSchedule.check(options.lr);
}

/// The gradients clipping counts: every defined gradient of this rank's
/// parameters but those of a tied parameter's later uses, whose copies hold
/// the same summed gradient as its first use's.
static std::vector<at::Tensor> countedGradients(RankContext &ctx) {
  std::set<const c10::TensorImpl *> first, later;
  for (const TiedParameter &tied : ctx.manifest().tiedParameters)
    for (size_t k = 0; k < tied.uses.size(); ++k) {
      const TiedParameter::Use &use = tied.uses[k];
      auto stage = ctx.stages().find(use.stage);
      if (stage == ctx.stages().end())
        continue;
      const c10::TensorImpl *impl =
          stage->second.executable().tensorAt(use.path).unsafeGetTensorImpl();
      (k == 0 ? first : later).insert(impl);
    }
  std::vector<at::Tensor> out;
  for (auto &[index, stage] : ctx.stages())
    for (const at::Tensor &param : stage.executable().parameters()) {
      const c10::TensorImpl *impl = param.unsafeGetTensorImpl();
      if (param.grad().defined() && (first.count(impl) || !later.count(impl)))
        out.push_back(param.grad());
    }
  return out;
}

/// Step 1 of Optimizer.h: the global norm, and the gradients scaled.
static llvm::Expected<double> clipGradients(RankContext &ctx, double maxNorm) {
  auto local = torchCall("cannot compute the gradient norm", [&] {
    std::vector<at::Tensor> norms;
    for (const at::Tensor &grad : countedGradients(ctx))
      norms.push_back(grad.detach().norm().to(at::kDouble).cpu());
    // A rank whose gradients are all undefined adds nothing.
    return norms.empty() ? at::zeros({1}, at::kDouble)
                         : at::stack(norms).square().sum().reshape({1});
  });
  if (!local)
    return local.takeError();
  std::vector<int> ranks(ctx.env().worldSize);
  std::iota(ranks.begin(), ranks.end(), 0);
  // The tied gradients' channel: their all-reduces are done on every rank
  // before this one starts, and messages keep their order on a channel.
  if (llvm::Error err =
          allReduceSum(ctx.transport(), *local, ranks,
                       allReduceChannel(ctx.schedule()), "the gradient norm"))
    return err;
  if (llvm::Error err = ctx.transport().flushSends())
    return err;
  // float32 as clip_grad_norm_: the norm of float32 gradients, and its
  // coefficient max_norm / (norm + 1e-6), which torch computes as
  // reciprocal() * max_norm.
  float total = static_cast<float>(std::sqrt(local->item<double>()));
  float coef = (1.0f / (total + 1e-6f)) * static_cast<float>(maxNorm);
  if (coef < 1.0f)
    if (llvm::Error err = torchCall("cannot clip the gradients", [&] {
          for (auto &[index, stage] : ctx.stages())
            for (const at::Tensor &param : stage.executable().parameters())
              if (param.grad().defined())
                param.grad().detach().mul_(coef);
        }))
      return err;
  return static_cast<double>(total);
}

llvm::Expected<UpdateResult>
updateParameters(RankContext &ctx, torch::optim::Optimizer *optimizer,
                 const TrainOptions &options, int step) {
  UpdateResult result;
  if (options.clipGradNorm > 0) {
    auto norm = clipGradients(ctx, options.clipGradNorm);
    if (!norm)
      return norm.takeError();
    result.gradNorm = *norm;
  }
  result.lr = options.lrSchedule.at(options.lr, step - 1);
  if (optimizer)
    if (llvm::Error err = torchCall("the optimizer step failed", [&] {
          for (auto &group : optimizer->param_groups())
            group.options().set_lr(result.lr);
          optimizer->step();
        }))
      return err;
  return result;
}

} // namespace ppc
