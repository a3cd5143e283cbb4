//===- runtime/train/DataParallel.h - Replicas of a pipeline ----*- C++ -*-===//
//
// Data parallelism across D replicas of one pipeline of R ranks
// (`ppc train --data-parallel D`, docs/training.md). The D x R ranks of a
// job form a device mesh ["dp", "pp"] with pp innermost, as torchtitan's:
//
//   job rank g = d * R + r     (replica d in 0..D-1, pipeline rank r in 0..R-1)
//   pipeline d:                ranks d*R .. d*R + R-1
//   replica group of rank r:   ranks r, R + r, 2R + r, ..., (D-1)R + r
//
// It depends on RANK and WORLD_SIZE only, so it is the same under ppc
// launch and torchrun, on one machine or several.
//
// Each rank gets two transports from one rendezvous of the job (its
// RankContext connects the PipelineMesh that pipelineMesh() gives): one over
// its pipeline (transport rank r of R), which the pipeline's schedule,
// metadata, tied gradients and saves use as they would without replicas,
// and one over its replica group (transport rank d of D), for the
// gradients' all-reduce and the loss. Both name lost ranks by their job
// rank.
//
// Internal to libppc_runtime: not installed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_DATAPARALLEL_H
#define PPC_RUNTIME_TRAIN_DATAPARALLEL_H

#include "runtime/exec/RankContext.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/link/Transport.h"

#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace ppc {

class TraceRecorder;

/// The mesh of a job of `replicas` pipelines (see the file comment).
struct DataParallelLayout {
  int replicas = 1;
  /// R: the ranks of one pipeline.
  int pipelineRanks = 1;

  /// The layout of `worldSize` ranks as `replicas` pipelines. Errors (an
  /// OptionError of field "dataParallel"): "dataParallel 0 is not an
  /// integer in 1..65536"; "dataParallel 3 does not divide WORLD_SIZE 4".
  static llvm::Expected<DataParallelLayout> create(int worldSize, int replicas);

  int worldSize() const { return replicas * pipelineRanks; }
  int replicaOf(int rank) const { return rank / pipelineRanks; }
  int pipelineRankOf(int rank) const { return rank % pipelineRanks; }
  int rankOf(int replica, int pipelineRank) const {
    return replica * pipelineRanks + pipelineRank;
  }
  /// The job ranks of pipeline `replica`, ascending.
  std::vector<int> pipeline(int replica) const;
  /// The job ranks holding pipeline rank `pipelineRank`, ascending (its
  /// replica group; index = replica).
  std::vector<int> replicaGroup(int pipelineRank) const;
  /// `env` as its pipeline sees it: RANK and WORLD_SIZE of the pipeline;
  /// LOCAL_RANK / LOCAL_WORLD_SIZE (the machine's ranks: devices, threads)
  /// and the rendezvous stay the job's.
  LaunchEnv pipelineEnv(const LaunchEnv &env) const;
};

/// The mesh a RankContext runs rank env.rank in (runtime/exec/RankContext.h):
/// its pipeline's environment, and the two groups it connects from one
/// rendezvous of the job, its pipeline ("pipelineD") first, then its
/// replica group ("replicasR"). Errors: DataParallelLayout::create()'s.
llvm::Expected<PipelineMesh> pipelineMesh(const LaunchEnv &env, int replicas);

/// The default size of one bucket of the gradients' all-reduce.
constexpr int64_t kGradientBucketBytes = int64_t(4) << 20;

/// Consecutive tensors that travel as one flat tensor.
struct GradientBucket {
  /// Indices into the list planBuckets() was given, ascending.
  std::vector<size_t> members;
  int64_t numel = 0;
};

/// Groups `tensors` (in order) into buckets: a bucket holds consecutive
/// tensors of one dtype and device and closes once it reaches `bucketBytes`
/// (a tensor larger than that is a bucket of its own). Every replica
/// passes tensors of the same shapes in the same order, so every replica
/// plans the same buckets. Undefined tensors are left out.
std::vector<GradientBucket> planBuckets(const std::vector<at::Tensor> &tensors,
                                        int64_t bucketBytes);

/// Sums the gradients of `params` over the replica group `replicas` (every
/// member passes parameters of the same shapes, in the same order): the
/// defined gradients in buckets of about `bucketBytes` (planBuckets), one
/// allReduceSum (runtime/link/Collectives.h) on channel 0 per bucket, so every
/// replica gets the very same sum. Each bucket is one "ALLREDUCE" event of
/// category "wait" for `stage` on `trace` (when not null): the caller
/// waits for all of it. Errors:
/// LostRankError naming the job rank; LibTorch's, as one line.
llvm::Error allReduceGradients(Transport &replicas,
                               const std::vector<at::Tensor> &params,
                               int64_t bucketBytes, int stage,
                               TraceRecorder *trace);

/// Sums gradients over the replica group on a thread of its own, beside
/// the schedule: `ppc train --data-parallel` starts each bucket of a stage's
/// gradients as soon as the backward has finished it (OverlappedAllReduce
/// says when), while the rest of the backward runs, and waits for all of
/// them after the schedule (Trainer::step).
///   1. start() (the caller's thread) plans the buckets of the gradients it
///      is given, as allReduceGradients() does, queues them and returns.
///   2. The reducer's thread runs the queued buckets in order, each exactly
///      as allReduceGradients() does (flatten, allReduceSum on channel 0,
///      copy back), so the gradients end up bitwise the same: each element's
///      sum is the same additions in replica order, whatever the buckets.
///      Before it goes idle it waits for its sends (flushSends).
///   3. wait() (the caller's thread) blocks until the queue is done; that
///      is the time the all-reduce was not hidden.
/// From the first start() to wait() the replica transport is the reducer's
/// alone, and the gradients given to start() are its alone: nobody else may
/// use that transport, nor read or write those gradients, in between. Every
/// member of the replica group must start the same gradients in the same
/// order (replicas run the same schedule, so they do). Each message waits at
/// most the transport's timeout, so wait() returns within that per bucket;
/// after a bucket's error the buckets queued behind it are dropped and
/// wait() returns that error (a LostRankError naming the job rank).
class GradientReducer {
public:
  GradientReducer(Transport &replicas, int64_t bucketBytes);
  /// Drops the buckets not started and waits for the one under way.
  ~GradientReducer();
  GradientReducer(const GradientReducer &) = delete;
  GradientReducer &operator=(const GradientReducer &) = delete;

  /// Queues the sum of `grads` (stage `stage`'s; undefined ones are left
  /// out) over the replica group, in buckets numbered (in errors) from
  /// `firstBucket`.
  void start(std::vector<at::Tensor> grads, int stage, size_t firstBucket = 0);
  /// What wait() measured since the previous wait() or abandon(), in
  /// milliseconds.
  struct Times {
    /// The reducer's thread on the buckets (from each one's start to its
    /// end, waiting for peers included): the all-reduce's whole time.
    double reduceMs = 0;
    /// The caller in wait(): the part the schedule did not hide.
    double waitMs = 0;
  };
  /// Waits until every started bucket is summed. Records on `trace` (when
  /// not null) each bucket as an "ALLREDUCE" event of category "other" on
  /// lane (tid) 1, as it ran on the reducer's thread, and the wait itself as
  /// an "ALLREDUCE_WAIT" event of category "wait" (stage -1). Errors: the
  /// first bucket's error.
  llvm::Expected<Times> wait(TraceRecorder *trace);
  /// Drops the buckets not started, waits for the one under way and
  /// forgets its error: for a step that failed before wait().
  void abandon();

private:
  struct Shared;
  std::unique_ptr<Shared> shared_;
};

/// The overlapped all-reduce of one rank's gradients in a training step
/// (Trainer::step): which gradients are final when, and their sum beside the
/// schedule by a GradientReducer.
///   1. create() takes, per stage of the rank, the parameters to sum this
///      way (the untied ones: the tied sum changes the others after the
///      schedule) and the number of the stage's actions that write their
///      gradients in a step (its B and W). The parameters are bucketed last
///      first (planBuckets), as the backward finishes them.
///   2. With `perBucket` (CPU stages: their backward runs on the caller's
///      thread), a post hook on each parameter's gradient accumulator counts
///      its runs in the step; after the last one the gradient is final, and
///      once every member of a bucket is, the bucket starts (in bucket
///      order, so that every replica starts the same buckets in the same
///      order), while the rest of that backward still runs.
///   3. stageDone(s) (ExecutorStep::afterWeightGradients) starts whatever
///      of stage s has not started (every bucket without `perBucket`; a
///      parameter that a microbatch did not reach); finish() starts what no
///      stageDone() did, then waits (GradientReducer::wait).
/// Between beginStep() and finish() or abandon() the replica transport and
/// the covered gradients are the reducer's (GradientReducer). Hooks outside
/// a step (an evaluation's backward) do nothing.
class OverlappedAllReduce {
public:
  /// Errors: LibTorch's, as one line.
  static llvm::Expected<std::unique_ptr<OverlappedAllReduce>>
  create(Transport &replicas, std::map<int, std::vector<at::Tensor>> params,
         const std::map<int, int> &backwards, bool perBucket,
         int64_t bucketBytes = kGradientBucketBytes);
  ~OverlappedAllReduce();

  /// Whether `param` of `stage` is summed here.
  bool covers(int stage, const at::Tensor &param) const;
  void beginStep();
  void stageDone(int stage);
  llvm::Expected<GradientReducer::Times> finish(TraceRecorder *trace);
  void abandon();
  /// The buckets of `stage` started since beginStep().
  size_t startedBuckets(int stage) const;

private:
  struct State;
  explicit OverlappedAllReduce(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

/// Sums `value` over the replica group (every member calls it): the same
/// double on all of them. Errors: LostRankError.
llvm::Expected<double> allReduceScalar(Transport &replicas, double value,
                                       const llvm::Twine &what);

/// Lowercase hex SHA-256 of `tensors`' bytes (each copied to the CPU,
/// contiguous), in order: replicas whose parameters are bitwise equal have
/// the same digest.
std::string tensorsSha256(const std::vector<at::Tensor> &tensors);

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_DATAPARALLEL_H
