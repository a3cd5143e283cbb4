//===- runtime/Trainer.cpp - Pipeline training ----------------------------===//
//
// This file implements Trainer (see Trainer.h): a training job on a rank
// context (RankContext.h) whose schedule has the executor's backward actions
// (Executor.h), the gradients of tied parameters, the optimizer, and saving
// the stages.
//
//===----------------------------------------------------------------------===//
#include "runtime/Trainer.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/NumberRules.h"
#include "lib/OutputGuard.h"
#include "lib/SafeRead.h"
#include "lib/TensorIO.h"
#include "runtime/Blas.h"
#include "runtime/Collectives.h"
#include "runtime/MemoryMeter.h"
#include "runtime/Microbatch.h"
#include "runtime/RankContext.h"
#include "runtime/Trace.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>
#include <cstdio>
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
         (peakBytes < 0 ? "" : " peak_bytes=" + std::to_string(peakBytes));
}

/// The most bytes a schedule CSV may have.
constexpr uint64_t kMaxScheduleCSVBytes = 64 << 20;

struct Trainer::Impl {
  std::unique_ptr<RankContext> ctx;
  TrainOptions options;
  TrainStats stats;
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
};

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
  for (int m = 0; m < count; ++m)
    step.lossWeights.push_back(rows > 0 ? double(parts[m]) / double(rows) : 0);
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
  auto ctx = RankContext::create(manifestPath, env, options.run, planner);
  if (!ctx)
    return ctx.takeError();
  auto impl = std::make_unique<Impl>();
  impl->ctx = std::move(*ctx);
  impl->options = options;
  impl->scheduleNote = std::move(scheduleNote);
  impl->stats.rank = env.rank;
  if (options.seed)
    at::manual_seed(*options.seed + static_cast<uint64_t>(env.rank));
  for (auto &[index, stage] : impl->ctx->stages()) {
    impl->savedTraining[index] = stage.executable().isTraining();
    stage.executable().setTraining(true);
  }
  std::vector<at::Tensor> params = impl->parameters();
  if (!params.empty()) {
    if (options.optimizer == OptimizerKind::SGD)
      impl->optimizer = std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(options.lr)
                      .momentum(options.momentum)
                      .weight_decay(options.weightDecay));
    else
      impl->optimizer = std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(options.lr)
                      .weight_decay(options.weightDecay));
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

bool Trainer::needsInputs() const { return impl_->ctx->meta().readsInputs(); }
bool Trainer::needsTargets() const { return lossRank() == rank(); }
int Trainer::lossRank() const {
  return impl_->ctx->placement().rankOf(impl_->ctx->loss()->stage);
}
int Trainer::rank() const { return impl_->ctx->rank(); }
int Trainer::stageCount() const {
  return static_cast<int>(impl_->ctx->manifest().stages.size());
}
size_t Trainer::modelInputCount() const {
  return impl_->ctx->manifest().modelInputs.size();
}
const TrainStats &Trainer::stats() const { return impl_->stats; }

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
  // With --device cuda the batch and the target go where the stages are.
  c10::Device device = ctx.device();
  auto onDevice = valuesOnDevice(inputs, device, "the inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto targetOnDevice =
      torchCall("cannot move the target to " + device.str(),
                [&] { return target.defined() ? target.to(device) : target; });
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
  if (t.optimizer)
    if (llvm::Error err = torchCall("the optimizer step failed",
                                    [&] { t.optimizer->step(); }))
      return err;
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
        verdict =
            llvm::formatv(
                "the training data on rank {0} differs from "
                "the training data on rank {1} (sha256 {2} "
                "vs {3}); every rank must read the same data",
                r, first, printable(llvm::StringRef(digests[r]).take_front(12)),
                printable(llvm::StringRef(digests[first]).take_front(12)))
                .str();
    }
  }
  if (llvm::Error err = broadcastBytes(ctx.transport(), verdict, 0,
                                       "the training data's check"))
    return err;
  if (!verdict.empty())
    return makeError(printable(verdict, 400));
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

llvm::Error Trainer::save(llvm::StringRef dir) {
  RankContext &ctx = *impl_->ctx;
  const int rank = ctx.rank();
  {
    OutputGuard guard;
    keepManifestFiles(guard, ctx.manifestPath(),
                      metaCacheDirOf(ctx.options(), ctx.manifestPath()));
    if (llvm::Error err = guard.claimReplacedDirectory("--save", dir))
      return err;
  }
  auto replaceable = [](llvm::StringRef d) {
    return checkEarlierOutput(d, "--save");
  };

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
  if (llvm::Error err = broadcastBytes(ctx.transport(), where, 0,
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
    for (auto &entry : ctx.stages()) {
      // Named copies: lambdas cannot capture structured bindings in C++17.
      int index = entry.first;
      Stage &stage = entry.second;
      const StageInfo &info = ctx.manifest().stages[index];
      // Saved from the CPU, so that the file loads on any machine (a module
      // saved on CUDA names its device); to() keeps the parameters'
      // identity, so the optimizer still holds them after moving back.
      c10::Device device = ctx.device();
      auto bytes = torchCall("cannot save stage " + std::to_string(index), [&] {
        stage.executable().setTraining(impl_->savedTraining[index]);
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
    return llvm::Error::success();
  }();
  llvm::Error failure = StagedDirectory::renamed(std::move(written), tmp, dir);
  std::string mine =
      failure ? "error " + llvm::toString(std::move(failure)) : "ok\n" + hashes;
  bool failedHere = llvm::StringRef(mine).startswith("error ");
  std::vector<std::string> parts;
  if (llvm::Error err =
          gatherBytes(ctx.transport(), mine, 0, parts, "the saved stages"))
    return err;

  // 3. Rank 0 writes the manifest beside them and switches the directory
  // in, or discards it if any rank failed; every rank learns which.
  std::string outcome = "ok";
  if (rank == 0) {
    outcome = [&]() -> std::string {
      Manifest trained = ctx.manifest();
      for (int r = 0; r < ctx.env().worldSize; ++r) {
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
      if (!err)
        err = staged->commit(replaceable);
      return err ? "error " + llvm::toString(std::move(err)) : "ok";
    }();
    if (outcome != "ok")
      staged->discard();
  }
  if (llvm::Error err =
          broadcastBytes(ctx.transport(), outcome, 0, "the save's outcome"))
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

llvm::Error Trainer::finish() { return impl_->ctx->finish(); }

} // namespace ppc
