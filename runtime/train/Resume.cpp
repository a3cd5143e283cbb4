//===- runtime/train/Resume.cpp - Resuming from a checkpoint --------------===//
//
// This file implements resumeCheckpoint (Save.h): rank 0 chooses and
// verifies the checkpoint, every rank loads its part of it (its stages'
// tensors, their optimizer state, its generators), and every rank learns
// whether all could.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Save.h"

#include "lib/Error.h"
#include "lib/Manifest.h"
#include "lib/Stage.h"
#include "runtime/exec/RankContext.h"
#include "runtime/link/Collectives.h"
#include "runtime/train/Checkpoint.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace ppc {

namespace {
/// `name` inside directory `dir`.
std::string pathIn(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

/// Whether checkpoint `path` was written by a job like this one.
llvm::Error checkCheckpointFits(const TrainedPipeline &pipeline,
                                const std::string &path,
                                const CheckpointInfo &info) {
  const int stages = static_cast<int>(pipeline.ctx.manifest().stages.size());
  if (info.stages != stages)
    return makeError(llvm::formatv("the checkpoint '{0}' has {1} stages, the "
                                   "manifest {2}",
                                   path, info.stages, stages)
                         .str());
  OptimizerKind ours = pipeline.options.optimizer;
  if (info.optimizer != ours)
    return makeError("the checkpoint '" + path + "' was trained with " +
                     "--optimizer " + optimizerName(info.optimizer) +
                     ", this run with " + optimizerName(ours) +
                     ": resume with the same optimizer");
  return llvm::Error::success();
}

/// Copies every parameter and buffer of stage `index` of the checkpoint
/// `path` (by path, with its dtype and shape) into `ours`.
llvm::Error loadStageTensors(const Manifest &saved, const std::string &path,
                             int index, StageExecutable &ours) {
  auto theirs = Stage::load(saved, path, index);
  if (!theirs)
    return theirs.takeError();
  std::map<std::string, at::Tensor> from;
  for (auto list : {theirs->executable().namedParameters(),
                    theirs->executable().namedBuffers()})
    for (NamedTensor &n : list)
      from[n.name] = n.value;
  std::vector<NamedTensor> to = ours.namedParameters();
  for (NamedTensor &n : ours.namedBuffers())
    to.push_back(n);
  if (to.size() != from.size())
    return makeError(llvm::formatv("stage {0} of the checkpoint '{1}' holds "
                                   "{2} tensors, the manifest's {3}",
                                   index, path, from.size(), to.size())
                         .str());
  for (NamedTensor &n : to) {
    auto it = from.find(n.name);
    if (it == from.end() || it->second.sizes() != n.value.sizes() ||
        it->second.dtype() != n.value.dtype())
      return makeError(llvm::formatv("stage {0} of the checkpoint '{1}' has "
                                     "no {2} '{3}' of the manifest's dtype "
                                     "and shape",
                                     index, path, "tensor", n.name)
                           .str());
    at::Tensor source = it->second;
    if (llvm::Error err = torchCall("cannot load '" + n.name + "'", [&] {
          at::NoGradGuard noGrad;
          n.value.copy_(source);
        }))
      return err;
  }
  return llvm::Error::success();
}

/// Loads stage `index`'s optimizer state, when the checkpoint has one.
llvm::Error loadOptimizerState(const TrainedPipeline &pipeline,
                               const std::string &path,
                               const CheckpointInfo &info, int index) {
  std::string file = optimizerFileName(index);
  if (!pipeline.optimizer || !info.files.count(file))
    return llvm::Error::success();
  std::string where = pathIn(path, file);
  auto state = loadTensorDict(where);
  if (!state)
    return state.takeError();
  return setOptimizerState(*pipeline.optimizer, pipeline.options.optimizer,
                           stageParameters(pipeline.ctx, index), *state,
                           "'" + where + "'");
}

/// Loads the stages, optimizer state and generators of checkpoint `path`
/// (verified) onto this rank.
llvm::Error loadCheckpoint(const TrainedPipeline &pipeline,
                           const std::string &path,
                           const CheckpointInfo &info) {
  if (llvm::Error err = checkCheckpointFits(pipeline, path, info))
    return err;
  auto saved = Manifest::load(pathIn(path, "manifest.json"));
  if (!saved)
    return saved.takeError();
  for (auto &[index, stage] : pipeline.ctx.stages()) {
    if (llvm::Error err =
            loadStageTensors(*saved, path, index, stage.executable()))
      return err;
    if (llvm::Error err = loadOptimizerState(pipeline, path, info, index))
      return err;
  }
  std::string rng = rngFileName(pipeline.ctx.rank());
  if (!info.files.count(rng))
    return llvm::Error::success();
  auto state = loadTensorDict(pathIn(path, rng));
  if (!state)
    return state.takeError();
  return setRngState(*state);
}

/// The checkpoint rank 0 chose (and verified) in `dir`, on every rank.
llvm::Expected<std::string> chooseCheckpoint(RankContext &ctx,
                                             llvm::StringRef dir) {
  const int rank = ctx.rank();
  std::string chosen;
  if (rank == 0) {
    auto found = findNewestCheckpoint(dir, "--resume");
    chosen = found ? "ok " + found->path
                   : "error " + llvm::toString(found.takeError());
  }
  if (llvm::Error err = broadcastBytes(ctx.transport(), chosen, 0,
                                       "the checkpoint to resume from"))
    return err;
  llvm::StringRef ref(chosen);
  if (ref.consume_front("error "))
    return makeError(rank == 0 ? ref.str()
                               : "rank 0 could not resume: " + ref.str());
  if (!ref.consume_front("ok "))
    return makeError("rank 0 sent a malformed checkpoint path");
  return ref.str();
}

/// Every rank learns whether all loaded their part (`loaded`: this
/// rank's); the failing rank's own error first.
llvm::Error agreeOnResume(RankContext &ctx, llvm::Error loaded) {
  std::string mine =
      loaded ? "error " + llvm::toString(std::move(loaded)) : "ok";
  std::vector<std::string> parts;
  if (llvm::Error err = gatherBytes(ctx.transport(), mine, 0, parts,
                                    "the resumed checkpoint"))
    return err;
  std::string outcome = "ok";
  for (int r = 0; ctx.rank() == 0 && r < static_cast<int>(parts.size()); ++r)
    if (parts[r] != "ok") {
      outcome = llvm::formatv("{0} {1}", r, parts[r]).str();
      break;
    }
  if (llvm::Error err =
          broadcastBytes(ctx.transport(), outcome, 0, "the resume's outcome"))
    return err;
  if (outcome == "ok")
    return llvm::Error::success();
  if (mine != "ok")
    return makeError(llvm::StringRef(mine).drop_front(6));
  auto [who, what] = llvm::StringRef(outcome).split(' ');
  return makeError("the resume failed on rank " + who + ": " +
                   what.drop_front(6));
}
} // namespace

llvm::Expected<ResumedCheckpoint>
resumeCheckpoint(const TrainedPipeline &pipeline, llvm::StringRef dir) {
  // Rank 0 chooses (and verifies) the checkpoint; every rank loads its
  // part of it; every rank learns whether all could.
  auto path = chooseCheckpoint(pipeline.ctx, dir);
  if (!path)
    return path.takeError();
  ResumedCheckpoint resumed;
  resumed.path = *path;
  llvm::Error loaded = [&]() -> llvm::Error {
    auto info = readCheckpointInfo(resumed.path);
    if (!info)
      return info.takeError();
    resumed.step = info->step;
    return loadCheckpoint(pipeline, resumed.path, *info);
  }();
  if (llvm::Error err = agreeOnResume(pipeline.ctx, std::move(loaded)))
    return err;
  return resumed;
}

} // namespace ppc
