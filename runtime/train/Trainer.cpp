//===- runtime/train/Trainer.cpp - Pipeline training ----------------------===//
//
// This file implements Trainer (see Trainer.h): a training job on a rank
// context (RankContext.h) whose schedule has the executor's backward actions
// (Executor.h), the gradients of tied parameters, the optimizer, and saving
// the stages.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Trainer.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/NumberRules.h"
#include "lib/OutputGuard.h"
#include "lib/SafeRead.h"
#include "lib/Stage.h"
#include "lib/TensorIO.h"
#include "runtime/exec/Microbatch.h"
#include "runtime/exec/RankContext.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/Collectives.h"
#include "runtime/platform/Blas.h"
#include "runtime/platform/MemoryMeter.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/DataParallel.h"
#include "runtime/train/Optimizer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>

#include <tuple>
#include <unistd.h>

namespace ppc {

std::string TrainStats::line() const {
  std::string peaks;
  for (const auto &[stage, peak] : peakActivations)
    peaks += llvm::formatv("{0}{1}:{2}", peaks.empty() ? "" : ",", stage, peak)
                 .str();
  return llvm::formatv("stats: rank={0} step={1} meta={2} "
                       "meta_messages_sent={3} messages_sent={4} "
                       "step_ms={5:f3} peak_activations={6} cache_written={7}",
                       rank, step, metaSourceName(metaSource), metaMessagesSent,
                       messagesSent, stepMs, peaks.empty() ? "none" : peaks,
                       cacheWritten ? 1 : 0)
             .str() +
         (link.empty() ? "" : " link=" + link) +
         " blas=" + blasStatsName(loadedBlas()) +
         // Data parallel
         (replica < 0 ? std::string()
                      : llvm::formatv(" replica={0} allreduce_ms={1:f3}",
                                      replica, allReduceMs)
                            .str()) +
         (peakBytes < 0 ? "" : " peak_bytes=" + std::to_string(peakBytes));
}

/// The most bytes a schedule CSV may have.
constexpr uint64_t kMaxScheduleCSVBytes = 64 << 20;

namespace {
/// What a save writes besides the stages and the manifest (a checkpoint's
/// files); the default writes nothing more.
struct SaveExtras {
  /// Writes this rank's own files into the staged directory `tmp`, adding
  /// the path of each (relative to `tmp`) to `names` before writing it.
  std::function<llvm::Error(llvm::StringRef tmp,
                            std::vector<std::string> &names)>
      write;
  /// On rank 0, after the manifest: writes the last file into `tmp`,
  /// given the SHA-256 of every other file (relative path to hash).
  std::function<llvm::Error(llvm::StringRef tmp,
                            const std::map<std::string, std::string> &hashes)>
      last;
  /// Whether an existing `dir` may be replaced (StagedDirectory::commit).
  std::function<llvm::Error(llvm::StringRef dir)> replaceable;
};
} // namespace

struct Trainer::Impl {
  std::unique_ptr<RankContext> ctx;
  TrainOptions options;
  TrainStats stats;
  StepRecord lastStep;
  /// TrainOptions::autoSchedule's choice, for scheduleNote().
  std::string scheduleNote;
  /// Whether each stage's module was saved in training mode.
  std::map<int, bool> savedTraining;
  std::unique_ptr<torch::optim::Optimizer> optimizer;

  /// Every parameter of this rank's stages.
  std::vector<at::Tensor> parameters();
  /// Sums the gradients of each tied parameter over its copies.
  llvm::Error sumTiedGradients();
  /// Splits the target like the inputs; checks its rows.
  llvm::Error splitTarget(const at::Tensor &target, ExecutorStep &step);
  /// Trainer::save's protocol, writing `extras` too (checkpoints).
  llvm::Error saveDirectory(llvm::StringRef dir, const SaveExtras &extras);
  // Checkpoints
  /// This rank's stages' parameters (with their paths) by stage.
  std::vector<std::pair<std::string, at::Tensor>> stageParameters(int stage);
  /// Loads the stages, optimizer state and generators of checkpoint
  /// `path` (verified) onto this rank.
  llvm::Error loadCheckpoint(const std::string &path,
                             const CheckpointInfo &info);

  // Data parallel
  /// The rows the loss weights divide by: the whole batch's, of which this
  /// replica takes a slice; 0: the microbatches' own.
  int64_t weightRows = 0;
  /// This replica's slice of the batch's `inputs` and `target` (each
  /// at::tensor_split into replicas along dim 0); sets weightRows.
  llvm::Error sliceForReplica(std::vector<c10::IValue> &inputs,
                              at::Tensor &target);
  /// Sums each stage's gradients over its replicas; returns the time
  /// taken in milliseconds.
  llvm::Expected<double> allReduceReplicas();
};

llvm::Error Trainer::Impl::sliceForReplica(std::vector<c10::IValue> &inputs,
                                           at::Tensor &target) {
  const int replicas = ctx->replicas(), replica = ctx->replica();
  weightRows = target.defined() && target.dim() > 0 ? target.size(0) : 0;
  auto slice = [&](const at::Tensor &t, const char *what) -> llvm::Error {
    if (t.size(0) < replicas)
      return makeError(llvm::formatv("the {0} has {1} row{2}; --data-parallel "
                                     "{3} needs at least one per replica",
                                     what, t.size(0), t.size(0) == 1 ? "" : "s",
                                     replicas)
                           .str());
    return llvm::Error::success();
  };
  for (c10::IValue &input : inputs) {
    // Anything else is left to the microbatch split, which explains it.
    if (!input.isTensor() || input.toTensor().dim() == 0)
      continue;
    if (llvm::Error err = slice(input.toTensor(), "batch"))
      return err;
    // Every replica refuses alike: the smallest slice decides.
    int64_t rows = input.toTensor().size(0), smallest = rows / replicas;
    int microbatches = ctx->options().microbatches;
    if (smallest < microbatches)
      return makeError(
          llvm::formatv("--microbatches {0} exceeds the smallest replica's "
                        "slice of the batch ({1} of {2} rows over "
                        "--data-parallel {3})",
                        microbatches, smallest, rows, replicas)
              .str());
    input = at::tensor_split(input.toTensor(), replicas)[replica];
  }
  if (weightRows > 0) {
    if (llvm::Error err = slice(target, "target"))
      return err;
    target = at::tensor_split(target, replicas)[replica];
  }
  return llvm::Error::success();
}

llvm::Expected<double> Trainer::Impl::allReduceReplicas() {
  auto start = std::chrono::steady_clock::now();
  for (auto &[index, stage] : ctx->stages()) {
    std::vector<at::Tensor> params;
    for (const at::Tensor &t : stage.executable().parameters())
      params.push_back(t);
    if (llvm::Error err =
            allReduceGradients(*ctx->replicaTransport(), params,
                               kGradientBucketBytes, index, ctx->trace()))
      return err;
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

std::vector<at::Tensor> Trainer::Impl::parameters() {
  std::vector<at::Tensor> out;
  for (auto &[index, stage] : ctx->stages())
    for (const at::Tensor &t : stage.executable().parameters())
      out.push_back(t);
  return out;
}

/// The gradient of `param`, zeros where none was computed.
static at::Tensor gradientOf(const at::Tensor &param) {
  return param.grad().defined() ? param.grad() : at::zeros_like(param);
}

llvm::Error Trainer::Impl::sumTiedGradients() {
  const int channel = allReduceChannel(ctx->schedule());
  Transport &transport = ctx->transport();
  for (const TiedParameter &tied : ctx->manifest().tiedParameters) {
    std::vector<at::Tensor> local;
    std::vector<int> ranks;
    for (const TiedParameter::Use &use : tied.uses) {
      int r = ctx->placement().rankOf(use.stage);
      if (!llvm::is_contained(ranks, r))
        ranks.push_back(r);
      if (r == ctx->rank())
        local.push_back(
            ctx->stages().at(use.stage).executable().tensorAt(use.path));
    }
    if (local.empty())
      continue;
    std::sort(ranks.begin(), ranks.end());
    std::string what = llvm::formatv("the gradient of tied parameter '{0}'",
                                     tied.uses[0].path);
    auto sum = torchCall("cannot sum " + what, [&] {
      at::Tensor s = gradientOf(local[0]).clone();
      for (size_t k = 1; k < local.size(); ++k)
        s.add_(gradientOf(local[k]));
      return s;
    });
    if (!sum)
      return sum.takeError();
    // Every copy gets the very same tensor.
    if (llvm::Error err = allReduceSum(transport, *sum, ranks, channel, what))
      return err;
    for (at::Tensor &param : local)
      param.mutable_grad() = sum->clone();
  }
  return transport.flushSends();
}

llvm::Error Trainer::Impl::splitTarget(const at::Tensor &target,
                                       ExecutorStep &step) {
  const int count = static_cast<int>(step.signatures.size());
  int64_t rows = 0;
  std::vector<int64_t> parts;
  for (const Signature &sig : step.signatures) {
    parts.push_back(sig.rows);
    rows += parts.back();
  }
  // With replicas, over the whole batch's rows (weightRows).
  const int64_t whole = weightRows > 0 ? weightRows : rows;
  for (int m = 0; m < count; ++m)
    step.lossWeights.push_back(whole > 0 ? double(parts[m]) / double(whole)
                                         : 0);
  if (ctx->placement().rankOf(ctx->loss()->stage) != ctx->rank())
    return llvm::Error::success();
  if (!target.defined() || target.dim() == 0)
    return makeError("the target has no batch dimension");
  if (target.size(0) != rows)
    return makeError(llvm::formatv("the target has {0} rows, the batch {1}",
                                   target.size(0), rows)
                         .str());
  return torchCall("cannot split the target", [&] {
    int64_t offset = 0;
    for (int m = 0; m < count; ++m) {
      step.targets.push_back(target.narrow(0, offset, parts[m]));
      offset += parts[m];
    }
  });
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

/// Finds the stage output the loss reads: model output `loss.modelOutput`,
/// a Tensor produced by a stage.
static llvm::Error resolveLoss(const Manifest &manifest, LossSpec &loss) {
  int outputs = static_cast<int>(manifest.modelOutputs.size());
  std::string count = llvm::formatv("the model has {0} output{1}", outputs,
                                    outputs == 1 ? "" : "s");
  if (llvm::Error err = checkOption(
          "lossOutput",
          IntegerRule{0, outputs - 1, "", count}.problem(loss.modelOutput)))
    return err;
  const ValueRef &ref = manifest.modelOutputs[loss.modelOutput];
  if (ref.isModelInput())
    return makeError(llvm::formatv("model output {0} is model input {1} "
                                   "itself; there is nothing to train",
                                   loss.modelOutput, ref.modelInput)
                         .str());
  ValueKind kind = manifest.output(ref).kind;
  if (kind != ValueKind::Tensor)
    return makeError(llvm::formatv("model output {0} is a {1}; the loss needs "
                                   "a Tensor (choose another with "
                                   "--loss-output)",
                                   loss.modelOutput, kindName(kind))
                         .str());
  loss.stage = ref.stage;
  loss.output = ref.output;
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Trainer>>
Trainer::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                const TrainOptions &options) {
  for (auto [field, value, rule] :
       {std::tuple("lr", options.lr, RealRule::above(0)),
        std::tuple("momentum", options.momentum, RealRule::atLeast(0)),
        std::tuple("weightDecay", options.weightDecay, RealRule::atLeast(0))})
    if (llvm::Error err = checkOption(field, rule.problem(value)))
      return err;
  if (llvm::Error err = checkOptimizerOptions(options))
    return err;
  // A given CSV is run even when empty: its reader says why it cannot be.
  std::optional<std::string> csv;
  if (!options.scheduleCSVPath.empty()) {
    auto text = readFileBounded(options.scheduleCSVPath, kMaxScheduleCSVBytes,
                                "schedule CSV");
    if (!text)
      return text.takeError();
    csv = (*text)->getBuffer().str();
  }
  if (options.autoSchedule && csv)
    return makeError("--schedule auto picks a schedule; --schedule-csv gives "
                     "one: use one of them");
  std::string scheduleNote;
  auto planner = [&](const Manifest &manifest,
                     int worldSize) -> llvm::Expected<JobPlan> {
    LossSpec loss;
    loss.kind = options.loss;
    loss.modelOutput = options.lossOutput;
    if (llvm::Error err = resolveLoss(manifest, loss))
      return err;
    const RunOptions &run = options.run;
    if (options.autoSchedule) {
      auto choice = chooseSchedule(
          manifest, worldSize, run.microbatches, manifestStageCosts(manifest),
          manifestCostsSource(manifest), options.maxActivations);
      if (!choice)
        return choice.takeError();
      scheduleNote = choice->explanation;
      return JobPlan{std::move(choice->schedule), loss};
    }
    // A schedule CSV places each stage on the rank whose row runs it; a
    // named schedule on its own placement (Schedules.def).
    int numStages = static_cast<int>(manifest.stages.size());
    auto placement = !csv ? Placement::create(numStages, worldSize,
                                              schedulePlacement(run.schedule))
                          : placementFromCSV(*csv, numStages, worldSize,
                                             options.scheduleCSVPath);
    if (!placement)
      return placement.takeError();
    auto schedule = !csv ? buildTrainingSchedule(manifest, *placement,
                                                 run.schedule, run.microbatches)
                         : trainingScheduleFromCSV(manifest, *placement, *csv,
                                                   run.microbatches,
                                                   options.scheduleCSVPath);
    if (!schedule)
      return schedule.takeError();
    return JobPlan{std::move(*schedule), loss};
  };
  auto ctx = RankContext::create(manifestPath, env, options.run, planner,
                                 options.dataParallel);
  if (!ctx)
    return ctx.takeError();
  auto impl = std::make_unique<Impl>();
  impl->ctx = std::move(*ctx);
  impl->options = options;
  impl->scheduleNote = std::move(scheduleNote);
  impl->stats.rank = env.rank;
  if (impl->ctx->replicas() > 1)
    impl->stats.replica = impl->ctx->replica();
  if (options.seed)
    at::manual_seed(*options.seed + static_cast<uint64_t>(env.rank));
  for (auto &[index, stage] : impl->ctx->stages()) {
    impl->savedTraining[index] = stage.executable().isTraining();
    stage.executable().setTraining(true);
  }
  std::vector<at::Tensor> params = impl->parameters();
  if (!params.empty())
    impl->optimizer = createOptimizer(options, std::move(params));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

bool Trainer::needsInputs() const { return impl_->ctx->meta().readsInputs(); }
bool Trainer::needsTargets() const { return lossRank() == rank(); }
int Trainer::lossRank() const {
  return impl_->ctx->placement().rankOf(impl_->ctx->loss()->stage);
}
int Trainer::rank() const { return impl_->ctx->rank(); }
int Trainer::replica() const { return impl_->ctx->replica(); }
int Trainer::replicas() const { return impl_->ctx->replicas(); }
int Trainer::jobRank() const { return impl_->ctx->jobEnv().rank; }
std::string Trainer::weightsSha256() const {
  return tensorsSha256(impl_->parameters());
}
int Trainer::stageCount() const {
  return static_cast<int>(impl_->ctx->manifest().stages.size());
}
size_t Trainer::modelInputCount() const {
  return impl_->ctx->manifest().modelInputs.size();
}
const TrainStats &Trainer::stats() const { return impl_->stats; }
const StepRecord &Trainer::lastStep() const { return impl_->lastStep; }

const std::string &Trainer::scheduleNote() const { return impl_->scheduleNote; }

void Trainer::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->ctx->schedule(), impl_->ctx->rank(), os);
}

llvm::Expected<double> Trainer::step(const std::vector<c10::IValue> &inputs,
                                     const at::Tensor &target) {
  Impl &t = *impl_;
  RankContext &ctx = *t.ctx;
  auto start = std::chrono::steady_clock::now();
  int64_t traceStartUs = TraceRecorder::nowUs();
  int64_t sentBefore = ctx.transport().messagesSent();
  ctx.meta().clearCacheWritten();
  ++t.stats.step;
  if (t.optimizer)
    t.optimizer->zero_grad();
  const int64_t bytesBefore = MemoryMeter::current();
  MemoryMeter::resetPeak();

  ExecutorStep step;
  // Data parallel: this replica's slice of the batch.
  std::vector<c10::IValue> sliced;
  at::Tensor slicedTarget = target;
  if (ctx.replicas() > 1) {
    sliced = inputs;
    if (llvm::Error err = t.sliceForReplica(sliced, slicedTarget))
      return err;
  }
  const std::vector<c10::IValue> &batch = ctx.replicas() > 1 ? sliced : inputs;
  // With --device cuda the batch and the target go where the stages are.
  c10::Device device = ctx.device();
  auto onDevice = valuesOnDevice(batch, device, "the inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto targetOnDevice =
      torchCall("cannot move the target to " + device.str(), [&] {
        return slicedTarget.defined() ? slicedTarget.to(device) : slicedTarget;
      });
  if (!targetOnDevice)
    return targetOnDevice.takeError();
  if (llvm::Error err = ctx.prepare(*onDevice, step))
    return err;
  if (llvm::Error err = t.splitTarget(*targetOnDevice, step))
    return err;
  step.recompute = t.options.recompute;
  auto done = ctx.execute(step);
  if (!done)
    return done.takeError();
  if (needsTargets() && !std::isfinite(done->loss))
    return makeError(
        llvm::formatv("step {0}: the loss is {1}", t.stats.step, done->loss));
  if (llvm::Error err = t.sumTiedGradients())
    return err;
  // Data parallel: each stage's gradients summed over its
  // replicas, and the loss over the loss ranks' replicas.
  double loss = done->loss;
  if (ctx.replicas() > 1) {
    auto ms = t.allReduceReplicas();
    if (!ms)
      return ms.takeError();
    t.stats.allReduceMs = *ms;
    if (needsTargets()) {
      auto sum = allReduceScalar(*ctx.replicaTransport(), loss, "the loss");
      if (!sum)
        return sum.takeError();
      loss = *sum;
    }
  }
  auto updated =
      updateParameters(ctx, t.optimizer.get(), t.options, t.stats.step);
  if (!updated)
    return updated.takeError();
  ctx.finishStep();
  recordMark(step.trace, kStepEventName, traceStartUs);

  TrainStats &stats = t.stats;
  stats.metaSource = ctx.meta().source();
  stats.metaMessagesSent = done->metaMessagesSent;
  stats.messagesSent = ctx.transport().messagesSent() - sentBefore;
  stats.link = ctx.transport().linksUsed();
  stats.peakActivations = done->peakActivations;
  stats.cacheWritten = ctx.meta().cacheWritten();
  stats.peakBytes =
      MemoryMeter::installed() ? MemoryMeter::peak() - bytesBefore : -1;
  stats.stepMs = std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  StepRecord &record = t.lastStep;
  record.step = stats.step;
  record.loss = needsTargets() ? loss : std::nan("");
  record.lr = updated->lr;
  record.gradNorm = updated->gradNorm;
  record.samples = 0;
  for (const Signature &sig : step.signatures)
    record.samples += sig.rows;
  record.seconds = stats.stepMs / 1000;
  record.peakBytes = stats.peakBytes;
  return record.loss;
}

llvm::Expected<double> Trainer::evaluate(const std::vector<c10::IValue> &inputs,
                                         const at::Tensor &target) {
  Impl &t = *impl_;
  RankContext &ctx = *t.ctx;
  // The executor's training schedule always builds a graph and runs the
  // backward; the gradients it leaves are set aside and the step's put back.
  std::vector<at::Tensor> params = t.parameters();
  std::vector<at::Tensor> kept;
  for (at::Tensor &param : params) {
    kept.push_back(param.grad());
    param.mutable_grad() = at::Tensor();
  }
  for (auto &[index, stage] : ctx.stages())
    stage.executable().setTraining(false);
  auto restore = llvm::make_scope_exit([&] {
    for (auto &[index, stage] : ctx.stages())
      stage.executable().setTraining(true);
    for (size_t k = 0; k < params.size(); ++k)
      params[k].mutable_grad() = kept[k];
  });
  ExecutorStep step;
  // Every replica evaluates the whole batch: weights over its own rows.
  t.weightRows = 0;
  c10::Device device = ctx.device();
  auto onDevice = valuesOnDevice(inputs, device, "the evaluation inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto targetOnDevice =
      torchCall("cannot move the evaluation target to " + device.str(),
                [&] { return target.defined() ? target.to(device) : target; });
  if (!targetOnDevice)
    return targetOnDevice.takeError();
  if (llvm::Error err = ctx.prepare(*onDevice, step))
    return err;
  if (llvm::Error err = t.splitTarget(*targetOnDevice, step))
    return err;
  auto done = ctx.execute(step);
  if (!done)
    return done.takeError();
  ctx.finishStep();
  return needsTargets() ? done->loss : std::nan("");
}

std::vector<std::pair<std::string, at::Tensor>>
Trainer::namedParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto &[index, stage] : impl_->ctx->stages())
    for (const auto &named : stage.executable().namedParameters())
      out.emplace_back(llvm::formatv("stage {0}: {1}", index, named.name),
                       named.value);
  return out;
}

llvm::Error Trainer::saveGradients(llvm::StringRef path) const {
  auto grads = torchCall("cannot write '" + path + "'", [&] {
    c10::Dict<std::string, at::Tensor> grads;
    for (auto &[index, stage] : impl_->ctx->stages())
      for (const auto &named : stage.executable().namedParameters())
        if (named.value.grad().defined())
          grads.insert(named.name, named.value.grad().cpu());
    return grads;
  });
  if (!grads)
    return grads.takeError();
  return saveValue(path, c10::IValue(std::move(*grads)));
}

llvm::Error Trainer::checkSameData(llvm::StringRef digest) {
  RankContext &ctx = *impl_->ctx;
  std::vector<std::string> digests;
  if (llvm::Error err = gatherBytes(ctx.transport(), digest.str(), 0, digests,
                                    "the training data's digest"))
    return err;
  std::string verdict;
  if (ctx.rank() == 0) {
    int first = -1;
    for (int r = 0; r < static_cast<int>(digests.size()) && verdict.empty();
         ++r) {
      if (digests[r].empty())
        continue;
      if (first < 0)
        first = r;
      else if (digests[r] != digests[first])
        verdict = llvm::formatv(
                      "the training data on rank {0} differs from "
                      "the training data on rank {1} (sha256 {2} "
                      "vs {3}); every rank must read the same data",
                      ctx.jobRank(r), ctx.jobRank(first),
                      printable(llvm::StringRef(digests[r]).take_front(12)),
                      printable(llvm::StringRef(digests[first]).take_front(12)))
                      .str();
    }
  }
  if (llvm::Error err = broadcastBytes(ctx.transport(), verdict, 0,
                                       "the training data's check"))
    return err;
  if (!verdict.empty())
    return makeError(printable(verdict, 400));
  // Data parallel: a pipeline rank's replicas read alike too.
  if (Transport *replicas = ctx.replicaTransport()) {
    std::vector<std::string> theirs;
    if (llvm::Error err = gatherBytes(*replicas, digest.str(), 0, theirs,
                                      "the training data's digest"))
      return err;
    if (ctx.replica() == 0)
      for (size_t d = 1; d < theirs.size() && verdict.empty(); ++d)
        if (theirs[d] != theirs[0])
          verdict = llvm::formatv(
                        "the training data on rank {0} differs from the "
                        "training data on rank {1} (sha256 {2} vs {3}); "
                        "every rank must read the same data",
                        replicas->globalRank(static_cast<int>(d)),
                        replicas->globalRank(0),
                        printable(llvm::StringRef(theirs[d]).take_front(12)),
                        printable(llvm::StringRef(theirs[0]).take_front(12)))
                        .str();
    if (llvm::Error err =
            broadcastBytes(*replicas, verdict, 0, "the training data's check"))
      return err;
    if (!verdict.empty())
      return makeError(printable(verdict, 400));
  }
  return llvm::Error::success();
}

namespace {
/// What one rank wrote into a save's staged directory: removed again (its
/// files, the directories it made, then the staged directory if that is
/// now empty) unless the save succeeded, so that a rank whose peer died
/// mid-save leaves nothing behind; rank 0's StagedDirectory removes the
/// rest.
struct WrittenPart {
  std::string staged;
  std::vector<std::string> files, dirs;
  bool keep = false;
  ~WrittenPart() {
    if (keep || staged.empty())
      return;
    for (const std::string &file : files)
      llvm::sys::fs::remove(file);
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
      ::rmdir(it->c_str());
    ::rmdir(staged.c_str());
  }
};
} // namespace

/// Data parallel: runs `write` on the ranks of replica 0 (the
/// replicas hold the same state); the other replicas wait for it, so that
/// the job ends together. Without replicas, just `write`.
static llvm::Error onReplicaZero(RankContext &ctx,
                                 llvm::function_ref<llvm::Error()> write) {
  Transport *replicas = ctx.replicaTransport();
  if (!replicas)
    return write();
  if (ctx.replica() == 0)
    if (llvm::Error err = write())
      return err;
  return barrier(*replicas);
}

llvm::Error Trainer::save(llvm::StringRef dir) {
  return onReplicaZero(*impl_->ctx, [&] { return savePipeline(dir); });
}

llvm::Error Trainer::savePipeline(llvm::StringRef dir) {
  RankContext &ctx = *impl_->ctx;
  {
    OutputGuard guard;
    keepManifestFiles(guard, ctx.manifestPath(),
                      metaCacheDirOf(ctx.options(), ctx.manifestPath()));
    if (llvm::Error err = guard.claimReplacedDirectory("--save", dir))
      return err;
  }
  SaveExtras extras;
  extras.replaceable = [](llvm::StringRef d) {
    return checkEarlierOutput(d, "--save");
  };
  return impl_->saveDirectory(dir, extras);
}

llvm::Error Trainer::Impl::saveDirectory(llvm::StringRef dir,
                                         const SaveExtras &extras) {
  const int rank = ctx->rank();

  // 1. Rank 0 stages a directory beside `dir` and tells every rank where.
  std::optional<StagedDirectory> staged;
  std::string where;
  if (rank == 0) {
    auto created = StagedDirectory::create(dir);
    if (created)
      staged.emplace(std::move(*created));
    where = created ? "ok " + staged->path()
                    : "error " + llvm::toString(created.takeError());
  }
  if (llvm::Error err = broadcastBytes(ctx->transport(), where, 0,
                                       "the directory of the save"))
    return err;
  llvm::StringRef whereRef(where);
  if (whereRef.consume_front("error "))
    return makeError(rank == 0 ? whereRef.str()
                               : "rank 0 could not start the save: " + where);
  if (!whereRef.consume_front("ok "))
    return makeError("rank 0 sent a malformed save directory");
  std::string tmp = whereRef.str();
  WrittenPart ownFiles;
  ownFiles.staged = tmp;
  // Until this rank reports, rank 0 cannot commit: a signal that stops it
  // here (the launcher's SIGTERM when a peer died) removes the whole
  // staged directory, which no destructor would. Rank 0's StagedDirectory
  // does the same for rank 0.
  std::optional<RemovedOnSignal> removedOnSignal;
  if (rank != 0)
    removedOnSignal.emplace(tmp);

  // 2. Each rank writes its stages there, in the mode they were saved in,
  // and reports to rank 0 "ok\n" and an "INDEX SHA256" line per stage, or
  // "error MESSAGE".
  std::string hashes;
  llvm::Error written = [&]() -> llvm::Error {
    if (!llvm::sys::fs::is_directory(tmp))
      return makeError(llvm::formatv("rank {0} does not see the save's "
                                     "directory '{1}': every rank must save "
                                     "into one shared directory",
                                     rank, tmp)
                           .str());
    for (auto &entry : ctx->stages()) {
      // Named copies: lambdas cannot capture structured bindings in C++17.
      int index = entry.first;
      Stage &stage = entry.second;
      const StageInfo &info = ctx->manifest().stages[index];
      // Saved from the CPU, so that the file loads on any machine (a module
      // saved on CUDA names its device); to() keeps the parameters'
      // identity, so the optimizer still holds them after moving back.
      c10::Device device = ctx->device();
      auto bytes = torchCall("cannot save stage " + std::to_string(index), [&] {
        stage.executable().setTraining(savedTraining[index]);
        if (!device.is_cpu())
          stage.executable().to(c10::kCPU);
        std::ostringstream os;
        stage.executable().save(os);
        if (!device.is_cpu())
          stage.executable().to(device);
        stage.executable().setTraining(true);
        return os.str();
      });
      if (!bytes)
        return bytes.takeError();
      // The directories of a nested stage file, one by one below `tmp`:
      // never `tmp` itself, which rank 0 removes if it fails.
      llvm::SmallString<256> path(tmp);
      for (llvm::StringRef part : llvm::make_range(
               llvm::sys::path::begin(llvm::sys::path::parent_path(info.file)),
               llvm::sys::path::end(llvm::sys::path::parent_path(info.file)))) {
        llvm::sys::path::append(path, part);
        if (std::error_code ec = llvm::sys::fs::create_directory(path))
          return makeError("cannot create '" + path + "': " + ec.message());
        ownFiles.dirs.push_back(std::string(path));
      }
      path = tmp;
      llvm::sys::path::append(path, info.file);
      ownFiles.files.push_back(std::string(path));
      if (llvm::Error err =
              writeFileAtomically(path, [&](llvm::raw_ostream &os) {
                os.write(bytes->data(), bytes->size());
                return llvm::Error::success();
              }))
        return err;
      hashes += llvm::formatv("{0} {1}\n", index, sha256Hex(*bytes)).str();
    }
    if (!extras.write)
      return llvm::Error::success();
    std::vector<std::string> names;
    llvm::Error err = extras.write(tmp, names);
    for (const std::string &name : names) {
      llvm::SmallString<256> path(tmp);
      llvm::sys::path::append(path, name);
      ownFiles.files.push_back(std::string(path));
    }
    if (err)
      return err;
    for (const std::string &name : names) {
      llvm::SmallString<256> path(tmp);
      llvm::sys::path::append(path, name);
      auto hash = sha256File(path);
      if (!hash)
        return hash.takeError();
      hashes += "file " + name + " " + *hash + "\n";
    }
    return llvm::Error::success();
  }();
  llvm::Error failure = StagedDirectory::renamed(std::move(written), tmp, dir);
  std::string mine =
      failure ? "error " + llvm::toString(std::move(failure)) : "ok\n" + hashes;
  bool failedHere = llvm::StringRef(mine).startswith("error ");
  std::vector<std::string> parts;
  removedOnSignal.reset();
  if (llvm::Error err =
          gatherBytes(ctx->transport(), mine, 0, parts, "the saved stages"))
    return err;

  // 3. Rank 0 writes the manifest beside them and switches the directory
  // in, or discards it if any rank failed; every rank learns which.
  std::string outcome = "ok";
  if (rank == 0) {
    outcome = [&]() -> std::string {
      Manifest trained = ctx->manifest();
      std::map<std::string, std::string> files;
      for (int r = 0; r < ctx->env().worldSize; ++r) {
        llvm::StringRef part(parts[r]);
        if (part.consume_front("error "))
          return llvm::formatv("error rank {0} could not save: {1}", r,
                               printable(part, 400))
              .str();
        if (!part.consume_front("ok\n"))
          return llvm::formatv("error rank {0} sent a malformed save report", r)
              .str();
        llvm::SmallVector<llvm::StringRef, 8> rows;
        part.split(rows, '\n', -1, false);
        for (llvm::StringRef row : rows) {
          if (row.consume_front("file ")) {
            auto [name, hash] = row.rsplit(' ');
            files[name.str()] = hash.str();
            continue;
          }
          auto [index, hash] = row.split(' ');
          unsigned stage = 0;
          if (index.getAsInteger(10, stage) || stage >= trained.stages.size() ||
              hash.size() != 64)
            return llvm::formatv("error rank {0} sent a malformed stage "
                                 "hash '{1}'",
                                 r, printable(row))
                .str();
          trained.stages[stage].sha256 = hash.str();
        }
      }
      llvm::SmallString<256> path(tmp);
      llvm::sys::path::append(path, "manifest.json");
      llvm::Error err = staged->renamed(trained.save(path));
      if (!err && extras.last) {
        for (const StageInfo &info : trained.stages)
          files[info.file] = info.sha256;
        auto manifestHash = sha256File(path);
        err = manifestHash ? llvm::Error::success() : manifestHash.takeError();
        if (!err) {
          files["manifest.json"] = *manifestHash;
          err = staged->renamed(extras.last(tmp, files));
        }
      }
      if (!err)
        err = staged->commit(extras.replaceable);
      return err ? "error " + llvm::toString(std::move(err)) : "ok";
    }();
    if (outcome != "ok")
      staged->discard();
  }
  if (llvm::Error err =
          broadcastBytes(ctx->transport(), outcome, 0, "the save's outcome"))
    return err;
  llvm::StringRef result(outcome);
  if (result == "ok") {
    ownFiles.keep = true;
    return llvm::Error::success();
  }
  if (!result.consume_front("error "))
    return makeError("rank 0 sent a malformed save outcome");
  // The rank that failed has reported its own error already.
  if (failedHere)
    return makeError(llvm::StringRef(mine).drop_front(6));
  return makeError(rank == 0 ? result.str()
                             : "the save failed on rank 0: " + result.str());
}

// Checkpoints

int Trainer::stepsDone() const { return impl_->stats.step; }

std::vector<std::pair<std::string, at::Tensor>>
Trainer::Impl::stageParameters(int stage) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto &named :
       ctx->stages().at(stage).executable().namedParameters())
    out.emplace_back(named.name, named.value);
  return out;
}

llvm::Error Trainer::saveCheckpoint(llvm::StringRef dir, int keep) {
  return onReplicaZero(*impl_->ctx,
                       [&] { return saveCheckpointOfPipeline(dir, keep); });
}

llvm::Error Trainer::saveCheckpointOfPipeline(llvm::StringRef dir, int keep) {
  Impl &t = *impl_;
  RankContext &ctx = *t.ctx;
  const int step = t.stats.step;
  const int rank = ctx.rank();
  if (rank == 0)
    removeCheckpointParts(dir);
  llvm::SmallString<256> stepDir(dir);
  llvm::sys::path::append(stepDir, checkpointDirName(step));
  auto in = [](llvm::StringRef tmp, llvm::StringRef name) {
    llvm::SmallString<256> path(tmp);
    llvm::sys::path::append(path, name);
    return std::string(path);
  };
  SaveExtras extras;
  extras.replaceable = [](llvm::StringRef d) {
    return checkCheckpointContents(d);
  };
  extras.write = [&](llvm::StringRef tmp,
                     std::vector<std::string> &names) -> llvm::Error {
    for (auto &entry : ctx.stages()) {
      if (!t.optimizer)
        break;
      auto state = optimizerStateOf(*t.optimizer, t.options.optimizer,
                                    t.stageParameters(entry.first));
      if (!state)
        return state.takeError();
      names.push_back(optimizerFileName(entry.first));
      if (llvm::Error err = saveTensorDict(in(tmp, names.back()), *state))
        return err;
    }
    names.push_back(rngFileName(rank));
    if (llvm::Error err =
            saveTensorDict(in(tmp, names.back()), rngStateOf(ctx.device())))
      return err;
    checkpointTestPause(step, rank);
    return llvm::Error::success();
  };
  extras.last = [&](llvm::StringRef tmp,
                    const std::map<std::string, std::string> &hashes) {
    CheckpointInfo info;
    info.step = step;
    info.dataIndex = step;
    info.stages = stageCount();
    info.worldSize = ctx.env().worldSize;
    info.optimizer = t.options.optimizer;
    info.lr = t.options.lr;
    info.momentum = t.options.momentum;
    info.weightDecay = t.options.weightDecay;
    info.files = hashes;
    return writeFileAtomically(in(tmp, kCheckpointFile),
                               [&](llvm::raw_ostream &os) {
                                 os << checkpointJSON(info);
                                 return llvm::Error::success();
                               });
  };
  if (llvm::Error err = t.saveDirectory(stepDir, extras))
    return err;
  if (rank == 0)
    pruneCheckpoints(dir, keep, step);
  return llvm::Error::success();
}

llvm::Error Trainer::Impl::loadCheckpoint(const std::string &path,
                                          const CheckpointInfo &info) {
  const int stages = static_cast<int>(ctx->manifest().stages.size());
  if (info.stages != stages)
    return makeError(llvm::formatv("the checkpoint '{0}' has {1} stages, the "
                                   "manifest {2}",
                                   path, info.stages, stages)
                         .str());
  if (info.optimizer != options.optimizer)
    return makeError("the checkpoint '" + path + "' was trained with " +
                     "--optimizer " + optimizerName(info.optimizer) +
                     ", this run with " + optimizerName(options.optimizer) +
                     ": resume with the same optimizer");
  auto in = [&](llvm::StringRef name) {
    llvm::SmallString<256> p(path);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };
  auto saved = Manifest::load(in("manifest.json"));
  if (!saved)
    return saved.takeError();
  for (auto &entry : ctx->stages()) {
    const int index = entry.first;
    StageExecutable &ours = entry.second.executable();
    auto theirs = Stage::load(*saved, path, index);
    if (!theirs)
      return theirs.takeError();
    // Every parameter and buffer, by path, with its dtype and shape.
    std::map<std::string, at::Tensor> from;
    for (auto list : {theirs->executable().namedParameters(),
                      theirs->executable().namedBuffers()})
      for (NamedTensor &n : list)
        from[n.name] = n.value;
    std::vector<NamedTensor> to = ours.namedParameters();
    for (NamedTensor &n : ours.namedBuffers())
      to.push_back(n);
    if (to.size() != from.size())
      return makeError(llvm::formatv("stage {0} of the checkpoint '{1}' holds "
                                     "{2} tensors, the manifest's {3}",
                                     index, path, from.size(), to.size())
                           .str());
    for (NamedTensor &n : to) {
      auto it = from.find(n.name);
      if (it == from.end() || it->second.sizes() != n.value.sizes() ||
          it->second.dtype() != n.value.dtype())
        return makeError(llvm::formatv("stage {0} of the checkpoint '{1}' has "
                                       "no {2} '{3}' of the manifest's dtype "
                                       "and shape",
                                       index, path, "tensor", n.name)
                             .str());
      at::Tensor source = it->second;
      if (llvm::Error err = torchCall("cannot load '" + n.name + "'", [&] {
            at::NoGradGuard noGrad;
            n.value.copy_(source);
          }))
        return err;
    }
    std::string file = optimizerFileName(index);
    if (optimizer && info.files.count(file)) {
      auto state = loadTensorDict(in(file));
      if (!state)
        return state.takeError();
      if (llvm::Error err = setOptimizerState(*optimizer, options.optimizer,
                                              stageParameters(index), *state,
                                              "'" + in(file) + "'"))
        return err;
    }
  }
  std::string rng = rngFileName(ctx->rank());
  if (info.files.count(rng)) {
    auto state = loadTensorDict(in(rng));
    if (!state)
      return state.takeError();
    if (llvm::Error err = setRngState(*state))
      return err;
  }
  stats.step = info.step;
  return llvm::Error::success();
}

llvm::Expected<std::string> Trainer::resume(llvm::StringRef dir) {
  Impl &t = *impl_;
  RankContext &ctx = *t.ctx;
  const int rank = ctx.rank();
  // Rank 0 chooses (and verifies) the checkpoint; every rank loads its
  // part of it; every rank learns whether all could.
  std::string chosen;
  if (rank == 0) {
    auto found = findNewestCheckpoint(dir, "--resume");
    chosen = found ? "ok " + found->path
                   : "error " + llvm::toString(found.takeError());
  }
  if (llvm::Error err = broadcastBytes(ctx.transport(), chosen, 0,
                                       "the checkpoint to resume from"))
    return err;
  llvm::StringRef ref(chosen);
  if (ref.consume_front("error "))
    return makeError(rank == 0 ? ref.str()
                               : "rank 0 could not resume: " + ref.str());
  if (!ref.consume_front("ok "))
    return makeError("rank 0 sent a malformed checkpoint path");
  std::string path = ref.str();
  llvm::Error loaded = [&]() -> llvm::Error {
    auto info = readCheckpointInfo(path);
    if (!info)
      return info.takeError();
    return t.loadCheckpoint(path, *info);
  }();
  std::string mine =
      loaded ? "error " + llvm::toString(std::move(loaded)) : "ok";
  std::vector<std::string> parts;
  if (llvm::Error err = gatherBytes(ctx.transport(), mine, 0, parts,
                                    "the resumed checkpoint"))
    return err;
  std::string outcome = "ok";
  for (int r = 0; rank == 0 && r < static_cast<int>(parts.size()); ++r)
    if (parts[r] != "ok") {
      outcome = llvm::formatv("{0} {1}", r, parts[r]).str();
      break;
    }
  if (llvm::Error err =
          broadcastBytes(ctx.transport(), outcome, 0, "the resume's outcome"))
    return err;
  if (outcome == "ok")
    return path;
  if (mine != "ok")
    return makeError(llvm::StringRef(mine).drop_front(6));
  auto [who, what] = llvm::StringRef(outcome).split(' ');
  return makeError("the resume failed on rank " + who + ": " +
                   what.drop_front(6));
}

llvm::Error Trainer::finish() { return impl_->ctx->finish(); }

} // namespace ppc
