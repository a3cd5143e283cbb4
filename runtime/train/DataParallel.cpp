//===- runtime/train/DataParallel.cpp - Replicas of a pipeline ------------===//
//
// This file implements the data-parallel mesh, the connection of a rank's
// pipeline and replica-group transports, and the bucketed all-reduce of the
// gradients (see DataParallel.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/DataParallel.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/Collectives.h"
#include "runtime/link/Rendezvous.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"

#include <ATen/ATen.h>

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

llvm::Expected<ReplicaTransports>
connectReplicas(const LaunchEnv &env, const DataParallelLayout &layout,
                DeviceKind device, std::chrono::milliseconds timeout,
                LinkPolicy link, const Agreement &agreement) {
  if (env.worldSize != layout.worldSize())
    return makeError(llvm::formatv("internal error: a layout of {0} ranks "
                                   "for WORLD_SIZE {1}",
                                   layout.worldSize(), env.worldSize)
                         .str());
  int replica = layout.replicaOf(env.rank);
  int pipelineRank = layout.pipelineRankOf(env.rank);
  // Every rank connects its pipeline first: pipelines are disjoint, so all
  // of them connect at once, and then every replica group does.
  std::vector<RankGroup> groups = {
      {"pipeline" + std::to_string(replica), layout.pipeline(replica)},
      {"replicas" + std::to_string(pipelineRank),
       layout.replicaGroup(pipelineRank)}};
  auto transports =
      connectGroupTransports(env, device, timeout, link, groups, agreement);
  if (!transports)
    return transports.takeError();
  ReplicaTransports out;
  out.pipeline = std::move((*transports)[0]);
  out.replicas = std::move((*transports)[1]);
  return out;
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

llvm::Error allReduceGradients(Transport &replicas,
                               const std::vector<at::Tensor> &params,
                               int64_t bucketBytes, int stage,
                               TraceRecorder *trace) {
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const at::Tensor &p : params)
    grads.push_back(p.grad());
  const std::vector<int> group = everyRank(replicas);
  std::vector<GradientBucket> buckets = planBuckets(grads, bucketBytes);
  for (size_t b = 0; b < buckets.size(); ++b) {
    const GradientBucket &bucket = buckets[b];
    int64_t start = TraceRecorder::nowUs();
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
        llvm::formatv("gradient bucket {0} of stage {1}", b, stage).str();
    if (llvm::Error err = allReduceSum(replicas, *flat, group, 0, what))
      return err;
    if (llvm::Error err = torchCall(
            "cannot unflatten the gradients of stage " + std::to_string(stage),
            [&] {
              int64_t offset = 0;
              for (size_t i : bucket.members) {
                at::Tensor &g = grads[i];
                g.copy_(flat->narrow(0, offset, g.numel()).view_as(g));
                offset += g.numel();
              }
            }))
      return err;
    if (trace)
      trace->add({"ALLREDUCE", "wait", stage, -1, start,
                  TraceRecorder::nowUs() - start});
  }
  return replicas.flushSends();
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
