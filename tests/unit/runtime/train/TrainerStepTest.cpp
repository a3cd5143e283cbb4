//===- tests/unit/runtime/train/TrainerStepTest.cpp -----------------------===//
//
// Trainer::step in-process.
//
// Tests runtime/train/Trainer.h's step on a two-stage job (TrainJob.h) whose
// ranks are threads of this process, against the same model unsplit:
//   - one microbatch: the loss and the SGD update bitwise the unsplit
//     model's (the same operations in the same order, the loss weighted by
//     1.0), the step's record (step, lr, samples), the loss on lossRank()
//     only;
//   - microbatches of unequal rows weighted by their rows over the batch's,
//     so that the step equals one on the whole batch (to float32 rounding:
//     the gradient is a sum over microbatches instead of over rows);
//   - clipGradNorm as torch.nn.utils.clip_grad_norm_ on the unsplit model,
//     and the norm reported; a norm under the limit leaves the step
//     bitwise unclipped;
//   - the learning-rate schedule's rate on every rank each step;
//   - data parallelism: two replicas step as one pipeline on the whole
//     batch; a batch too small for the replicas or the microbatches refused;
//   - evaluate(): the loss, with parameters and gradients untouched;
//   - refusals with their texts: options at create, a target whose rows
//     differ from the batch's or that has no batch dimension, a loss that
//     is not finite (the update skipped).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Trainer.h"
#include "tests/unit/runtime/train/TrainJob.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <map>
#include <mutex>

using namespace ppc;

namespace {

class TrainerStepTest : public ppc::testing::TrainJob {
protected:
  /// The unsplit model after one SGD step of `lr` on (x, t); its loss.
  static std::pair<Reference, double> referenceStep(const at::Tensor &x,
                                                    const at::Tensor &t,
                                                    double lr,
                                                    double clip = 0) {
    Reference ref;
    double loss = ref.lossBackward(x, t).item<double>();
    if (clip > 0)
      torch::nn::utils::clip_grad_norm_(ref.params(), clip);
    torch::optim::SGD sgd(ref.params(), torch::optim::SGDOptions(lr));
    sgd.step();
    return {ref, loss};
  }

  /// The reference's parameters by Trainer's names.
  static std::map<std::string, at::Tensor> named(const Reference &ref) {
    return {{"stage 0: w0", ref.w0.detach()},
            {"stage 1: w1", ref.w1.detach()},
            {"stage 1: b1", ref.b1.detach()}};
  }
};

/// Whether `a` and `b` agree to float32 rounding of a reordered sum.
bool close(const at::Tensor &a, const at::Tensor &b) {
  return at::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-6);
}

} // namespace

TEST_F(TrainerStepTest, OneMicrobatchStepIsTheUnsplitSGDStepBitwise) {
  at::Tensor x = batch(5), t = target(5);
  auto [ref, refLoss] = referenceStep(x, t, 0.1);
  std::vector<double> losses(2);
  std::vector<StepRecord> records(2);
  auto errors = onRanks(2, options(1), [&](Trainer &tr, int r) -> llvm::Error {
    EXPECT_EQ(tr.lossRank(), 1);
    EXPECT_EQ(tr.needsTargets(), r == 1);
    auto loss = tr.step(inputsFor(tr, x), tr.needsTargets() ? t : at::Tensor());
    if (!loss)
      return loss.takeError();
    losses[r] = *loss;
    records[r] = tr.lastStep();
    keepParameters(tr);
    return llvm::Error::success();
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  EXPECT_EQ(losses[1], refLoss);
  EXPECT_TRUE(std::isnan(losses[0]));
  EXPECT_TRUE(std::isnan(records[0].loss));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(records[r].step, 1) << "rank " << r;
    EXPECT_EQ(records[r].lr, 0.1) << "rank " << r;
    EXPECT_EQ(records[r].samples, 5) << "rank " << r;
    EXPECT_FALSE(records[r].gradNorm.has_value()) << "rank " << r;
  }
  auto want = named(ref);
  ASSERT_EQ(trained.size(), want.size());
  for (auto &[name, value] : want)
    EXPECT_TRUE(at::equal(trained[name], value)) << name << ":\n"
                                                 << trained[name] << "\nwant\n"
                                                 << value;
}

TEST_F(TrainerStepTest, MicrobatchLossesAreWeightedByTheirRowsOverTheBatch) {
  // 5 rows in 2 microbatches: 3 and 2. An unweighted mean of the two
  // microbatch means would differ from the batch's mean.
  at::Tensor x = batch(5), t = target(5);
  auto [ref, refLoss] = referenceStep(x, t, 0.1);
  double unweighted =
      (at::mse_loss(Reference().forward(x.narrow(0, 0, 3)), t.narrow(0, 0, 3)) +
       at::mse_loss(Reference().forward(x.narrow(0, 3, 2)), t.narrow(0, 3, 2)))
          .item<double>() /
      2;
  ASSERT_GT(std::abs(unweighted - refLoss), 1e-3);
  double loss = 0;
  auto errors = onRanks(2, options(2), [&](Trainer &tr, int r) -> llvm::Error {
    auto l = tr.step(inputsFor(tr, x), tr.needsTargets() ? t : at::Tensor());
    if (!l)
      return l.takeError();
    if (r == tr.lossRank())
      loss = *l;
    keepParameters(tr);
    return llvm::Error::success();
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  EXPECT_NEAR(loss, refLoss, 1e-6 * std::abs(refLoss));
  for (auto &[name, value] : named(ref))
    EXPECT_TRUE(close(trained[name], value)) << name << ":\n"
                                             << trained[name] << "\nwant\n"
                                             << value;
}

TEST_F(TrainerStepTest, ClipGradNormScalesGradientsAsClipGradNormOnTheModel) {
  at::Tensor x = batch(4), t = target(4);
  Reference probe;
  probe.lossBackward(x, t);
  double norm = torch::nn::utils::clip_grad_norm_(probe.params(), 1e9);
  const double limit = norm / 4;
  auto [ref, refLoss] = referenceStep(x, t, 0.1, limit);
  std::vector<std::optional<double>> norms(2);
  TrainOptions o = options(1);
  o.clipGradNorm = limit;
  auto errors = onRanks(2, o, [&](Trainer &tr, int r) -> llvm::Error {
    auto l = tr.step(inputsFor(tr, x), tr.needsTargets() ? t : at::Tensor());
    if (!l)
      return l.takeError();
    norms[r] = tr.lastStep().gradNorm;
    keepParameters(tr);
    return llvm::Error::success();
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  // The norm is every rank's squares summed over the ranks, in float32 at
  // the end: equal on every rank, torch's to float32 rounding.
  ASSERT_TRUE(norms[0].has_value());
  ASSERT_TRUE(norms[1].has_value());
  EXPECT_EQ(*norms[0], *norms[1]);
  EXPECT_NEAR(*norms[0], norm, 1e-6 * norm);
  for (auto &[name, value] : named(ref))
    EXPECT_TRUE(close(trained[name], value)) << name << ":\n"
                                             << trained[name] << "\nwant\n"
                                             << value;
  // Clipped indeed: the unclipped step is far from it.
  auto [unclipped, unclippedLoss] = referenceStep(x, t, 0.1);
  EXPECT_FALSE(close(trained["stage 0: w0"], unclipped.w0.detach()));
}

TEST_F(TrainerStepTest, ClipGradNormAboveTheNormLeavesTheStepUnclipped) {
  at::Tensor x = batch(4), t = target(4);
  auto [ref, refLoss] = referenceStep(x, t, 0.1);
  TrainOptions o = options(1);
  o.clipGradNorm = 1e6;
  std::optional<double> norm;
  auto errors = onRanks(2, o, [&](Trainer &tr, int r) -> llvm::Error {
    auto l = tr.step(inputsFor(tr, x), tr.needsTargets() ? t : at::Tensor());
    if (!l)
      return l.takeError();
    if (r == 0)
      norm = tr.lastStep().gradNorm;
    keepParameters(tr);
    return llvm::Error::success();
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  EXPECT_TRUE(norm.has_value() && *norm > 0);
  for (auto &[name, value] : named(ref))
    EXPECT_TRUE(at::equal(trained[name], value)) << name;
}

TEST_F(TrainerStepTest, EachStepUpdatesWithItsScheduledLearningRate) {
  TrainOptions o = options(1);
  o.lrSchedule.kind = LrScheduleKind::Linear;
  o.lrSchedule.steps = 4;
  o.lrSchedule.warmupSteps = 2;
  o.lrSchedule.minLr = 0.01;
  std::vector<std::vector<double>> lrs(2);
  at::Tensor x = batch(4), t = target(4);
  auto errors = onRanks(2, o, [&](Trainer &tr, int r) -> llvm::Error {
    for (int s = 0; s < 4; ++s) {
      auto l = tr.step(inputsFor(tr, x), tr.needsTargets() ? t : at::Tensor());
      if (!l)
        return l.takeError();
      EXPECT_EQ(tr.lastStep().step, s + 1);
      lrs[r].push_back(tr.lastStep().lr);
      if (s == 0)
        keepParameters(tr);
    }
    EXPECT_EQ(tr.stepsDone(), 4);
    return llvm::Error::success();
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  std::vector<double> want;
  for (int s = 0; s < 4; ++s)
    want.push_back(o.lrSchedule.at(o.lr, s));
  EXPECT_EQ(lrs[0], want);
  EXPECT_EQ(lrs[1], want);
  // Warm-up: the first step is not at the base rate; its update used the
  // scheduled one (bitwise the unsplit step at that rate).
  EXPECT_LT(want[0], o.lr);
  auto [ref, refLoss] = referenceStep(x, t, want[0]);
  for (auto &[name, value] : named(ref))
    EXPECT_TRUE(at::equal(trained[name], value)) << name;
}

TEST_F(TrainerStepTest, TwoReplicasStepAsOnePipelineOnTheWholeBatch) {
  // dataParallel 2 over 2 ranks: two replicas of a one-rank pipeline, each
  // taking half of the 6 rows; the loss returned is the whole batch's.
  at::Tensor x = batch(6), t = target(6);
  auto [ref, refLoss] = referenceStep(x, t, 0.1);
  TrainOptions o = options(1);
  o.dataParallel = 2;
  std::vector<double> losses(2);
  std::vector<std::string> sha(2);
  auto errors = onRanks(2, o, [&](Trainer &tr, int r) -> llvm::Error {
    EXPECT_EQ(tr.replicas(), 2);
    EXPECT_EQ(tr.replica(), r);
    auto l = tr.step(inputsFor(tr, x), tr.needsTargets() ? t : at::Tensor());
    if (!l)
      return l.takeError();
    losses[r] = *l;
    sha[r] = tr.weightsSha256();
    if (r == 0)
      keepParameters(tr);
    return llvm::Error::success();
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  EXPECT_EQ(sha[0], sha[1]);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_NEAR(losses[0], refLoss, 1e-6 * std::abs(refLoss));
  for (auto &[name, value] : named(ref))
    EXPECT_TRUE(close(trained[name], value)) << name;
}

TEST_F(TrainerStepTest, ABatchTooSmallForTheReplicasIsRefused) {
  TrainOptions o = options(1);
  o.dataParallel = 2;
  auto errors = onRanks(2, o, [&](Trainer &tr, int) -> llvm::Error {
    return tr.step({batch(1)}, target(1)).takeError();
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(errors[r],
              "the batch has 1 row; dataParallel 2 needs at least one per "
              "replica")
        << "rank " << r;
}

TEST_F(TrainerStepTest, MoreMicrobatchesThanAReplicasSliceIsRefused) {
  TrainOptions o = options(3);
  o.dataParallel = 2;
  auto errors = onRanks(2, o, [&](Trainer &tr, int) -> llvm::Error {
    return tr.step({batch(5)}, target(5)).takeError();
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(errors[r], "microbatches 3 exceeds the smallest replica's slice "
                         "of the batch (2 of 5 rows over dataParallel 2)")
        << "rank " << r;
}

TEST_F(TrainerStepTest, EvaluateGivesTheLossAndTouchesNoParameter) {
  at::Tensor x = batch(5), t = target(5);
  double refLoss =
      at::mse_loss(Reference().forward(x), t).detach().item<double>();
  double loss = 0;
  auto errors = onRanks(1, options(2), [&](Trainer &tr, int) -> llvm::Error {
    auto before = parametersOf(tr);
    auto l = tr.evaluate({x}, t);
    if (!l)
      return l.takeError();
    loss = *l;
    for (const auto &[name, value] : tr.namedParameters()) {
      EXPECT_TRUE(at::equal(value, before[name])) << name;
      EXPECT_FALSE(value.grad().defined()) << name;
    }
    return llvm::Error::success();
  });
  ASSERT_EQ(errors, std::vector<std::string>(1));
  EXPECT_NEAR(loss, refLoss, 1e-6 * std::abs(refLoss));
}

TEST_F(TrainerStepTest, OptionsOutOfRangeAreRefusedAtCreate) {
  auto refusal = [&](const std::function<void(TrainOptions &)> &set) {
    TrainOptions o = options(1);
    set(o);
    return onRanks(1, o,
                   [](Trainer &, int) { return llvm::Error::success(); })[0];
  };
  EXPECT_EQ(refusal([](TrainOptions &o) { o.lr = 0; }),
            "create: lr 0 is not a finite number above 0");
  EXPECT_EQ(refusal([](TrainOptions &o) { o.momentum = std::nan(""); }),
            "create: momentum nan is not a finite number of at least 0");
  EXPECT_EQ(refusal([](TrainOptions &o) { o.weightDecay = -1; }),
            "create: weightDecay -1 is not a finite number of at least 0");
  EXPECT_EQ(refusal([](TrainOptions &o) { o.clipGradNorm = -1; }),
            "create: clipGradNorm -1 is not a finite number of at least 0");
  EXPECT_EQ(refusal([](TrainOptions &o) { o.lossOutput = 1; }),
            "create: lossOutput 1 is not an integer in 0..0 (the model has 1 "
            "output)");
}

TEST_F(TrainerStepTest, ATargetWhoseRowsDifferFromTheBatchIsRefused) {
  auto errors = onRanks(1, options(1), [&](Trainer &tr, int) -> llvm::Error {
    return tr.step({batch(5)}, target(4)).takeError();
  });
  EXPECT_EQ(errors[0], "the target has 4 rows, the batch 5");
}

TEST_F(TrainerStepTest, ATargetWithoutABatchDimensionIsRefused) {
  auto errors = onRanks(1, options(1), [&](Trainer &tr, int) -> llvm::Error {
    return tr.step({batch(5)}, at::scalar_tensor(1.0)).takeError();
  });
  EXPECT_EQ(errors[0], "the target has no batch dimension");
}

TEST_F(TrainerStepTest, ANonFiniteLossIsRefusedAndSkipsTheUpdate) {
  at::Tensor x = batch(4);
  x[1][2] = std::nan("");
  auto errors = onRanks(1, options(1), [&](Trainer &tr, int) -> llvm::Error {
    auto before = parametersOf(tr);
    llvm::Error err = tr.step({x}, target(4)).takeError();
    for (const auto &[name, value] : tr.namedParameters())
      EXPECT_TRUE(at::equal(value, before[name])) << name;
    return err;
  });
  EXPECT_EQ(errors[0], "step 1: the loss is nan");
}
