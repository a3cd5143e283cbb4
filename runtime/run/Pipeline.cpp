//===- runtime/run/Pipeline.cpp - The pipeline runtime --------------------===//
//
// This file implements Pipeline: an inference job on a rank context
// (runtime/exec/RankContext.h), whose schedule collects the model outputs on
// the output rank, and the concatenation of those outputs over the
// microbatches; streaming windows (several batches in one execution of a
// schedule built for all their microbatches), run in the background by a
// WindowStream (runtime/run/WindowStream.h), and their split back into
// batches.
//
//===----------------------------------------------------------------------===//
#include "runtime/run/Pipeline.h"
#include "runtime/platform/Duration.h"
#include "runtime/run/WindowStream.h"

#include "lib/Error.h"
#include "runtime/exec/Microbatch.h"
#include "runtime/exec/RankContext.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/Collectives.h"
#include "runtime/schedule/Build.h"
#include "runtime/schedule/Plan.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <chrono>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

} // namespace

struct Pipeline::Impl {
  std::unique_ptr<RankContext> ctx;
  /// The stats of the last run(), or of the window of the batch next()
  /// handed out last.
  RunStats stats;
  /// Streaming: the windows and the thread that runs them.
  std::unique_ptr<WindowStream> stream;
  int64_t submitted = 0;

  ~Impl() {
    // The stream's thread uses the rank context: it goes first.
    stream.reset();
  }

  int perBatch() const { return ctx->options().microbatches; }
  int windowBatches() const {
    return std::max(1, ctx->options().streamMicrobatches / perBatch());
  }
  /// Moves `inputs` to the device and splits them into a batch's
  /// microbatches (on ranks that read them).
  llvm::Expected<WindowStream::Batch>
  enqueue(const std::vector<c10::IValue> &inputs, std::string label);
  /// Runs `batches` as one window. With `labelled`, errors are prefixed
  /// with the label of their batch.
  llvm::Expected<WindowStream::Window>
  runWindow(std::vector<WindowStream::Batch> &batches, bool labelled);
  /// Batch b's model outputs, joined from the window's microbatches
  /// b*M .. b*M+M-1 and on the CPU, on the output rank; none elsewhere.
  llvm::Expected<std::vector<c10::IValue>>
  batchOutputs(const ExecutorResult &done, size_t b);
  void recordBatchMarks(TraceRecorder &trace, size_t firstEvent,
                        int64_t startUs, size_t batches);
};

llvm::Expected<WindowStream::Batch>
Pipeline::Impl::enqueue(const std::vector<c10::IValue> &inputs,
                        std::string label) {
  WindowStream::Batch batch;
  batch.label = std::move(label);
  if (ctx->meta().readsInputs()) {
    std::vector<c10::IValue> onDevice = inputs;
    if (!ctx->device().is_cpu()) {
      auto moved = valuesOnDevice(inputs, ctx->device(), "the inputs");
      if (!moved)
        return moved.takeError();
      onDevice = std::move(*moved);
    }
    auto split = splitMicrobatches(onDevice, ctx->manifest().modelInputs.size(),
                                   perBatch());
    if (!split)
      return split.takeError();
    batch.microbatches = std::move(*split);
  }
  return batch;
}

/// Batch b's mark on this rank spans its part of batch b: from where the
/// previous batch's ended (the window's start for the first) to the start
/// of the first event after this rank's last action of batch b (the
/// window's end for the last), so that the marks of a rank tile its window.
void Pipeline::Impl::recordBatchMarks(TraceRecorder &trace, size_t firstEvent,
                                      int64_t startUs, size_t batches) {
  const std::vector<TraceEvent> &events = trace.events();
  const size_t end = events.size();
  std::vector<size_t> last(batches, firstEvent);
  for (size_t i = firstEvent; i < end; ++i)
    if (events[i].microbatch >= 0)
      last[std::min<size_t>(events[i].microbatch / perBatch(), batches - 1)] =
          i;
  int64_t endUs = TraceRecorder::nowUs();
  std::vector<TraceEvent> marks;
  size_t upTo = firstEvent;
  for (size_t b = 0; b < batches; ++b) {
    upTo = std::max(upTo, last[b]);
    int64_t until = b + 1 == batches || upTo + 1 >= end
                        ? endUs
                        : std::max(events[upTo + 1].startUs, startUs);
    marks.push_back({std::string(kBatchEventName), "other", -1, -1, startUs,
                     std::max<int64_t>(until - startUs, 0)});
    startUs = until;
  }
  for (TraceEvent &mark : marks)
    trace.add(std::move(mark));
}

llvm::Expected<std::vector<c10::IValue>>
Pipeline::Impl::batchOutputs(const ExecutorResult &done, size_t b) {
  std::vector<c10::IValue> result;
  if (ctx->rank() != ctx->placement().outputRank())
    return result;
  const Manifest &manifest = ctx->manifest();
  for (size_t k = 0; k < done.outputParts.size(); ++k) {
    const ValueRef &ref = manifest.modelOutputs[k];
    llvm::ArrayRef<c10::IValue> parts(done.outputParts[k]);
    auto joined =
        concatMicrobatches(parts.slice(b * perBatch(), perBatch()),
                           manifest.output(ref).kind, static_cast<int>(k));
    if (!joined)
      return joined.takeError();
    result.push_back(std::move(*joined));
  }
  if (ctx->device().is_cpu())
    return result;
  // Outputs are written and returned on the CPU whatever ran them.
  return valuesOnDevice(result, c10::kCPU, "the outputs");
}

llvm::Expected<WindowStream::Window>
Pipeline::Impl::runWindow(std::vector<WindowStream::Batch> &queue,
                          bool labelled) {
  Clock::time_point start = Clock::now();
  int64_t traceStartUs = TraceRecorder::nowUs();
  at::NoGradGuard noGrad;
  // On the stream's thread, the device LibTorch calls default to must be
  // this rank's, as on the thread that created the pipeline.
  c10::OptionalDeviceGuard onDevice;
  if (!ctx->device().is_cpu())
    onDevice.reset_device(ctx->device());
  Transport &transport = ctx->transport();
  int64_t sentBefore = transport.messagesSent();
  ctx->meta().clearCacheWritten();

  const size_t batches = queue.size();
  const int perBatchCount = perBatch();
  const int count = static_cast<int>(batches) * perBatchCount;
  std::vector<std::vector<c10::IValue>> microbatches;
  std::vector<std::string> labels;
  for (WindowStream::Batch &q : queue) {
    for (auto &m : q.microbatches)
      microbatches.push_back(std::move(m));
    labels.push_back(std::move(q.label));
  }
  queue.clear();
  auto fail = [&](llvm::Error err, size_t b) {
    return labelled ? withContext(std::move(err), labels[b]) : std::move(err);
  };

  ExecutorStep step;
  ScheduleKind kind = ctx->options().schedule;
  auto build = [kind](const Manifest &manifest, const Placement &placement,
                      int n) {
    return buildSchedule(manifest, placement, kind, n);
  };
  if (llvm::Error err =
          ctx->prepareWindow(std::move(microbatches), count, build, step))
    return fail(std::move(err), 0);
  size_t firstEvent = step.trace ? step.trace->events().size() : 0;
  auto done = ctx->execute(step);
  if (!done) {
    size_t b = step.failedMicrobatch >= 0
                   ? std::min<size_t>(step.failedMicrobatch / perBatchCount,
                                      batches - 1)
                   : 0;
    return fail(done.takeError(), b);
  }
  auto windowStats = std::make_shared<RunStats>();
  windowStats->rank = ctx->rank();
  windowStats->weightsGiven = ctx->options().weights.given();
  windowStats->weightBytes = ctx->weightBytesRead();
  windowStats->metaSource = ctx->meta().source();
  windowStats->metaMessagesSent = done->metaMessagesSent;
  // From the end of prepare(), whose signature broadcast and agreement every
  // rank passes together, not from this rank's entry into run(): a rank
  // that enters early (no inputs to read, or fewer stages to load) would
  // otherwise count its wait for the slowest rank's set-up, which `ppc run`
  // has already waited for in its own broadcast (RunStats::firstOutputMs).
  windowStats->firstOutputMs = done->firstOutputMs;

  // Model outputs on the output rank, batch by batch: batch b's are the
  // window's microbatches b*M .. b*M+M-1.
  WindowStream::Window window;
  for (size_t b = 0; b < batches; ++b) {
    auto result = batchOutputs(*done, b);
    if (!result)
      return fail(result.takeError(), b);
    window.outputs.push_back(std::move(*result));
  }
  ctx->finishStep();
  if (step.trace) {
    if (batches == 1)
      recordMark(step.trace, kBatchEventName, traceStartUs);
    else
      recordBatchMarks(*step.trace, firstEvent, traceStartUs, batches);
  }
  windowStats->batches = static_cast<int64_t>(batches);
  windowStats->cacheWritten = ctx->meta().cacheWritten();
  windowStats->messagesSent = transport.messagesSent() - sentBefore;
  windowStats->link = transport.linksUsed();
  windowStats->totalMs = msSince(start);
  window.stats = std::move(windowStats);
  return window;
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

llvm::Expected<std::unique_ptr<Pipeline>>
Pipeline::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                 const RunOptions &options) {
  auto planner = [&](const Manifest &manifest,
                     int worldSize) -> llvm::Expected<JobPlan> {
    ScheduleRequest request;
    request.kind = options.schedule;
    request.training = false;
    request.microbatches = options.microbatches;
    auto plan = planSchedule(manifest, worldSize, request);
    if (!plan)
      return plan.takeError();
    return JobPlan{std::move(plan->schedule), std::nullopt};
  };
  auto ctx = RankContext::create(manifestPath, env, options, planner);
  if (!ctx)
    return ctx.takeError();
  auto impl = std::make_unique<Impl>();
  impl->ctx = std::move(*ctx);
  impl->stats.rank = env.rank;
  Impl *self = impl.get();
  impl->stream = std::make_unique<WindowStream>(
      impl->windowBatches(),
      [self](std::vector<WindowStream::Batch> &batches) {
        return self->runWindow(batches, /*labelled=*/true);
      },
      // A new thread's intra-op pool size is LibTorch's default until it
      // asks for the process's (boundThreads(), runtime/platform/Threads.h).
      [] { at::init_num_threads(); });
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
std::vector<std::string> Pipeline::inputNames() const {
  std::vector<std::string> names;
  for (const ModelInput &in : impl_->ctx->manifest().modelInputs)
    names.push_back(in.name);
  return names;
}
size_t Pipeline::inputCount() const {
  return impl_->ctx->manifest().modelInputs.size();
}
int Pipeline::inputRoot() const { return impl_->ctx->meta().inputRoot(); }

void Pipeline::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->ctx->schedule(), impl_->ctx->rank(), os);
}

/// What run(), finish() and shareFromInputRoot() say while submitted
/// batches have not run: those use the transport from the caller's thread,
/// which only the stream's thread may use then.
static llvm::Error notWhileStreaming(const char *call, int inFlight) {
  return makeError(llvm::formatv("{0}() with {1} submitted batch{2} not "
                                 "run yet; flush() first",
                                 call, inFlight, inFlight == 1 ? "" : "es")
                       .str());
}

llvm::Expected<std::vector<c10::IValue>>
Pipeline::run(const std::vector<c10::IValue> &inputs) {
  if (llvm::Error err = impl_->stream->failure())
    return err;
  if (int inFlight = impl_->stream->inFlight())
    return notWhileStreaming("run", inFlight);
  auto batch = impl_->enqueue(inputs, "");
  if (!batch)
    return batch.takeError();
  std::vector<WindowStream::Batch> one;
  one.push_back(std::move(*batch));
  auto window = impl_->runWindow(one, /*labelled=*/false);
  if (!window)
    return window.takeError();
  impl_->stats = *window->stats;
  return std::move(window->outputs.front());
}

llvm::Error Pipeline::submit(std::vector<c10::IValue> inputs,
                             std::string label) {
  if (label.empty())
    label = llvm::formatv("batch {0}", impl_->submitted).str();
  ++impl_->submitted;
  if (llvm::Error err = impl_->stream->failure())
    return err;
  auto batch = impl_->enqueue(inputs, label);
  if (!batch) {
    impl_->stream->dropOpen();
    return withContext(batch.takeError(), label);
  }
  return impl_->stream->submit(std::move(*batch));
}

llvm::Error Pipeline::flush() { return impl_->stream->flush(); }

std::optional<std::vector<c10::IValue>> Pipeline::next(bool *firstOfWindow) {
  std::optional<WindowStream::Ready> ready = impl_->stream->next();
  if (!ready)
    return std::nullopt;
  if (ready->firstOfWindow)
    impl_->stats = *ready->stats;
  if (firstOfWindow)
    *firstOfWindow = ready->firstOfWindow;
  return std::move(ready->outputs);
}

int Pipeline::windowBatches() const { return impl_->windowBatches(); }
int Pipeline::queuedBatches() const { return impl_->stream->inFlight(); }

llvm::Error Pipeline::finish() {
  if (llvm::Error err = impl_->stream->flush())
    return err;
  return impl_->ctx->finish();
}

llvm::Error Pipeline::shareFromInputRoot(std::string &bytes) {
  if (int inFlight = impl_->stream->inFlight())
    return notWhileStreaming("shareFromInputRoot", inFlight);
  return broadcastBytes(impl_->ctx->transport(), bytes, inputRoot(),
                        "the microbatch signatures");
}

} // namespace ppc
