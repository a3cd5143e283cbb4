//===- tests/unit/runtime/exec/ExecutorLoopbackTest.cpp -------------------===//
//
// The executor in-process.
//
// Tests that execute() gives the same outputs, losses and gradients on 2-4
// ranks as threads (over the loopback link) as the stages run one after the
// other, for GPipe and 1F1B, inference and a training step, and that every
// rank sends exactly the messages the schedule calls for. The stages are a
// split of the test model mlp (build/models), made once per test binary.
//
//===----------------------------------------------------------------------===//
#include "lib/Manifest.h"
#include "lib/Stage.h"
#include "lib/TensorIO.h"
#include "lib/ValueWalk.h"
#include "passes/Compile.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Microbatch.h"
#include "runtime/link/Collectives.h"
#include "runtime/link/Link.h"
#include "runtime/link/LoopbackLink.h"
#include "runtime/schedule/Build.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <chrono>
#include <set>
#include <thread>

using namespace ppc;

namespace {

/// mlp split into `stages` stages in a temporary directory, once per
/// stage count.
const std::string &splitDir(int stages) {
  static std::map<int, std::string> dirs;
  auto found = dirs.find(stages);
  if (found != dirs.end())
    return found->second;
  llvm::SmallString<128> dir;
  EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-exec", dir));
  llvm::sys::path::append(dir, "out");
  CompileOptions options;
  options.modelPath = std::string(PPC_MODELS_DIR) + "/mlp.pt";
  options.outDir = dir.str().str();
  options.partition.stages = stages;
  auto result = compileModel(options);
  EXPECT_TRUE(static_cast<bool>(result))
      << (result ? "" : llvm::toString(result.takeError()));
  return dirs[stages] = dir.str().str();
}

/// Whether the test models are there (ctest's generate_models makes them).
bool haveModels() {
  return llvm::sys::fs::exists(std::string(PPC_MODELS_DIR) + "/mlp.pt");
}

/// mlp's test input (one tensor, 8 or more rows).
std::vector<c10::IValue> mlpInputs() {
  auto inputs = loadTensors(std::string(PPC_MODELS_DIR) + "/mlp.input.pt");
  EXPECT_TRUE(static_cast<bool>(inputs));
  return inputs ? *inputs : std::vector<c10::IValue>{};
}

/// What one rank's run produced.
struct RankOutcome {
  std::string error;
  ExecutorResult result;
  int64_t sent = 0;
  /// Every message of every run.
  int64_t total = 0;
  /// Training: the gradient of each parameter of each stage on this rank.
  std::map<int, std::vector<at::Tensor>> grads;
};

/// One job: the split, the schedule options, and the inputs.
struct Job {
  int stages = 2;
  int world = 2;
  ScheduleKind kind = ScheduleKind::GPipe;
  int microbatches = 4;
  bool training = false;
  /// Runs of execute() per rank (the first infers the metadata).
  int runs = 1;
  std::chrono::milliseconds timeout{5000};
  /// A rank that leaves (its transport closes) after `absentAfter` runs,
  /// or -1.
  int absent = -1;
  int absentAfter = 0;
};

/// Runs `job` on its ranks as threads; per rank, the last run's outcome.
std::vector<RankOutcome> runJob(const Job &job,
                                const std::vector<c10::IValue> &inputs,
                                const at::Tensor &target) {
  const std::string &dir = splitDir(job.stages);
  auto manifest = Manifest::load(dir + "/manifest.json");
  EXPECT_TRUE(static_cast<bool>(manifest));
  if (!manifest)
    return {};
  auto hub = std::make_shared<LoopbackHub>(job.world);
  std::vector<RankOutcome> outcomes(job.world);
  auto microbatches =
      splitMicrobatches(inputs, manifest->modelInputs.size(), job.microbatches);
  EXPECT_TRUE(static_cast<bool>(microbatches));
  std::vector<Signature> signatures;
  for (const auto &mb : *microbatches)
    signatures.push_back(Signature::of(mb));

  auto rankBody = [&](int rank) -> llvm::Error {
    auto placement = Placement::create(job.stages, job.world);
    if (!placement)
      return placement.takeError();
    auto schedule =
        job.training
            ? buildTrainingSchedule(*manifest, *placement, job.kind,
                                    job.microbatches)
            : buildSchedule(*manifest, *placement, job.kind, job.microbatches);
    if (!schedule)
      return schedule.takeError();
    LinkSetup setup;
    setup.rank = rank;
    setup.worldSize = job.world;
    setup.timeout = job.timeout;
    setup.loopback = hub;
    auto transport = Transport::create(setup);
    if (!transport)
      return transport.takeError();
    (*transport)->setChannelCount(pipelineChannelCount(*schedule));
    std::map<int, Stage> stages;
    for (int s : placement->stagesOf(rank)) {
      auto stage = Stage::load(*manifest, dir, s);
      if (!stage)
        return stage.takeError();
      stage->executable().setTraining(job.training);
      stages.emplace(s, std::move(*stage));
    }
    std::optional<LossSpec> loss;
    if (job.training) {
      loss.emplace();
      loss->stage = manifest->modelOutputs[0].stage;
      loss->output = manifest->modelOutputs[0].output;
    }
    ExecutorPlan plan = makeExecutorPlan(*manifest, *schedule, rank, stages,
                                         **transport, c10::kCPU, loss);
    std::map<std::string, MetaTable> tables;
    for (int run = 0; run < job.runs; ++run) {
      if (rank == job.absent && run == job.absentAfter) {
        outcomes[rank].total = (*transport)->messagesSent();
        return llvm::Error::success();
      }
      ExecutorStep step;
      step.microbatches = *microbatches;
      step.signatures = signatures;
      std::set<std::string> seen;
      for (const Signature &sig : signatures)
        step.inferring.push_back(!tables.count(sig.text) &&
                                 seen.insert(sig.text).second);
      step.tables = &tables;
      step.runIndex = run;
      if (job.training) {
        int64_t rows = target.size(0);
        for (const at::Tensor &part :
             at::tensor_split(target, job.microbatches)) {
          step.targets.push_back(part);
          step.lossWeights.push_back(static_cast<double>(part.size(0)) /
                                     static_cast<double>(rows));
        }
        for (auto &entry : stages)
          for (at::Tensor p : entry.second.executable().parameters())
            p.mutable_grad() = at::Tensor();
      }
      int64_t before = (*transport)->messagesSent();
      auto result = execute(plan, step);
      if (!result)
        return result.takeError();
      outcomes[rank].result = std::move(*result);
      outcomes[rank].sent = (*transport)->messagesSent() - before;
    }
    outcomes[rank].total = (*transport)->messagesSent();
    for (auto &entry : stages)
      for (const at::Tensor &p : entry.second.executable().parameters())
        outcomes[rank].grads[entry.first].push_back(
            p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    return llvm::Error::success();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < job.world; ++r)
    threads.emplace_back([&, r] {
      if (llvm::Error err = rankBody(r))
        outcomes[r].error = llvm::toString(std::move(err));
    });
  for (std::thread &t : threads)
    t.join();
  // The transport counts what crossed the hub, no more, no less.
  for (int r = 0; r < job.world; ++r)
    EXPECT_EQ(outcomes[r].total, hub->messagesFrom(r)) << "rank " << r;
  return outcomes;
}

/// The model outputs of running the stages one after the other, microbatch
/// by microbatch, concatenated.
at::Tensor sequentialOutput(int stages, const std::vector<c10::IValue> &inputs,
                            int microbatches) {
  const std::string &dir = splitDir(stages);
  auto manifest = Manifest::load(dir + "/manifest.json");
  EXPECT_TRUE(static_cast<bool>(manifest));
  auto parts = splitMicrobatches(inputs, 1, microbatches);
  std::vector<at::Tensor> outs;
  for (const auto &mb : *parts) {
    auto out = runSequentially(*manifest, dir, mb);
    EXPECT_TRUE(static_cast<bool>(out));
    outs.push_back((*out)[0].toTensor());
  }
  return at::cat(outs);
}

/// The output rank's model output 0, concatenated over microbatches.
at::Tensor collected(const RankOutcome &outcome) {
  std::vector<at::Tensor> parts;
  for (const c10::IValue &v : outcome.result.outputParts.at(0))
    parts.push_back(v.toTensor());
  return at::cat(parts);
}

} // namespace

TEST(ExecutorLoopbackTest, InferenceMatchesTheStagesRunInOrder) {
  if (!haveModels())
    GTEST_SKIP() << "no test models in " << PPC_MODELS_DIR
                 << " (ctest's generate_models makes them)";
  std::vector<c10::IValue> inputs = mlpInputs();
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (auto [stages, world] : {std::pair{2, 2}, {4, 2}, {4, 4}}) {
      Job job;
      job.stages = stages;
      job.world = world;
      job.kind = kind;
      job.runs = 2;
      auto outcomes = runJob(job, inputs, at::Tensor());
      for (const RankOutcome &o : outcomes)
        ASSERT_EQ(o.error, "");
      int outputRank = (stages - 1) % world;
      EXPECT_TRUE(at::equal(collected(outcomes[outputRank]),
                            sequentialOutput(stages, inputs, 4)));
      // With the metadata known, one message per boundary tensor and
      // microbatch: each stage but the last sends its one output to the
      // next stage's rank.
      for (int r = 0; r < world; ++r) {
        int64_t expected = 0;
        for (int s = r; s < stages - 1; s += world)
          expected += job.microbatches;
        EXPECT_EQ(outcomes[r].sent, expected)
            << "rank " << r << " of " << world << ", " << stages << " stages";
      }
    }
}

/// Checks a training step of `kind` on 2 and 4 ranks against one rank
/// holding every stage (the gradients without any message), and its loss
/// against the stages run in order.
void checkTrainingStep(ScheduleKind kind) {
  std::vector<c10::IValue> inputs = mlpInputs();
  at::Tensor reference = sequentialOutput(4, inputs, 4);
  at::Tensor target = at::zeros_like(reference);
  Job single;
  single.stages = 4;
  single.world = 1;
  single.kind = kind;
  single.training = true;
  single.runs = 2;
  auto alone = runJob(single, inputs, target);
  ASSERT_EQ(alone[0].error, "");
  double expectedLoss = at::mse_loss(reference, target).item<double>();
  EXPECT_NEAR(alone[0].result.loss, expectedLoss, 1e-6 * expectedLoss);
  for (int world : {2, 4}) {
    Job job = single;
    job.world = world;
    auto outcomes = runJob(job, inputs, target);
    for (const RankOutcome &o : outcomes)
      ASSERT_EQ(o.error, "");
    EXPECT_DOUBLE_EQ(outcomes[3 % world].result.loss, alone[0].result.loss);
    for (int s = 0; s < 4; ++s) {
      const auto &mine = outcomes[s % world].grads.at(s);
      const auto &ref = alone[0].grads.at(s);
      ASSERT_EQ(mine.size(), ref.size());
      for (size_t k = 0; k < ref.size(); ++k)
        EXPECT_TRUE(at::equal(mine[k], ref[k]))
            << "stage " << s << " parameter " << k << ", " << world << " ranks";
    }
    // With the metadata known (the second run), per microbatch each stage
    // but the last sends its output forward and each but the first its
    // input's gradient back, every one to another rank.
    for (int r = 0; r < world; ++r) {
      int64_t expected = 0;
      for (int s = r; s < 4; s += world)
        expected += (s < 3 ? 4 : 0) + (s > 0 ? 4 : 0);
      EXPECT_EQ(outcomes[r].sent, expected) << "rank " << r;
    }
  }
}

TEST(ExecutorLoopbackTest, GPipeTrainingStepMatchesOneRank) {
  if (!haveModels())
    GTEST_SKIP() << "no test models in " << PPC_MODELS_DIR
                 << " (ctest's generate_models makes them)";
  checkTrainingStep(ScheduleKind::GPipe);
}

TEST(ExecutorLoopbackTest, OneFOneBTrainingStepMatchesOneRank) {
  if (!haveModels())
    GTEST_SKIP() << "no test models in " << PPC_MODELS_DIR
                 << " (ctest's generate_models makes them)";
  checkTrainingStep(ScheduleKind::OneFOneB);
}

TEST(ExecutorLoopbackTest, ALostPeerIsNamedQuickly) {
  if (!haveModels())
    GTEST_SKIP() << "no test models in " << PPC_MODELS_DIR
                 << " (ctest's generate_models makes them)";
  std::vector<c10::IValue> inputs = mlpInputs();
  auto start = std::chrono::steady_clock::now();
  Job job;
  job.stages = 2;
  job.world = 2;
  job.runs = 2;
  job.absent = 0;
  job.absentAfter = 1;
  auto outcomes = runJob(job, inputs, at::Tensor());
  EXPECT_EQ(outcomes[1].error.rfind("lost rank 0 (connection closed, while "
                                    "waiting for ",
                                    0),
            0u)
      << outcomes[1].error;
  EXPECT_LT(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      0.5);
}
