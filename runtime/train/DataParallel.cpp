//===- runtime/train/DataParallel.cpp - Replicas of a pipeline ------------===//
//
// This file implements the data-parallel mesh, the connection of a rank's
// pipeline and replica-group transports, and the bucketed all-reduce of the
// gradients, after the schedule or beside it on the GradientReducer's thread
// (see DataParallel.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/DataParallel.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/Collectives.h"
#include "runtime/link/Rendezvous.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace ppc {

/// The most replicas a job may have (as many as microbatches: each bounds
/// per-rank state).
constexpr int kMaxReplicas = 65536;

llvm::Expected<DataParallelLayout> DataParallelLayout::create(int worldSize,
                                                              int replicas) {
  if (llvm::Error err = checkOption(
          "dataParallel", IntegerRule{1, kMaxReplicas}.problem(replicas)))
    return err;
  if (worldSize % replicas != 0)
    return makeOptionError(
        "dataParallel",
        llvm::formatv("{0} does not divide WORLD_SIZE {1}", replicas, worldSize)
            .str());
  DataParallelLayout layout;
  layout.replicas = replicas;
  layout.pipelineRanks = worldSize / replicas;
  return layout;
}

std::vector<int> DataParallelLayout::pipeline(int replica) const {
  std::vector<int> ranks;
  for (int r = 0; r < pipelineRanks; ++r)
    ranks.push_back(rankOf(replica, r));
  return ranks;
}

std::vector<int> DataParallelLayout::replicaGroup(int pipelineRank) const {
  std::vector<int> ranks;
  for (int d = 0; d < replicas; ++d)
    ranks.push_back(rankOf(d, pipelineRank));
  return ranks;
}

LaunchEnv DataParallelLayout::pipelineEnv(const LaunchEnv &env) const {
  LaunchEnv local = env;
  local.rank = pipelineRankOf(env.rank);
  local.worldSize = pipelineRanks;
  return local;
}

llvm::Expected<PipelineMesh> pipelineMesh(const LaunchEnv &env, int replicas) {
  auto layout = DataParallelLayout::create(env.worldSize, replicas);
  if (!layout)
    return layout.takeError();
  int replica = layout->replicaOf(env.rank);
  int pipelineRank = layout->pipelineRankOf(env.rank);
  PipelineMesh mesh;
  mesh.replicas = layout->replicas;
  mesh.replica = replica;
  mesh.pipelineEnv = layout->pipelineEnv(env);
  mesh.pipeline = {"pipeline" + std::to_string(replica),
                   layout->pipeline(replica)};
  mesh.replicaGroup = {"replicas" + std::to_string(pipelineRank),
                       layout->replicaGroup(pipelineRank)};
  return mesh;
}

std::vector<GradientBucket> planBuckets(const std::vector<at::Tensor> &tensors,
                                        int64_t bucketBytes) {
  std::vector<GradientBucket> buckets;
  int64_t bytes = 0;
  const at::Tensor *last = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor &t = tensors[i];
    if (!t.defined())
      continue;
    bool fits = last && last->scalar_type() == t.scalar_type() &&
                last->device() == t.device() && bytes < bucketBytes;
    if (!fits) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().members.push_back(i);
    buckets.back().numel += t.numel();
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
    last = &t;
  }
  return buckets;
}

/// The ranks 0 .. N-1 of `transport`, the set of an all-reduce over all of
/// them.
static std::vector<int> everyRank(const Transport &transport) {
  std::vector<int> ranks;
  for (int r = 0; r < transport.worldSize(); ++r)
    ranks.push_back(r);
  return ranks;
}

/// Sums bucket `index` of `stage`'s gradients `grads` (planBuckets()'s
/// `bucket`) over `group`, every rank of `replicas`: flattened into one
/// tensor, allReduceSum, copied back. The sends may be in flight on return.
static llvm::Error reduceBucket(Transport &replicas,
                                const std::vector<int> &group,
                                std::vector<at::Tensor> &grads,
                                const GradientBucket &bucket, size_t index,
                                int stage) {
  auto flat = torchCall(
      "cannot flatten the gradients of stage " + std::to_string(stage), [&] {
        std::vector<at::Tensor> parts;
        for (size_t i : bucket.members)
          parts.push_back(grads[i].reshape({-1}));
        return at::cat(parts);
      });
  if (!flat)
    return flat.takeError();
  std::string what =
      llvm::formatv("gradient bucket {0} of stage {1}", index, stage).str();
  if (llvm::Error err = allReduceSum(replicas, *flat, group, 0, what))
    return err;
  return torchCall(
      "cannot unflatten the gradients of stage " + std::to_string(stage), [&] {
        int64_t offset = 0;
        for (size_t i : bucket.members) {
          at::Tensor &g = grads[i];
          g.copy_(flat->narrow(0, offset, g.numel()).view_as(g));
          offset += g.numel();
        }
      });
}

/// The gradients of `params`, undefined where none was computed.
static std::vector<at::Tensor>
gradientsOf(const std::vector<at::Tensor> &params) {
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const at::Tensor &p : params)
    grads.push_back(p.grad());
  return grads;
}

llvm::Error allReduceGradients(Transport &replicas,
                               const std::vector<at::Tensor> &params,
                               int64_t bucketBytes, int stage,
                               TraceRecorder *trace) {
  std::vector<at::Tensor> grads = gradientsOf(params);
  const std::vector<int> group = everyRank(replicas);
  std::vector<GradientBucket> buckets = planBuckets(grads, bucketBytes);
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t start = TraceRecorder::nowUs();
    if (llvm::Error err =
            reduceBucket(replicas, group, grads, buckets[b], b, stage))
      return err;
    if (trace)
      trace->add({"ALLREDUCE", "wait", stage, -1, start,
                  TraceRecorder::nowUs() - start});
  }
  return replicas.flushSends();
}

// GradientReducer

struct GradientReducer::Shared {
  Shared(Transport &replicas, int64_t bucketBytes)
      : replicas(replicas), bucketBytes(bucketBytes),
        group(everyRank(replicas)) {}

  /// One bucket to sum: the gradients of its stage (shared by the stage's
  /// buckets) and its plan.
  struct Job {
    std::shared_ptr<std::vector<at::Tensor>> grads;
    GradientBucket bucket;
    size_t index;
    int stage;
  };

  Transport &replicas;
  const int64_t bucketBytes;
  const std::vector<int> group;

  std::mutex mutex;
  /// The thread waits on `work` for jobs (or stop), the caller on `idle`
  /// for the queue to be done.
  std::condition_variable work, idle;
  // Under `mutex`:
  std::deque<Job> queue;
  /// Whether the thread holds a job taken from the queue.
  bool busy = false;
  bool stop = false;
  /// The first failed job's error (success when none); `failed` says
  /// whether it holds one.
  llvm::Error failure = llvm::Error::success();
  bool failed = false;
  /// The buckets summed since the last wait(), as trace events, and their
  /// time.
  std::vector<TraceEvent> events;
  int64_t reduceUs = 0;

  std::thread thread;

  /// The reducer's thread: takes the jobs in order; after a job that found
  /// the queue empty, flushes the sends, so that an idle reducer has
  /// nothing in flight.
  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      work.wait(lock, [&] { return stop || !queue.empty(); });
      if (stop)
        return;
      Job job = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      int64_t start = TraceRecorder::nowUs();
      // The gradients' device is this thread's current one (CUDA).
      std::optional<c10::OptionalDeviceGuard> device;
      llvm::Error err =
          torchCall("cannot set the device of the gradients of "
                    "stage " +
                        std::to_string(job.stage),
                    [&] {
                      c10::Device on =
                          (*job.grads)[job.bucket.members[0]].device();
                      if (!on.is_cpu())
                        device.emplace(on);
                    });
      if (!err)
        err = reduceBucket(replicas, group, *job.grads, job.bucket, job.index,
                           job.stage);
      device.reset();
      lock.lock();
      bool last = queue.empty();
      lock.unlock();
      if (!err && last)
        err = replicas.flushSends();
      int64_t end = TraceRecorder::nowUs();
      lock.lock();
      TraceEvent e{"ALLREDUCE", "other", job.stage, -1, start, end - start};
      e.tid = 1;
      events.push_back(std::move(e));
      reduceUs += end - start;
      if (err) {
        if (failed) {
          llvm::consumeError(std::move(err));
        } else {
          llvm::consumeError(std::move(failure));
          failure = std::move(err);
          failed = true;
        }
        // The buckets behind it would each wait for a peer that is gone.
        queue.clear();
      }
      busy = false;
      if (queue.empty())
        idle.notify_all();
    }
  }
};

GradientReducer::GradientReducer(Transport &replicas, int64_t bucketBytes)
    : shared_(std::make_unique<Shared>(replicas, bucketBytes)) {
  shared_->thread = std::thread([s = shared_.get()] { s->run(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
    shared_->queue.clear();
  }
  shared_->work.notify_all();
  shared_->thread.join();
  llvm::consumeError(std::move(shared_->failure));
}

void GradientReducer::start(std::vector<at::Tensor> grads, int stage,
                            size_t firstBucket) {
  auto shared = std::make_shared<std::vector<at::Tensor>>(std::move(grads));
  std::vector<GradientBucket> buckets =
      planBuckets(*shared, shared_->bucketBytes);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    // After a failure nothing more starts; wait() reports it.
    if (shared_->failed)
      return;
    for (size_t b = 0; b < buckets.size(); ++b)
      shared_->queue.push_back(
          {shared, std::move(buckets[b]), firstBucket + b, stage});
  }
  shared_->work.notify_one();
}

llvm::Expected<GradientReducer::Times>
GradientReducer::wait(TraceRecorder *trace) {
  int64_t start = TraceRecorder::nowUs();
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->idle.wait(lock,
                     [&] { return shared_->queue.empty() && !shared_->busy; });
  int64_t end = TraceRecorder::nowUs();
  Times times;
  times.reduceMs = double(shared_->reduceUs) / 1000;
  times.waitMs = double(end - start) / 1000;
  if (trace) {
    for (TraceEvent &e : shared_->events)
      trace->add(std::move(e));
    trace->add({"ALLREDUCE_WAIT", "wait", -1, -1, start, end - start});
  }
  shared_->events.clear();
  shared_->reduceUs = 0;
  if (shared_->failed) {
    shared_->failed = false;
    llvm::Error err = std::move(shared_->failure);
    shared_->failure = llvm::Error::success();
    return err;
  }
  return times;
}

void GradientReducer::abandon() {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->queue.clear();
  shared_->idle.wait(lock, [&] { return !shared_->busy; });
  shared_->events.clear();
  shared_->reduceUs = 0;
  shared_->failed = false;
  llvm::consumeError(std::move(shared_->failure));
  shared_->failure = llvm::Error::success();
}

// OverlappedAllReduce

namespace {
/// What torch::autograd::impl::grad_accumulator() returns: a shared_ptr in
/// LibTorch 1.13, an intrusive_ptr in 2.x.
using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(
    std::declval<const at::Tensor &>()));
} // namespace

struct OverlappedAllReduce::State {
  State(Transport &replicas, int64_t bucketBytes)
      : reducer(replicas, bucketBytes) {}

  struct Stage {
    /// Last first, and their buckets.
    std::vector<at::Tensor> params;
    std::vector<GradientBucket> buckets;
    std::vector<size_t> bucketOf;
    /// The stage's B and W actions in a step.
    int backwards = 0;
    // This step: each parameter's accumulations, each bucket's members not
    // final yet, and the buckets started (a prefix).
    std::vector<int> runs;
    std::vector<size_t> pending;
    size_t started = 0;
  };

  GradientReducer reducer;
  std::map<int, Stage> stages;
  /// Kept alive, so that the hooks stay on the accumulators every graph
  /// uses (a parameter holds its accumulator weakly).
  std::vector<AccumulatorPtr> accumulators;
  /// Whether a step is under way: hooks count only then.
  bool armed = false;

  /// Starts stage `index`'s buckets in order: those whose members are all
  /// final, up to the first that is not; every one with `all`.
  void startBuckets(int index, Stage &stage, bool all) {
    while (stage.started < stage.buckets.size() &&
           (all || stage.pending[stage.started] == 0)) {
      size_t b = stage.started++;
      std::vector<at::Tensor> grads;
      for (size_t i : stage.buckets[b].members)
        grads.push_back(stage.params[i].grad());
      reducer.start(std::move(grads), index, b);
    }
  }

  /// The hook of parameter `param` of stage `index`: its accumulator ran.
  void accumulated(int index, size_t param) {
    if (!armed)
      return;
    Stage &stage = stages.at(index);
    if (++stage.runs[param] != stage.backwards)
      return;
    if (--stage.pending[stage.bucketOf[param]] == 0)
      startBuckets(index, stage, /*all=*/false);
  }
};

OverlappedAllReduce::OverlappedAllReduce(std::shared_ptr<State> state)
    : state_(std::move(state)) {}

OverlappedAllReduce::~OverlappedAllReduce() = default;

llvm::Expected<std::unique_ptr<OverlappedAllReduce>>
OverlappedAllReduce::create(Transport &replicas,
                            std::map<int, std::vector<at::Tensor>> params,
                            const std::map<int, int> &backwards, bool perBucket,
                            int64_t bucketBytes) {
  auto state = std::make_shared<State>(replicas, bucketBytes);
  std::weak_ptr<State> weak = state;
  llvm::Error err = torchCall("cannot plan the gradients' all-reduce", [&] {
    for (auto &[index, list] : params) {
      State::Stage &stage = state->stages[index];
      stage.params.assign(list.rbegin(), list.rend());
      stage.buckets = planBuckets(stage.params, bucketBytes);
      stage.bucketOf.assign(stage.params.size(), 0);
      for (size_t b = 0; b < stage.buckets.size(); ++b)
        for (size_t i : stage.buckets[b].members)
          stage.bucketOf[i] = b;
      auto n = backwards.find(index);
      stage.backwards = n == backwards.end() ? 0 : n->second;
      if (!perBucket || stage.backwards == 0)
        continue;
      for (size_t i = 0; i < stage.params.size(); ++i) {
        AccumulatorPtr acc =
            torch::autograd::impl::grad_accumulator(stage.params[i]);
        if (!acc)
          continue;
        acc->add_post_hook(
            std::make_unique<torch::autograd::utils::LambdaPostHook>(
                [weak, index = index,
                 i](const torch::autograd::variable_list &outputs,
                    const torch::autograd::variable_list &) {
                  if (std::shared_ptr<State> s = weak.lock())
                    s->accumulated(index, i);
                  return outputs;
                }));
        state->accumulators.push_back(std::move(acc));
      }
    }
  });
  if (err)
    return err;
  return std::unique_ptr<OverlappedAllReduce>(
      new OverlappedAllReduce(std::move(state)));
}

bool OverlappedAllReduce::covers(int stage, const at::Tensor &param) const {
  auto it = state_->stages.find(stage);
  return it != state_->stages.end() &&
         llvm::any_of(it->second.params,
                      [&](const at::Tensor &p) { return p.is_same(param); });
}

size_t OverlappedAllReduce::startedBuckets(int stage) const {
  auto it = state_->stages.find(stage);
  return it == state_->stages.end() ? 0 : it->second.started;
}

void OverlappedAllReduce::beginStep() {
  for (auto &[index, stage] : state_->stages) {
    stage.runs.assign(stage.params.size(), 0);
    stage.pending.clear();
    for (const GradientBucket &b : stage.buckets)
      stage.pending.push_back(b.members.size());
    stage.started = 0;
  }
  state_->armed = true;
}

void OverlappedAllReduce::stageDone(int stage) {
  auto it = state_->stages.find(stage);
  if (it != state_->stages.end())
    state_->startBuckets(stage, it->second, /*all=*/true);
}

llvm::Expected<GradientReducer::Times>
OverlappedAllReduce::finish(TraceRecorder *trace) {
  for (auto &[index, stage] : state_->stages)
    state_->startBuckets(index, stage, /*all=*/true);
  state_->armed = false;
  return state_->reducer.wait(trace);
}

void OverlappedAllReduce::abandon() {
  state_->armed = false;
  state_->reducer.abandon();
}

llvm::Expected<double> allReduceScalar(Transport &replicas, double value,
                                       const llvm::Twine &what) {
  const std::vector<int> group = everyRank(replicas);
  at::Tensor t = at::full({1}, value, at::kDouble);
  if (llvm::Error err = allReduceSum(replicas, t, group, 0, what))
    return err;
  if (llvm::Error err = replicas.flushSends())
    return err;
  return t.item<double>();
}

std::string tensorsSha256(const std::vector<at::Tensor> &tensors) {
  llvm::SHA256 hash;
  for (const at::Tensor &t : tensors) {
    at::Tensor bytes = t.detach().to(c10::kCPU).contiguous();
    hash.update(llvm::ArrayRef<uint8_t>(
        static_cast<const uint8_t *>(bytes.data_ptr()), bytes.nbytes()));
  }
  return llvm::toHex(hash.final(), /*LowerCase=*/true);
}

} // namespace ppc
