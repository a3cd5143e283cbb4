//===- runtime/Trainer.cpp - Pipeline training ----------------------------===//
//
// This file implements Trainer (see Trainer.h) on Pipeline's internals
// (PipelineImpl.h) and the executor's backward actions (Executor.h): the
// gradients of tied parameters, the optimizer, and saving the stages.
//
//===----------------------------------------------------------------------===//
#include "runtime/Trainer.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/SafeRead.h"
#include "lib/TensorIO.h"
#include "runtime/Microbatch.h"
#include "runtime/PipelineImpl.h"

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
#include <sstream>

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
                       cacheWritten ? 1 : 0);
}

/// The most bytes a schedule CSV may have.
constexpr uint64_t kMaxScheduleCSVBytes = 64 << 20;

struct Trainer::Impl {
  std::unique_ptr<Pipeline::Impl> core;
  TrainOptions options;
  TrainStats stats;
  /// Whether each stage's module was saved in training mode.
  std::map<int, bool> savedTraining;
  std::unique_ptr<torch::optim::Optimizer> optimizer;

  Pipeline::Impl &p() { return *core; }
  /// Every parameter of this rank's stages.
  std::vector<at::Tensor> parameters();
  /// Sums the gradients of each tied parameter over its copies.
  llvm::Error sumTiedGradients();
  /// Splits the target like the inputs; checks its rows.
  llvm::Error splitTarget(const at::Tensor &target, ExecutorStep &step);
};

std::vector<at::Tensor> Trainer::Impl::parameters() {
  std::vector<at::Tensor> out;
  for (auto &[index, stage] : p().stages)
    for (const at::Tensor &t : stage.executable().parameters())
      out.push_back(t);
  return out;
}

/// The gradient of `param`, zeros where none was computed.
static at::Tensor gradientOf(const at::Tensor &param) {
  return param.grad().defined() ? param.grad() : at::zeros_like(param);
}

llvm::Error Trainer::Impl::sumTiedGradients() {
  Pipeline::Impl &core = p();
  const int channel = core.schedule.channelCount();
  Transport &transport = *core.transport;
  for (size_t t = 0; t < core.manifest.tiedParameters.size(); ++t) {
    const TiedParameter &tied = core.manifest.tiedParameters[t];
    std::vector<at::Tensor> local;
    std::vector<int> ranks;
    for (const TiedParameter::Use &use : tied.uses) {
      int r = core.placement.rankOf(use.stage);
      if (!llvm::is_contained(ranks, r))
        ranks.push_back(r);
      if (r == core.env.rank)
        local.push_back(
            core.stages.at(use.stage).executable().tensorAt(use.path));
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
    // The lowest rank adds the others' sums in rank order and sends the
    // total back, so every copy gets the very same tensor.
    const int owner = ranks[0];
    if (ranks.size() > 1) {
      if (core.env.rank == owner) {
        for (size_t k = 1; k < ranks.size(); ++k) {
          at::Tensor part = at::empty_like(*sum);
          if (llvm::Error err = transport.recv(part, ranks[k], channel, what))
            return err;
          sum->add_(part);
        }
        for (size_t k = 1; k < ranks.size(); ++k)
          if (llvm::Error err = transport.send(*sum, ranks[k], channel, what))
            return err;
      } else {
        if (llvm::Error err = transport.send(*sum, owner, channel, what))
          return err;
        if (llvm::Error err = transport.flushSends())
          return err;
        if (llvm::Error err = transport.recv(*sum, owner, channel, what))
          return err;
      }
    }
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
  for (const std::string &sig : step.signatures) {
    parts.push_back(signatureBatchSize(sig));
    rows += parts.back();
  }
  for (int m = 0; m < count; ++m)
    step.lossWeights.push_back(rows > 0 ? double(parts[m]) / double(rows) : 0);
  if (!p().loss || p().loss->stage < 0 ||
      p().placement.rankOf(p().loss->stage) != p().env.rank)
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

llvm::Expected<std::unique_ptr<Trainer>>
Trainer::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                const TrainOptions &options) {
  auto number = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", x);
    return std::string(text);
  };
  if (!(options.lr > 0) || !std::isfinite(options.lr))
    return makeError("--lr " + number(options.lr) + " must be positive");
  if (!(options.momentum >= 0) || !std::isfinite(options.momentum))
    return makeError("--momentum " + number(options.momentum) +
                     " must not be negative");
  if (!(options.weightDecay >= 0) || !std::isfinite(options.weightDecay))
    return makeError("--weight-decay " + number(options.weightDecay) +
                     " must not be negative");
  std::string csv;
  if (!options.scheduleCSVPath.empty()) {
    auto text = readFileBounded(options.scheduleCSVPath, kMaxScheduleCSVBytes,
                                "schedule CSV");
    if (!text)
      return text.takeError();
    csv = (*text)->getBuffer().str();
  }
  LossSpec loss;
  loss.kind = options.loss;
  loss.modelOutput = options.lossOutput;
  auto core = Pipeline::Impl::create(manifestPath, env, options.run, loss,
                                     std::move(csv));
  if (!core)
    return core.takeError();
  auto impl = std::make_unique<Impl>();
  impl->core = std::move(*core);
  impl->options = options;
  impl->stats.rank = env.rank;
  for (auto &[index, stage] : impl->core->stages) {
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

bool Trainer::needsInputs() const { return impl_->core->readsInputs; }
bool Trainer::needsTargets() const { return lossRank() == rank(); }
int Trainer::lossRank() const {
  return impl_->core->placement.rankOf(impl_->core->loss->stage);
}
int Trainer::rank() const { return impl_->core->env.rank; }
size_t Trainer::modelInputCount() const {
  return impl_->core->manifest.modelInputs.size();
}
const TrainStats &Trainer::stats() const { return impl_->stats; }

void Trainer::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->core->schedule, impl_->core->env.rank, os);
}

llvm::Expected<double> Trainer::step(const std::vector<c10::IValue> &inputs,
                                     const at::Tensor &target) {
  Impl &t = *impl_;
  Pipeline::Impl &core = t.p();
  auto start = std::chrono::steady_clock::now();
  int64_t sentBefore = core.transport->messagesSent();
  core.stats.cacheWritten = false;
  ++t.stats.step;
  if (t.optimizer)
    t.optimizer->zero_grad();

  ExecutorStep step;
  std::vector<std::string> fresh;
  // With --device cuda the batch and the target go where the stages are.
  c10::Device device = core.transport->device();
  auto onDevice = valuesOnDevice(inputs, device, "the inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto targetOnDevice =
      torchCall("cannot move the target to " + device.str(),
                [&] { return target.defined() ? target.to(device) : target; });
  if (!targetOnDevice)
    return targetOnDevice.takeError();
  if (llvm::Error err = core.prepareStep(*onDevice, step, fresh))
    return err;
  if (llvm::Error err = t.splitTarget(*targetOnDevice, step))
    return err;
  auto done = execute(core.plan, step);
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
  core.finishStep(fresh);

  TrainStats &stats = t.stats;
  stats.metaSource = core.stats.metaSource;
  stats.metaMessagesSent = done->metaMessagesSent;
  stats.messagesSent = core.transport->messagesSent() - sentBefore;
  stats.peakActivations = done->peakActivations;
  stats.cacheWritten = core.stats.cacheWritten;
  stats.stepMs = std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  return needsTargets() ? done->loss : std::nan("");
}

std::vector<std::pair<std::string, at::Tensor>>
Trainer::namedParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto &[index, stage] : impl_->core->stages)
    for (const auto &named : stage.executable().namedParameters())
      out.emplace_back(llvm::formatv("stage {0}: {1}", index, named.name),
                       named.value);
  return out;
}

llvm::Error Trainer::saveGradients(llvm::StringRef path) const {
  auto grads = torchCall("cannot write '" + path + "'", [&] {
    c10::Dict<std::string, at::Tensor> grads;
    for (auto &[index, stage] : impl_->core->stages)
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
  Pipeline::Impl &core = impl_->p();
  std::string from = manifestDirectory(core.manifestPath);
  bool same = false;
  if (!llvm::sys::fs::equivalent(from, dir, same) && same)
    return makeError("--save '" + dir +
                     "' is the directory of the manifest being trained; "
                     "choose another");
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return makeError("cannot create '" + dir + "': " + ec.message());

  // Each rank writes its stages, in the mode they were saved in.
  std::string lines;
  for (auto &entry : core.stages) {
    // Named copies: lambdas cannot capture structured bindings in C++17.
    int index = entry.first;
    Stage &stage = entry.second;
    const StageInfo &info = core.manifest.stages[index];
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, info.file);
    if (std::error_code ec = llvm::sys::fs::create_directories(
            llvm::sys::path::parent_path(path)))
      return makeError("cannot create the directory of '" + path +
                       "': " + ec.message());
    // Saved from the CPU, so that the file loads on any machine (a module
    // saved on CUDA names its device); to() keeps the parameters' identity,
    // so the optimizer still holds them after moving back.
    c10::Device device = core.transport->device();
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
    if (llvm::Error err = writeFileAtomically(path, [&](llvm::raw_ostream &os) {
          os.write(bytes->data(), bytes->size());
          return llvm::Error::success();
        }))
      return err;
    lines += llvm::formatv("{0} {1}\n", index, sha256Hex(*bytes)).str();
  }

  // Rank 0 collects every stage's hash and writes the manifest.
  std::vector<std::string> shared;
  if (llvm::Error err =
          core.transport->gatherBytes(lines, 0, shared, "the stage hashes"))
    return err;
  if (core.env.rank == 0) {
    Manifest trained = core.manifest;
    for (int r = 0; r < core.env.worldSize; ++r) {
      llvm::SmallVector<llvm::StringRef, 8> rows;
      llvm::StringRef(shared[r]).split(rows, '\n', -1, false);
      for (llvm::StringRef row : rows) {
        auto [index, hash] = row.split(' ');
        unsigned stage = 0;
        if (index.getAsInteger(10, stage) || stage >= trained.stages.size() ||
            hash.size() != 64)
          return makeError(llvm::formatv("rank {0} sent a malformed stage "
                                         "hash '{1}'",
                                         r, row)
                               .str());
        trained.stages[stage].sha256 = hash.str();
      }
    }
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "manifest.json");
    if (llvm::Error err = trained.save(path))
      return err;
  }
  return core.transport->barrier();
}

llvm::Error Trainer::finish() {
  if (llvm::Error err = impl_->core->writeTrace())
    return err;
  return impl_->core->transport->barrier();
}

} // namespace ppc
