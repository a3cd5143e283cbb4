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
// Each rank gets two transports from one rendezvous of the job: one over
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

#include "runtime/link/Agreement.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/link/Link.h"
#include "runtime/link/Transport.h"
#include "runtime/platform/DeviceKind.h"

#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
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

/// A rank's two transports.
struct ReplicaTransports {
  /// Over its pipeline: rank pipelineRankOf(env.rank) of R.
  std::unique_ptr<Transport> pipeline;
  /// Over its replica group: rank replicaOf(env.rank) of D.
  std::unique_ptr<Transport> replicas;
};

/// Meets the job's ranks once and connects both transports of env.rank
/// (connectGroupTransports(), runtime/link/Rendezvous.h): the pipeline's first,
/// then the replica group's, each within `timeout`. CUDA tensors travel
/// over NCCL on both, as on any transport. `agreement`: as for
/// connectTransport(). Errors: connectTransport()'s.
llvm::Expected<ReplicaTransports>
connectReplicas(const LaunchEnv &env, const DataParallelLayout &layout,
                DeviceKind device, std::chrono::milliseconds timeout,
                LinkPolicy link, const Agreement &agreement = Agreement());

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
/// category "wait" for `stage` on `trace` (when not null). Errors:
/// LostRankError naming the job rank; LibTorch's, as one line.
llvm::Error allReduceGradients(Transport &replicas,
                               const std::vector<at::Tensor> &params,
                               int64_t bucketBytes, int stage,
                               TraceRecorder *trace);

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
