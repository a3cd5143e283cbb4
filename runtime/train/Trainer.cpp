//===- runtime/train/Trainer.cpp - Pipeline training ----------------------===//
//
// This file implements Trainer (see Trainer.h): a training job on a rank
// context (RankContext.h) whose schedule has the executor's backward actions
// (Executor.h), the gradients of tied parameters and the optimizer; saving
// and checkpoints are runtime/train/Save.h's.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Trainer.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/NumberRules.h"
#include "lib/OptionName.h"
#include "lib/SafeRead.h"
#include "lib/Stage.h"
#include "lib/TensorIO.h"
#include "runtime/exec/Microbatch.h"
#include "runtime/exec/RankContext.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/Collectives.h"
#include "runtime/platform/Blas.h"
#include "runtime/platform/MemoryMeter.h"
#include "runtime/schedule/Plan.h"
#include "runtime/schedule/ScheduleCSV.h"
#include "runtime/train/DataParallel.h"
#include "runtime/train/Optimizer.h"
#include "runtime/train/Save.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <set>
#include <tuple>
#include <type_traits>

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
         memoryStatsText() + (link.empty() ? "" : " link=" + link) +
         " blas=" + blasStatsName(loadedBlas()) +
         // Data parallel
         (replica < 0 ? std::string()
                      : llvm::formatv(" replica={0} allreduce_ms={1:f3}",
                                      replica, allReduceMs)
                            .str()) +
         (peakBytes < 0 ? "" : " peak_bytes=" + std::to_string(peakBytes));
}

/// Where the schedule comes from: options.run.schedule, --schedule auto or
/// the schedule CSV, read here. A given CSV is run even when empty: its
/// reader says why it cannot be.
static llvm::Expected<ScheduleRequest>
scheduleRequest(const TrainOptions &options) {
  ScheduleRequest request;
  request.kind = options.run.schedule;
  request.microbatches = options.run.microbatches;
  request.autoSchedule = options.autoSchedule;
  request.maxActivations = options.maxActivations;
  if (!options.scheduleCSVPath.empty()) {
    auto text = readFileBounded(options.scheduleCSVPath, kMaxScheduleCSVBytes,
                                "schedule CSV");
    if (!text)
      return text.takeError();
    request.csv = (*text)->getBuffer().str();
    request.csvName = options.scheduleCSVPath;
  }
  if (llvm::Error err = request.check())
    return err;
  return request;
}

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
  /// Puts a step's batch in `step`: this replica's slice of `inputs` and
  /// `target` (data parallel), on the stages' device, split into
  /// microbatches.
  llvm::Error placeBatch(const std::vector<c10::IValue> &inputs,
                         const at::Tensor &target, ExecutorStep &step);
  /// What saving reads and resuming sets (Save.h).
  TrainedPipeline pipeline() {
    return {*ctx, savedTraining, optimizer.get(), options};
  }

  // Data parallel
  /// The loss terms the weights divide by (LossFunction::terms: rows, or a
  /// token loss's tokens) of the whole batch, of which this replica takes a
  /// slice; unset: the microbatches' own.
  std::optional<int64_t> wholeTerms;
  /// This replica's slice of the batch's `inputs` and `target` (each
  /// at::tensor_split into replicas along dim 0); sets wholeTerms.
  llvm::Error sliceForReplica(std::vector<c10::IValue> &inputs,
                              at::Tensor &target);
  /// LossFunction::terms of `target`, torch's errors turned into one line.
  llvm::Expected<int64_t> countTerms(const at::Tensor &target) {
    return torchCall("cannot count the target's labels",
                     [&] { return ctx->loss()->terms(target); });
  }
  /// Sums each stage's untied gradients beside the schedule
  /// (LaunchEnv::overlapAllReduce, with replicas); null otherwise. Declared
  /// after ctx, whose replica transport it uses: it is destroyed first.
  std::unique_ptr<OverlappedAllReduce> overlap;
  /// Sets `overlap` up.
  llvm::Error planOverlap();
  /// Sums each stage's gradients over its replicas: waits for what
  /// `overlap` started, then sums the rest (every gradient without the
  /// overlap). Returns the milliseconds the step waited.
  llvm::Expected<double> allReduceReplicas();
};

llvm::Error Trainer::Impl::sliceForReplica(std::vector<c10::IValue> &inputs,
                                           at::Tensor &target) {
  const int replicas = ctx->replicas(), replica = ctx->replica();
  wholeTerms.reset();
  if (target.defined() && target.dim() > 0) {
    auto terms = countTerms(target);
    if (!terms)
      return terms.takeError();
    wholeTerms = *terms;
  }
  auto slice = [&](const at::Tensor &t, const char *what) -> llvm::Error {
    if (t.size(0) < replicas)
      return makeError(llvm::formatv("the {0} has {1} row{2}; {4} {3} needs "
                                     "at least one per replica",
                                     what, t.size(0), t.size(0) == 1 ? "" : "s",
                                     replicas, optionName(Option::DataParallel))
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
      return makeError(llvm::formatv("{4} {0} exceeds the smallest replica's "
                                     "slice of the batch ({1} of {2} rows over "
                                     "{5} {3})",
                                     microbatches, smallest, rows, replicas,
                                     optionName(Option::Microbatches),
                                     optionName(Option::DataParallel))
                           .str());
    input = at::tensor_split(input.toTensor(), replicas)[replica];
  }
  if (wholeTerms) {
    if (llvm::Error err = slice(target, "target"))
      return err;
    target = at::tensor_split(target, replicas)[replica];
  }
  return llvm::Error::success();
}

llvm::Error Trainer::Impl::planOverlap() {
  // The tied parameters wait for the tied sum, after the schedule.
  std::map<int, std::vector<at::Tensor>> params;
  if (llvm::Error err =
          torchCall("cannot find the tied parameters of this rank", [&] {
            std::set<const void *> tied;
            for (const TiedParameter &param : ctx->manifest().tiedParameters)
              for (const TiedParameter::Use &use : param.uses)
                if (ctx->stages().count(use.stage))
                  tied.insert(ctx->stages()
                                  .at(use.stage)
                                  .executable()
                                  .tensorAt(use.path)
                                  .unsafeGetTensorImpl());
            for (auto &[index, stage] : ctx->stages())
              for (const at::Tensor &t : stage.executable().parameters())
                if (!tied.count(t.unsafeGetTensorImpl()))
                  params[index].push_back(t);
          }))
    return err;
  std::map<int, int> backwards;
  for (const Action &a : ctx->schedule().ranks[ctx->rank()])
    if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight)
      ++backwards[a.stage];
  // A CPU stage's backward runs on this thread, so its buckets can start as
  // their gradients are accumulated; a CUDA one's, at the stage's end.
  auto made =
      OverlappedAllReduce::create(*ctx->replicaTransport(), std::move(params),
                                  backwards, ctx->device().is_cpu());
  if (!made)
    return made.takeError();
  overlap = std::move(*made);
  return llvm::Error::success();
}

llvm::Expected<double> Trainer::Impl::allReduceReplicas() {
  auto start = std::chrono::steady_clock::now();
  if (overlap)
    if (auto times = overlap->finish(ctx->trace()); !times)
      return times.takeError();
  for (auto &[index, stage] : ctx->stages()) {
    // What the overlap does not sum: the tied parameters (summed over the
    // pipeline by now), or all of them. The sum of each element is the
    // same whichever bucket it travels in.
    std::vector<at::Tensor> params;
    for (const at::Tensor &t : stage.executable().parameters())
      if (!overlap || !overlap->covers(index, t))
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
  if (ctx->placement().rankOf(ctx->loss()->stage) != ctx->rank())
    return llvm::Error::success();
  if (!target.defined() || target.dim() == 0)
    return makeError("the target has no batch dimension");
  if (target.size(0) != rows)
    return makeError(llvm::formatv("the target has {0} rows, the batch {1}",
                                   target.size(0), rows)
                         .str());
  // Over the whole batch's terms (with replicas, wholeTerms); a token
  // loss's microbatches are sums over their tokens.
  const LossFunction &loss = *ctx->loss();
  auto whole =
      wholeTerms ? llvm::Expected<int64_t>(*wholeTerms) : countTerms(target);
  if (!whole)
    return whole.takeError();
  bool tokens = loss.sumsTokens(target);
  if (tokens && *whole == 0)
    return makeError(llvm::formatv(
        "every label of the batch is the ignore index {0}{1}: there is "
        "nothing to train",
        loss.ignoreIndex,
        loss.kind == LossKind::CausalLM ? " (after the shift)" : ""));
  for (int m = 0; m < count; ++m)
    step.lossWeights.push_back(tokens ? 1.0 / double(*whole)
                                      : double(parts[m]) / double(*whole));
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
                                   "{2})",
                                   loss.modelOutput, kindName(kind),
                                   optionName(Option::LossOutput))
                         .str());
  loss.stage = ref.stage;
  loss.output = ref.output;
  return llvm::Error::success();
}

/// Adds what every rank must train alike to `record` (runtime/link/
/// Agreement.h), named by optionName(), unless recorded already;
/// RankContext adds the run's options and the manifest.
static void recordTrainOptions(const TrainOptions &options, Agreement &record) {
  auto text = [&](Option option, llvm::StringRef value) {
    record.setDefault(optionName(option), value);
  };
  auto number = [&](Option option, double value) {
    if (!record.has(optionName(option)))
      record.setNumber(optionName(option), value);
  };
  auto optional = [&](Option option, const auto &value) {
    if (!record.has(optionName(option)))
      record.set(optionName(option), value ? std::to_string(*value) : "",
                 value ? "" : "none");
  };
  text(Option::Loss, lossName(options.loss));
  text(Option::LossOutput, std::to_string(options.lossOutput));
  text(Option::IgnoreIndex, std::to_string(options.ignoreIndex));
  text(Option::Optimizer, optimizerName(options.optimizer));
  number(Option::Lr, options.lr);
  number(Option::Momentum, options.momentum);
  number(Option::WeightDecay, options.weightDecay);
  number(Option::ClipGradNorm, options.clipGradNorm);
  text(Option::LrSchedule, lrScheduleName(options.lrSchedule.kind));
  text(Option::WarmupSteps, std::to_string(options.lrSchedule.warmupSteps));
  number(Option::MinLr, options.lrSchedule.minLr);
  if (options.autoSchedule)
    text(Option::Schedule, "auto");
  optional(Option::MaxActivations, options.maxActivations);
  if (!record.has(optionName(Option::ScheduleCSV)))
    record.setFileDigest(optionName(Option::ScheduleCSV),
                         options.scheduleCSVPath);
  text(Option::DataParallel, std::to_string(options.dataParallel));
  text(Option::Recompute, options.recompute ? "on" : "off");
  optional(Option::Seed, options.seed);
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
  auto request = scheduleRequest(options);
  if (!request)
    return request.takeError();
  std::string scheduleNote;
  auto planner = [&](const Manifest &manifest,
                     int worldSize) -> llvm::Expected<JobPlan> {
    LossSpec loss;
    loss.kind = options.loss;
    loss.ignoreIndex = options.ignoreIndex;
    loss.modelOutput = options.lossOutput;
    if (llvm::Error err = resolveLoss(manifest, loss))
      return err;
    auto plan = planSchedule(manifest, worldSize, *request);
    if (!plan)
      return plan.takeError();
    scheduleNote = std::move(plan->note);
    return JobPlan{std::move(plan->schedule), loss};
  };
  RunOptions run = options.run;
  recordTrainOptions(options, run.agreement);
  // The replicas' all-reduce messages come in a different order with and
  // without the overlap.
  if (options.dataParallel > 1)
    run.agreement.setDefault("PPC_OVERLAP_ALLREDUCE",
                             env.overlapAllReduce ? "1" : "0");
  // Replicas: the rank context runs this rank's pipeline of the mesh.
  std::optional<PipelineMesh> mesh;
  if (options.dataParallel != 1) {
    auto made = pipelineMesh(env, options.dataParallel);
    if (!made)
      return made.takeError();
    mesh = std::move(*made);
  }
  auto ctx = RankContext::create(manifestPath, env, run, planner,
                                 mesh ? &*mesh : nullptr);
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
  if (impl->ctx->replicas() > 1 && env.overlapAllReduce)
    if (llvm::Error err = impl->planOverlap())
      return err;
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
std::vector<std::string> Trainer::modelInputNames() const {
  std::vector<std::string> names;
  for (const ModelInput &in : impl_->ctx->manifest().modelInputs)
    names.push_back(in.name);
  return names;
}
const TrainStats &Trainer::stats() const { return impl_->stats; }
const StepRecord &Trainer::lastStep() const { return impl_->lastStep; }

const std::string &Trainer::scheduleNote() const { return impl_->scheduleNote; }

void Trainer::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->ctx->schedule(), impl_->ctx->rank(), os);
}

llvm::Error Trainer::Impl::placeBatch(const std::vector<c10::IValue> &inputs,
                                      const at::Tensor &target,
                                      ExecutorStep &step) {
  // Data parallel: this replica's slice of the batch.
  std::vector<c10::IValue> sliced;
  at::Tensor slicedTarget = target;
  if (ctx->replicas() > 1) {
    sliced = inputs;
    if (llvm::Error err = sliceForReplica(sliced, slicedTarget))
      return err;
  }
  const std::vector<c10::IValue> &batch = ctx->replicas() > 1 ? sliced : inputs;
  // With --device cuda the batch and the target go where the stages are.
  c10::Device device = ctx->device();
  auto onDevice = valuesOnDevice(batch, device, "the inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto targetOnDevice =
      torchCall("cannot move the target to " + device.str(), [&] {
        return slicedTarget.defined() ? slicedTarget.to(device) : slicedTarget;
      });
  if (!targetOnDevice)
    return targetOnDevice.takeError();
  if (llvm::Error err = ctx->prepare(*onDevice, step))
    return err;
  return splitTarget(*targetOnDevice, step);
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
  if (llvm::Error err = t.placeBatch(inputs, target, step))
    return err;
#define PPC_EXECUTOR_OPTION(NAME)                                              \
  static_assert(                                                               \
      std::is_same_v<decltype(step.NAME), decltype(t.options.NAME)>);          \
  step.NAME = t.options.NAME;
#include "runtime/train/TrainOptions.def"
  // Data parallel: the all-reduce starts as the stages' last backwards
  // finish the gradients; whatever ends the step early takes it back.
  if (t.overlap) {
    t.overlap->beginStep();
    step.afterWeightGradients = [&t](int stage) {
      t.overlap->stageDone(stage);
      return llvm::Error::success();
    };
  }
  auto settle = llvm::make_scope_exit([&] {
    if (t.overlap)
      t.overlap->abandon();
  });
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
  // The forwards of the training schedule alone, without a graph: the
  // parameters' gradients are not touched.
  for (auto &[index, stage] : ctx.stages())
    stage.executable().setTraining(false);
  auto restore = llvm::make_scope_exit([&] {
    for (auto &[index, stage] : ctx.stages())
      stage.executable().setTraining(true);
  });
  ExecutorStep step;
  // Every replica evaluates the whole batch: weights over its own rows.
  t.wholeTerms.reset();
  c10::Device device = ctx.device();
  auto onDevice = valuesOnDevice(inputs, device, "the evaluation inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto targetOnDevice =
      torchCall("cannot move the evaluation target to " + device.str(),
                [&] { return target.defined() ? target.to(device) : target; });
  if (!targetOnDevice)
    return targetOnDevice.takeError();
  if (llvm::Error err = ctx.prepareEvaluation(*onDevice, step))
    return err;
  if (llvm::Error err = t.splitTarget(*targetOnDevice, step))
    return err;
  auto done = ctx.execute(step);
  if (!done)
    return done.takeError();
  ctx.finishStep();
  return needsTargets() ? done->loss : std::nan("");
}

int64_t Trainer::lossTerms(const at::Tensor &target) const {
  return impl_->ctx->loss()->terms(target);
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

llvm::Error Trainer::save(llvm::StringRef dir) {
  return saveTrained(impl_->pipeline(), dir);
}

// Checkpoints

int Trainer::stepsDone() const { return impl_->stats.step; }

llvm::Error Trainer::saveCheckpoint(llvm::StringRef dir, int keep) {
  return saveCheckpointAfter(impl_->pipeline(), impl_->stats.step, dir, keep);
}

llvm::Expected<std::string> Trainer::resume(llvm::StringRef dir) {
  auto resumed = resumeCheckpoint(impl_->pipeline(), dir);
  if (!resumed)
    return resumed.takeError();
  impl_->stats.step = resumed->step;
  return resumed->path;
}

llvm::Error Trainer::finish() { return impl_->ctx->finish(); }

} // namespace ppc
