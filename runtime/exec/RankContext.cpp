//===- runtime/exec/RankContext.cpp - What one rank has for a job ---------===//
//
// This file implements RankContext (see RankContext.h): checking the
// options, loading and placing the manifest, planning and simulating the
// schedule, meeting the other ranks, loading the stages, the executor's
// plan, and the trace.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/RankContext.h"

#include "lib/Error.h"
#include "lib/ModelFormat.h"
#include "lib/NumberRules.h"
#include "lib/OptionName.h"
#include "lib/WeightBinding.h"
#include "runtime/exec/StatusRecord.h"
#include "runtime/link/Collectives.h"
#include "runtime/link/Rendezvous.h"
#include "runtime/platform/Blas.h"
#include "runtime/platform/Duration.h"
#include "runtime/platform/Threads.h"
#include "runtime/platform/TorchCompat.h"
#include "runtime/schedule/Build.h"
#include "runtime/schedule/ScheduleKind.h"
#include "runtime/schedule/Simulate.h"

#include "llvm/Support/FormatVariadic.h"

#include <set>

namespace ppc {

namespace {
/// Checks the options that need no manifest, before anything is built;
/// returns the device. Everything here bounds what a run may allocate.
llvm::Expected<DeviceKind> checkOptions(const RunOptions &options) {
  if (llvm::Error err = checkOption(
          "microbatches",
          IntegerRule{1, kMaxMicrobatches}.problem(options.microbatches)))
    return err;
  if (llvm::Error err =
          checkOption("threads", threadsRule().problem(options.threads)))
    return err;
  if (llvm::Error err = checkOption(
          "streamMicrobatches",
          IntegerRule{0, kMaxMicrobatches}.problem(options.streamMicrobatches)))
    return err;
  if (llvm::Error err = checkOption(
          "timeout",
          IntegerRule{kMinTimeout.count(), kMaxDuration.count(), "milliseconds"}
              .problem(options.timeout.count())))
    return err;
  if (!linkPolicyNamed(options.link))
    return makeError("unknown link '" + options.link + "' (expected " +
                     linkPolicyList() + ")");
  std::optional<DeviceKind> device = deviceKindNamed(options.device);
  if (!device)
    return makeError("unknown device '" + options.device +
                     "' (expected cpu or cuda)");
  return *device;
}
} // namespace

llvm::Expected<std::unique_ptr<RankContext>>
RankContext::create(llvm::StringRef manifestPath, const LaunchEnv &jobEnv,
                    const RunOptions &options, const JobPlanner &planner,
                    const PipelineMesh *mesh) {
  auto device = checkOptions(options);
  if (!device)
    return device.takeError();
  // Data parallel: everything below sees this rank's pipeline.
  const LaunchEnv env = mesh ? mesh->pipelineEnv : jobEnv;
  // c10d and Gloo report through glog (or c10's own logger), which prints
  // ahead of ppc's own error line; unless asked for, only fatal messages
  // pass.
  compat::setTorchLogging(options.torchLogs);
  setStatusDirectory(jobEnv.statusDir);
  std::unique_ptr<RankContext> ctx(new RankContext());
  ctx->env_ = env;
  ctx->jobEnv_ = jobEnv;
  if (mesh && mesh->replicas > 1)
    ctx->mesh_ = *mesh;
  ctx->options_ = options;
  ctx->manifestPath_ = manifestPath.str();
  ctx->deviceKind_ = *device;
  ctx->device_ = computeDevice(*device, env.localRank);
  if (llvm::Error err = ctx->loadManifest())
    return err;
  auto job = planner(ctx->manifest_, env.worldSize);
  if (!job)
    return job.takeError();
  ctx->schedule_ = std::move(job->schedule);
  ctx->loss_ = job->loss;
  if (inputRootOf(ctx->manifest_, ctx->placement()) < 0)
    return makeError("manifest: no stage reads a model input");
  boundThreads(options.threads > 0 ? options.threads
                                   : rankDefaultThreads(env.localWorldSize));
  warnAboutBlasKernel(ctx->warnings(), jobEnv.blasWarned);
  if (llvm::Error err = ctx->connect())
    return err;
  if (llvm::Error err = ctx->loadStages())
    return err;

  MetaScope scope;
  scope.manifest = &ctx->manifest_;
  scope.manifestSha256 = ctx->manifestSha256_;
  for (const auto &[index, stage] : ctx->stages_)
    scope.stageHashes.push_back({index, ctx->manifest_.stages[index].sha256});
  scope.placement = &ctx->placement();
  scope.schedule = &ctx->schedule_;
  scope.transport = ctx->transport_.get();
  scope.rank = env.rank;
  scope.worldSize = env.worldSize;
  scope.cacheDir = metaCacheDirOf(options, manifestPath);
  scope.useCache = options.useMetaCache;
  scope.inputMetaPath = options.inputMetaPath;
  scope.warnings = &ctx->warnings();
  if (options.precision != Precision::FP32)
    scope.precision = precisionName(options.precision).str();
  ctx->meta_ = std::make_unique<MetaSettler>(std::move(scope));
  // The executor's plan, once everything it points to is in place.
  ctx->executorPlan_ =
      makeExecutorPlan(ctx->manifest_, ctx->schedule_, env.rank, ctx->stages_,
                       *ctx->transport_, ctx->device_, ctx->loss_);
  ctx->executorPlan_.precision = options.precision;
  ctx->executorPlan_.coalesce = env.coalesce;
  if (!options.tracePath.empty())
    ctx->trace_.emplace(jobEnv.rank);
  return ctx;
}

/// Loads the manifest.
llvm::Error RankContext::loadManifest() {
  // Hash the very bytes that are parsed: the cache key then names the
  // manifest that was used, even if the file changes meanwhile.
  auto loaded = Manifest::load(manifestPath_, &manifestSha256_);
  if (!loaded)
    return loaded.takeError();
  manifest_ = std::move(*loaded);
  return llvm::Error::success();
}

/// The version of what crosses between ranks (the messages' layout,
/// runtime/exec/WirePack.h and runtime/exec/ExecutorMessages.cpp): bumped
/// by a change that makes ranks of two ppc versions misread each other, so
/// that such ranks stop at the agreement with one line instead.
constexpr int kWireFormatVersion = 1;

/// What every rank must have alike (RunOptions::agreement): the caller's
/// record, then the manifest and the run's options it did not record. The
/// wire format and coalescing come first: a rank that sizes its messages
/// otherwise aborts in Gloo (a receive of the wrong size), not with a line.
Agreement RankContext::agreement() const {
  Agreement record = options_.agreement;
  record.setDefault("the wire format version",
                    std::to_string(kWireFormatVersion));
  record.setDefault("PPC_COALESCE", env_.coalesce ? "1" : "0");
  record.setDefault(optionName(Option::Microbatches),
                    std::to_string(options_.microbatches));
  record.setDefault(optionName(Option::Schedule),
                    scheduleName(options_.schedule));
  record.setDefault(optionName(Option::Precision),
                    precisionName(options_.precision));
  record.setDefault(optionName(Option::Device), options_.device);
  record.setDefault(optionName(Option::Link), options_.link);
  record.setDefault(optionName(Option::DataParallel),
                    std::to_string(replicas()));
  record.setDefault(optionName(Option::StreamWindow),
                    std::to_string(options_.streamMicrobatches));
  if (!record.has(optionName(Option::InputMeta)))
    record.setFileDigest(optionName(Option::InputMeta), options_.inputMetaPath);
  if (!record.has("the manifest"))
    record.set("the manifest", manifestSha256_,
               manifestPath_ + " (sha256 " +
                   llvm::StringRef(manifestSha256_).take_front(16).str() + ")");
  return record;
}

/// Meets the other ranks and connects what the schedule's links need.
llvm::Error RankContext::connect() {
  LinkPolicy link = *linkPolicyNamed(options_.link);
  Agreement record = agreement();
  if (mesh_) {
    // Every rank connects its pipeline first: pipelines are disjoint, so
    // all of them connect at once, and then every replica group does.
    auto transports =
        connectGroupTransports(jobEnv_, deviceKind_, options_.timeout, link,
                               {mesh_->pipeline, mesh_->replicaGroup}, record);
    if (!transports)
      return transports.takeError();
    transport_ = std::move((*transports)[0]);
    replicaTransport_ = std::move((*transports)[1]);
  } else {
    auto transport =
        connectTransport(env_, deviceKind_, options_.timeout, link, record);
    if (!transport)
      return transport.takeError();
    transport_ = std::move(*transport);
  }
  transport_->setChannelCount(pipelineChannelCount(schedule_));
  // Every rank derives the same sorted list from the whole schedule.
  std::set<Transport::Route> routes;
  for (size_t r = 0; r < schedule_.ranks.size(); ++r)
    for (const Action &a : schedule_.ranks[r])
      if (a.kind == ActionKind::SendF || a.kind == ActionKind::SendB)
        routes.insert(
            {channelOf(schedule_, a), static_cast<int>(r), a.peerRank});
  return transport_->connectRoutes(
      std::vector<Transport::Route>(routes.begin(), routes.end()));
}

/// Loads this rank's stages onto the device.
llvm::Error RankContext::loadStages() {
  formatOf(manifest_).warmUp();
  std::string dir = manifestDirectory(manifestPath_);
  if (options_.weights.given()) {
    auto source =
        WeightSource::open(options_.weights, manifestWeightNames(manifest_));
    if (!source)
      return source.takeError();
    weights_ = std::move(*source);
  }
  // A stage that trains writes its weights: it gets copies, not the
  // checkpoint's mapped bytes.
  bool inPlace = !loss_;
  for (int s : placement().stagesOf(env_.rank)) {
    auto stage = Stage::load(manifest_, dir, s, weights_.get(), inPlace);
    if (!stage)
      return stage.takeError();
    if (!device_.is_cpu())
      stage->executable().to(device_);
    stages_.emplace(s, std::move(*stage));
  }
  return llvm::Error::success();
}

uint64_t RankContext::weightBytesRead() const {
  return weights_ ? weights_->bytesServed() : 0;
}

void RankContext::beginRun(ExecutorStep &step) {
  step.trace = trace_ ? &*trace_ : nullptr;
  step.runIndex = runs_++;
}

llvm::Error RankContext::prepare(const std::vector<c10::IValue> &inputs,
                                 ExecutorStep &step) {
  current_ = &executorPlan_;
  if (llvm::Error err = meta_->prepare(inputs, step))
    return err;
  beginRun(step);
  return llvm::Error::success();
}

llvm::Error
RankContext::prepareEvaluation(const std::vector<c10::IValue> &inputs,
                               ExecutorStep &step) {
  if (!evaluation_) {
    Schedule schedule = evaluationSchedule(schedule_);
    if (llvm::Error err = simulateSchedule(schedule))
      return err;
    evaluation_ = makeVariant(std::move(schedule));
  }
  current_ = &evaluation_->plan;
  if (llvm::Error err = meta_->prepare(inputs, step, &evaluation_->schedule))
    return err;
  beginRun(step);
  return llvm::Error::success();
}

llvm::Error
RankContext::prepareWindow(std::vector<std::vector<c10::IValue>> microbatches,
                           int count, const ScheduleBuilder &build,
                           ExecutorStep &step) {
  current_ = &executorPlan_;
  if (count != schedule_.microbatches) {
    std::unique_ptr<Variant> &variant = variants_[count];
    if (!variant) {
      auto built = build(manifest_, placement(), count);
      if (!built) {
        variants_.erase(count);
        return built.takeError();
      }
      if (llvm::Error err = simulateSchedule(*built)) {
        variants_.erase(count);
        return err;
      }
      variant = makeVariant(std::move(*built));
    }
    current_ = &variant->plan;
  }
  // The input root goes on to the window without waiting for the other
  // ranks to take its signatures: they may still run the previous window.
  if (llvm::Error err = meta_->prepareMicrobatches(
          std::move(microbatches), count, step, current_->schedule,
          /*waitForSignatureSends=*/false))
    return err;
  beginRun(step);
  return llvm::Error::success();
}

std::unique_ptr<RankContext::Variant>
RankContext::makeVariant(Schedule schedule) {
  auto variant = std::make_unique<Variant>();
  variant->schedule = std::move(schedule);
  variant->plan = makeExecutorPlan(manifest_, variant->schedule, env_.rank,
                                   stages_, *transport_, device_, loss_);
  variant->plan.precision = options_.precision;
  variant->plan.coalesce = env_.coalesce;
  return variant;
}

llvm::Error
RankContext::prepareSchedule(std::vector<std::vector<c10::IValue>> microbatches,
                             Schedule schedule, ExecutorStep &step) {
  if (llvm::Error err = simulateSchedule(schedule))
    return err;
  int count = schedule.microbatches;
  given_ = makeVariant(std::move(schedule));
  current_ = &given_->plan;
  if (llvm::Error err = meta_->prepareMicrobatches(
          std::move(microbatches), count, step, &given_->schedule))
    return err;
  beginRun(step);
  return llvm::Error::success();
}

llvm::Expected<ExecutorResult> RankContext::execute(ExecutorStep &step) {
  auto done = ppc::execute(*current_, step);
  if (!done)
    return meta_->classify(done.takeError());
  return done;
}

llvm::Error RankContext::finish() {
  if (trace_) {
    std::vector<std::string> ranks;
    if (llvm::Error err = gatherBytes(*transport_, trace_->eventsJSON(), 0,
                                      ranks, "the trace events"))
      return err;
    trace_.reset();
    // Data parallel: each pipeline's rank 0 ships its pipeline's
    // events (length-prefixed) to the job's rank 0, in replica order.
    if (replicaTransport_ && env_.rank == 0) {
      std::string mine;
      for (const std::string &events : ranks)
        mine += std::to_string(events.size()) + ":" + events;
      std::vector<std::string> pipelines;
      if (llvm::Error err = gatherBytes(*replicaTransport_, mine, 0, pipelines,
                                        "the trace events"))
        return err;
      if (replica() == 0) {
        ranks.clear();
        for (const std::string &pipeline : pipelines) {
          llvm::StringRef rest(pipeline);
          while (!rest.empty()) {
            auto [size, tail] = rest.split(':');
            size_t n = 0;
            if (size.getAsInteger(10, n) || n > tail.size())
              return makeError("a replica sent malformed trace events");
            ranks.push_back(tail.take_front(n).str());
            rest = tail.drop_front(n);
          }
        }
      }
    }
    if (env_.rank == 0 && replica() == 0)
      if (llvm::Error err = writeTraceFile(options_.tracePath, ranks))
        return err;
  }
  if (llvm::Error err = barrier(*transport_))
    return err;
  return replicaTransport_ ? barrier(*replicaTransport_)
                           : llvm::Error::success();
}

c10::IValue valueOnDevice(const c10::IValue &value, c10::Device device) {
  if (value.isTensor())
    return value.toTensor().to(device);
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor &t : value.toTensorList().vec())
      out.push_back(t.to(device));
    return out;
  }
  if (value.isList()) {
    c10::impl::GenericList out(value.toList().elementType());
    for (const c10::IValue &v : value.toList().vec())
      out.push_back(valueOnDevice(v, device));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> out;
    for (const c10::IValue &v : value.toTupleRef().elements())
      out.push_back(valueOnDevice(v, device));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  return value;
}

llvm::Expected<std::vector<c10::IValue>>
valuesOnDevice(const std::vector<c10::IValue> &values, c10::Device device,
               const std::string &what) {
  return torchCall("cannot move " + what + " to " + device.str(), [&] {
    std::vector<c10::IValue> out;
    out.reserve(values.size());
    for (const c10::IValue &v : values)
      out.push_back(valueOnDevice(v, device));
    return out;
  });
}

} // namespace ppc
