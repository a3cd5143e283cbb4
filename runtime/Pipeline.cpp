//===- runtime/Pipeline.cpp - The pipeline runtime ------------------------===//
//
// This file implements Pipeline: an inference job on a rank context
// (runtime/RankContext.h), whose schedule collects the model outputs on the
// output rank, and the concatenation of those outputs over the microbatches.
//
//===----------------------------------------------------------------------===//
#include "runtime/Pipeline.h"

#include "lib/Error.h"
#include "runtime/Collectives.h"
#include "runtime/Microbatch.h"
#include "runtime/RankContext.h"
#include "runtime/Trace.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}
} // namespace

struct Pipeline::Impl {
  std::unique_ptr<RankContext> ctx;
  RunStats stats;

  llvm::Expected<std::vector<c10::IValue>>
  run(const std::vector<c10::IValue> &inputs);
};

llvm::Expected<std::vector<c10::IValue>>
Pipeline::Impl::run(const std::vector<c10::IValue> &inputs) {
  Clock::time_point start = Clock::now();
  int64_t traceStartUs = TraceRecorder::nowUs();
  at::NoGradGuard noGrad;
  Transport &transport = ctx->transport();
  int64_t sentBefore = transport.messagesSent();
  ctx->meta().clearCacheWritten();

  ExecutorStep step;
  if (llvm::Error err = ctx->prepare(inputs, step))
    return err;
  auto done = ctx->execute(step);
  if (!done)
    return done.takeError();
  stats.metaSource = ctx->meta().source();
  stats.metaMessagesSent = done->metaMessagesSent;
  // From the end of prepare(), whose signature broadcast and agreement every
  // rank passes together, not from this rank's entry into run(): a rank
  // that enters early (no inputs to read, or fewer stages to load) would
  // otherwise count its wait for the slowest rank's set-up, which `ppc run`
  // has already waited for in its own broadcast (RunStats::firstOutputMs).
  stats.firstOutputMs = done->firstOutputMs;

  // Model outputs on the output rank.
  const Manifest &manifest = ctx->manifest();
  std::vector<c10::IValue> result;
  if (ctx->rank() == ctx->placement().outputRank())
    for (size_t k = 0; k < done->outputParts.size(); ++k) {
      const ValueRef &ref = manifest.modelOutputs[k];
      auto joined = concatMicrobatches(
          done->outputParts[k], manifest.output(ref).kind, static_cast<int>(k));
      if (!joined)
        return joined.takeError();
      result.push_back(std::move(*joined));
    }
  ctx->finishStep();
  recordMark(step.trace, kBatchEventName, traceStartUs);
  stats.cacheWritten = ctx->meta().cacheWritten();
  stats.messagesSent = transport.messagesSent() - sentBefore;
  stats.link = transport.linksUsed();
  stats.totalMs = msSince(start);
  return result;
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

llvm::Expected<std::unique_ptr<Pipeline>>
Pipeline::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                 const RunOptions &options) {
  auto planner = [&](const Manifest &manifest,
                     int worldSize) -> llvm::Expected<JobPlan> {
    auto placement =
        Placement::create(static_cast<int>(manifest.stages.size()), worldSize,
                          schedulePlacement(options.schedule));
    if (!placement)
      return placement.takeError();
    auto schedule = buildSchedule(manifest, *placement, options.schedule,
                                  options.microbatches);
    if (!schedule)
      return schedule.takeError();
    return JobPlan{std::move(*schedule), std::nullopt};
  };
  auto ctx = RankContext::create(manifestPath, env, options, planner);
  if (!ctx)
    return ctx.takeError();
  auto impl = std::make_unique<Impl>();
  impl->ctx = std::move(*ctx);
  impl->stats.rank = env.rank;
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

bool Pipeline::needsInputs() const { return impl_->ctx->meta().readsInputs(); }
int Pipeline::outputRank() const {
  return impl_->ctx->placement().outputRank();
}
int Pipeline::rank() const { return impl_->ctx->rank(); }
int Pipeline::stageCount() const {
  return static_cast<int>(impl_->ctx->manifest().stages.size());
}
bool Pipeline::outputIsTuple() const {
  return impl_->ctx->manifest().outputIsTuple;
}
const RunStats &Pipeline::stats() const { return impl_->stats; }
size_t Pipeline::inputCount() const {
  return impl_->ctx->manifest().modelInputs.size();
}
int Pipeline::inputRoot() const { return impl_->ctx->meta().inputRoot(); }

void Pipeline::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->ctx->schedule(), impl_->ctx->rank(), os);
}

llvm::Expected<std::vector<c10::IValue>>
Pipeline::run(const std::vector<c10::IValue> &inputs) {
  c10::Device device = impl_->ctx->device();
  if (device.is_cpu())
    return impl_->run(inputs);
  auto onDevice = valuesOnDevice(inputs, device, "the inputs");
  if (!onDevice)
    return onDevice.takeError();
  auto result = impl_->run(*onDevice);
  if (!result)
    return result.takeError();
  // Outputs are written and returned on the CPU whatever ran them.
  return valuesOnDevice(*result, c10::kCPU, "the outputs");
}

llvm::Error Pipeline::finish() { return impl_->ctx->finish(); }

llvm::Error Pipeline::shareFromInputRoot(std::string &bytes) {
  return broadcastBytes(impl_->ctx->transport(), bytes, inputRoot(),
                        "the microbatch signatures");
}

std::string metaCacheDirOf(const RunOptions &options,
                           llvm::StringRef manifestPath) {
  return options.metaCacheDir.empty() ? manifestDirectory(manifestPath)
                                      : options.metaCacheDir;
}

} // namespace ppc
