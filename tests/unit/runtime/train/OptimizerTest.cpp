//===- tests/unit/runtime/train/OptimizerTest.cpp -------------------------===//
//
// The optimizers against torch.optim.
//
// Tests runtime/train/Optimizer.h's createOptimizer for every kind of
// OptimizerKinds.def: three steps over two parameters from the same
// starting values and gradients give bitwise the parameters Python's
// torch.optim (2.15, CPU, its single-tensor path) gives, with momentum,
// weight decay (coupled for SGD and Adam, decoupled for AdamW) and a
// learning rate changed between steps as Trainer's schedule changes it
// (Optimizer.h, step 2). The expected values were printed by
// torch.optim with this program (float32, as C hex floats):
//
//   a0 = torch.tensor([0.5, -1.25, 2.0, 0.75])
//   b0 = torch.tensor([[0.25, -0.5, 1.5], [-2.0, 0.125, 1.0]])
//   opt = torch.optim.SGD([a, b], lr=0.1, momentum=0.9)   # each case
//   for k in range(3):
//       for g in opt.param_groups: g["lr"] = lrs[k]        # LrSteps only
//       a.grad = torch.tensor(kGradA[k]); b.grad = torch.tensor(kGradB[k])
//       opt.step()
//
// Also: the default weight decays, and checkOptimizerOptions' refusals.
// Clipping and the schedule's learning rates inside a step are Trainer's
// (TrainerStepTest).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Optimizer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace ppc;

namespace {

/// float32 from the doubles Python would hand torch.tensor, so that each
/// value rounds as it does there.
at::Tensor floats(std::vector<double> values, at::IntArrayRef shape) {
  return at::tensor(values, at::kDouble).to(at::kFloat).reshape(shape);
}

const std::vector<std::vector<double>> kGradA = {
    {0.1, -0.2, 0.3, 0.4}, {-0.5, 0.25, 0.125, -0.75}, {0.3, 0.3, -0.6, 0.05}};
const std::vector<std::vector<double>> kGradB = {
    {0.2, 0.0, -0.1, 0.05, 0.6, -0.3},
    {-0.4, 0.1, 0.2, 0.3, -0.2, 0.0},
    {0.1, 0.1, 0.1, -0.1, -0.1, 0.7}};

/// One case: the options, the learning rate of each step (empty: the
/// options' throughout), and torch.optim's parameters after three steps.
struct Case {
  TrainOptions options;
  std::vector<double> lrs;
  std::vector<float> a, b;
};

TrainOptions optionsOf(OptimizerKind kind, double lr, double momentum,
                       double weightDecay) {
  TrainOptions o;
  o.optimizer = kind;
  o.lr = lr;
  o.momentum = momentum;
  o.weightDecay = weightDecay;
  return o;
}

/// Runs createOptimizer(case) for three steps; returns the parameters.
std::pair<at::Tensor, at::Tensor> threeSteps(const Case &c) {
  at::Tensor a = floats({0.5, -1.25, 2.0, 0.75}, {4}).requires_grad_(true);
  at::Tensor b =
      floats({0.25, -0.5, 1.5, -2.0, 0.125, 1.0}, {2, 3}).requires_grad_(true);
  auto optimizer = createOptimizer(c.options, {a, b});
  EXPECT_NE(optimizer, nullptr);
  for (size_t k = 0; k < 3; ++k) {
    if (!c.lrs.empty())
      for (auto &group : optimizer->param_groups())
        group.options().set_lr(c.lrs[k]);
    a.mutable_grad() = floats(kGradA[k], {4});
    b.mutable_grad() = floats(kGradB[k], {2, 3});
    optimizer->step();
  }
  return {a.detach(), b.detach()};
}

void expectTorchOptim(const Case &c) {
  auto [a, b] = threeSteps(c);
  at::Tensor wantA = at::tensor(c.a, at::kFloat);
  at::Tensor wantB = at::tensor(c.b, at::kFloat).reshape({2, 3});
  EXPECT_TRUE(at::equal(a, wantA)) << a << "\nwant\n" << wantA;
  EXPECT_TRUE(at::equal(b, wantB)) << b << "\nwant\n" << wantB;
}

} // namespace

TEST(OptimizerTest, SGDMatchesTorchOptimBitwise) {
  expectTorchOptim(
      {optionsOf(OptimizerKind::SGD, 0.1, 0, 0),
       {},
       {0x1.051eb8p-1f, -0x1.48f5c2p+0f, 0x1.023d7p+1f, 0x1.8f5c28p-1f},
       {0x1.0a3d72p-2f, -0x1.0a3d7p-1f, 0x1.7ae148p+0f, -0x1.033334p+1f,
        0x1.851eb8p-4f, 0x1.eb851ep-1f}});
}

TEST(OptimizerTest, SGDWithMomentumMatchesTorchOptimBitwise) {
  expectTorchOptim(
      {optionsOf(OptimizerKind::SGD, 0.1, 0.9, 0),
       {},
       {0x1.1367a2p-1f, -0x1.45f6fep+0f, 0x1.f4779ap+0f, 0x1.8ee63p-1f},
       {0x1.0c154cp-2f, -0x1.0ed916p-1f, 0x1.7aa64cp+0f, -0x1.07c01ap+1f,
        0x1.54c972p-7f, 0x1.02e48ep+0f}});
}

TEST(OptimizerTest, SGDWithMomentumAndWeightDecayMatchesTorchOptimBitwise) {
  expectTorchOptim(
      {optionsOf(OptimizerKind::SGD, 0.1, 0.9, 0.01),
       {},
       {0x1.11f6b6p-1f, -0x1.442f28p+0f, 0x1.f1a136p+0f, 0x1.8cc944p-1f},
       {0x1.0aaf62p-2f, -0x1.0d687p-1f, 0x1.787e1ap+0f, -0x1.064f28p+1f,
        0x1.44a438p-7f, 0x1.016dcp+0f}});
}

TEST(OptimizerTest, AdamMatchesTorchOptimBitwise) {
  expectTorchOptim(
      {optionsOf(OptimizerKind::Adam, 0.01, 0, 0),
       {},
       {0x1.fca68p-2f, -0x1.3f35cap+0f, 0x1.fbb5b6p+0f, 0x1.7dc904p-1f},
       {0x1.f5d136p-3f, -0x1.08348ep-1f, 0x1.804b24p+0f, -0x1.02e5fap+1f,
        0x1.be38a4p-4f, 0x1.034b3cp+0f}});
}

TEST(OptimizerTest, AdamWeightDecayIsAddedToTheGradientAsTorchOptimDoes) {
  expectTorchOptim(
      {optionsOf(OptimizerKind::Adam, 0.01, 0, 0.1),
       {},
       {0x1.fa1abap-2f, -0x1.3ca406p+0f, 0x1.fa4b26p+0f, 0x1.7c6a68p-1f},
       {0x1.f2788p-3f, -0x1.fa9a74p-2f, 0x1.790624p+0f, -0x1.fb89f6p+0f,
        0x1.bc29b2p-4f, 0x1.01cbfp+0f}});
}

TEST(OptimizerTest, AdamWWithTheDefaultDecayMatchesTorchOptimBitwise) {
  // torch.optim.AdamW(lr=0.01): its default weight decay, 0.01.
  expectTorchOptim(
      {optionsOf(OptimizerKind::AdamW, 0.01, 0,
                 defaultWeightDecay(OptimizerKind::AdamW)),
       {},
       {0x1.fc7f8cp-2f, -0x1.3f1d54p+0f, 0x1.fb8e94p+0f, 0x1.7dabbep-1f},
       {0x1.f5aabep-3f, -0x1.0820ccp-1f, 0x1.802d8ap+0f, -0x1.02d238p+1f,
        0x1.be13d4p-4f, 0x1.033766p+0f}});
}

TEST(OptimizerTest, AdamWWeightDecayIsDecoupledAsTorchOptimDoes) {
  expectTorchOptim(
      {optionsOf(OptimizerKind::AdamW, 0.01, 0, 0.1),
       {},
       {0x1.fb215ap-2f, -0x1.3e417ap+0f, 0x1.fa2eccp+0f, 0x1.7ca494p-1f},
       {0x1.f450f4p-3f, -0x1.076f2cp-1f, 0x1.7f2374p+0f, -0x1.0220a4p+1f,
        0x1.bcc8fcp-4f, 0x1.028514p+0f}});
}

TEST(OptimizerTest, SGDMomentumFollowsALearningRateChangedBetweenSteps) {
  // What updateParameters does each step: set every group's lr, then step.
  expectTorchOptim(
      {optionsOf(OptimizerKind::SGD, 0.1, 0.9, 0),
       {0.1, 0.05, 0.025},
       {0x1.06425cp-1f, -0x1.3e1966p+0f, 0x1.f4d42cp+0f, 0x1.795b58p-1f},
       {0x1.f295ecp-3f, -0x1.04fdf4p-1f, 0x1.7fe0ep+0f, -0x1.03858ap+1f,
        0x1.5f06f4p-5f, 0x1.08361p+0f}});
}

TEST(OptimizerTest, AdamFollowsALearningRateChangedBetweenSteps) {
  expectTorchOptim(
      {optionsOf(OptimizerKind::Adam, 0.1, 0, 0),
       {0.1, 0.05, 0.025},
       {0x1.ba24d2p-2f, -0x1.2bdde6p+0f, 0x1.dc48a8p+0f, 0x1.586f0ep-1f},
       {0x1.5fb006p-3f, -0x1.1e09c8p-1f, 0x1.91973ap+0f, -0x1.138c0cp+1f,
        -0x1.422ep-13f, 0x1.1fb91ap+0f}});
}

TEST(OptimizerTest, EveryKindIsCreatedOverAllTheParametersGiven) {
  for (OptimizerKind kind : kAllOptimizerKinds) {
    TrainOptions o = optionsOf(kind, 0.5, 0, 0);
    std::vector<at::Tensor> params = {at::ones({2}).requires_grad_(true),
                                      at::ones({3}).requires_grad_(true)};
    auto optimizer = createOptimizer(o, params);
    ASSERT_NE(optimizer, nullptr) << optimizerName(kind).str();
    ASSERT_EQ(optimizer->param_groups().size(), 1u);
    const auto &group = optimizer->param_groups()[0];
    EXPECT_EQ(group.params().size(), 2u) << optimizerName(kind).str();
    EXPECT_TRUE(group.params()[1].is_same(params[1]));
    EXPECT_EQ(group.options().get_lr(), 0.5) << optimizerName(kind).str();
  }
}

TEST(OptimizerTest, DefaultWeightDecayIsTorchOptims) {
  EXPECT_EQ(defaultWeightDecay(OptimizerKind::SGD), 0.0);
  EXPECT_EQ(defaultWeightDecay(OptimizerKind::Adam), 0.0);
  EXPECT_EQ(defaultWeightDecay(OptimizerKind::AdamW), 0.01);
}

TEST(OptimizerTest, NegativeOrNonFiniteClipGradNormIsRefused) {
  TrainOptions o;
  o.clipGradNorm = -1;
  EXPECT_EQ(llvm::toString(checkOptimizerOptions(o)),
            "clipGradNorm -1 is not a finite number of at least 0");
  o.clipGradNorm = std::numeric_limits<double>::infinity();
  EXPECT_EQ(llvm::toString(checkOptimizerOptions(o)),
            "clipGradNorm inf is not a finite number of at least 0");
  o.clipGradNorm = 0;
  EXPECT_FALSE(static_cast<bool>(checkOptimizerOptions(o)));
  o.clipGradNorm = 1.5;
  EXPECT_FALSE(static_cast<bool>(checkOptimizerOptions(o)));
}

TEST(OptimizerTest, TheLrScheduleIsCheckedAgainstTheLearningRate) {
  TrainOptions o;
  o.lr = 0.1;
  o.lrSchedule.kind = LrScheduleKind::Cosine;
  o.lrSchedule.steps = 20;
  o.lrSchedule.minLr = 0.5;
  EXPECT_EQ(llvm::toString(checkOptimizerOptions(o)),
            "minLr 0.5 is not a number in 0..0.1 (at most the learning rate)");
  o.lrSchedule.minLr = 0.05;
  EXPECT_FALSE(static_cast<bool>(checkOptimizerOptions(o)));
}
