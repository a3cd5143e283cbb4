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
#include "lib/OptionName.h"
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
                     optionName(Option::Optimizer) + " " +
                     optimizerName(info.optimizer) + ", this run with " +
                     optimizerName(ours) + ": resume with the same optimizer");
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

/// A file of the checkpoint whose contents are wrong, as opposed to a
/// checkpoint of another job: the refusal names the newest older one that
/// is intact.
class CorruptFile : public llvm::ErrorInfo<CorruptFile> {
public:
  static char ID;
  explicit CorruptFile(std::string message) : message_(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override { os << message_; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string message_;
};
char CorruptFile::ID;

/// `err`, when it is one, as a CorruptFile of checkpoint `path`.
llvm::Error corrupt(const std::string &path, llvm::Error err) {
  if (!err)
    return err;
  return llvm::make_error<CorruptFile>(
      "the checkpoint '" + path +
      "' is corrupt: " + llvm::toString(std::move(err)));
}

/// The tensors of checkpoint file `name` (at `where`), which this rank must
/// read whatever checkpoint.json lists; a file the list lacks is missing
/// (verifyCheckpoint has checked the listed ones' hashes).
llvm::Expected<c10::Dict<std::string, at::Tensor>>
loadListedDict(const std::string &where, const CheckpointInfo &info,
               const std::string &name) {
  if (!info.files.count(name))
    return makeError("'" + where + "' is missing");
  return loadTensorDict(where);
}

/// Stage `index`'s optimizer state, which a stage with parameters must
/// have (written by the rank's optimizer whatever checkpoint.json lists).
llvm::Error loadOptimizerState(const TrainedPipeline &pipeline,
                               const std::string &path,
                               const CheckpointInfo &info, int index) {
  auto params = stageParameters(pipeline.ctx, index);
  if (!pipeline.optimizer || params.empty())
    return llvm::Error::success();
  std::string where = pathIn(path, optimizerFileName(index));
  auto state = loadListedDict(where, info, optimizerFileName(index));
  if (!state)
    return state.takeError();
  OptimizerKind kind = pipeline.options.optimizer;
  bool keepsState = kind != OptimizerKind::SGD || info.momentum != 0;
  return setOptimizerState(*pipeline.optimizer, kind, params, *state,
                           keepsState, "'" + where + "'");
}

/// This rank's generators, which every rank of the job that wrote the
/// checkpoint saved (a rank beyond its world size has none).
llvm::Error loadGenerators(const TrainedPipeline &pipeline,
                           const std::string &path,
                           const CheckpointInfo &info) {
  const int rank = pipeline.ctx.rank();
  if (rank >= info.worldSize)
    return llvm::Error::success();
  std::string where = pathIn(path, rngFileName(rank));
  auto state = loadListedDict(where, info, rngFileName(rank));
  if (!state)
    return state.takeError();
  if (!state->contains("cpu"))
    return makeError("'" + where + "' holds no \"cpu\" generator state");
  return setRngState(*state);
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
    if (llvm::Error err =
            corrupt(path, loadOptimizerState(pipeline, path, info, index)))
      return err;
  }
  return corrupt(path, loadGenerators(pipeline, path, info));
}

/// The checkpoint rank 0 chose (and verified) in `dir`, on every rank.
llvm::Expected<std::string> chooseCheckpoint(RankContext &ctx,
                                             llvm::StringRef dir) {
  const int rank = ctx.rank();
  std::string chosen;
  if (rank == 0) {
    auto found = findNewestCheckpoint(dir, optionName(Option::Resume));
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

/// This rank's report of its load: "ok", "corrupt MESSAGE" (a CorruptFile)
/// or "error MESSAGE".
std::string reportOf(llvm::Error loaded) {
  std::string report = "ok";
  llvm::handleAllErrors(
      std::move(loaded),
      [&](const CorruptFile &c) { report = "corrupt " + c.message(); },
      [&](const llvm::ErrorInfoBase &e) { report = "error " + e.message(); });
  return report;
}

/// Every rank learns whether all loaded their part of checkpoint `path`
/// of `dir` (`loaded`: this rank's): the first failing rank's error, named
/// by that rank as its own, and a corrupt file with the newest older
/// checkpoint that is intact.
llvm::Error agreeOnResume(RankContext &ctx, llvm::Error loaded,
                          llvm::StringRef dir, llvm::StringRef path) {
  std::string mine = reportOf(std::move(loaded));
  std::vector<std::string> parts;
  if (llvm::Error err = gatherBytes(ctx.transport(), mine, 0, parts,
                                    "the resumed checkpoint"))
    return err;
  std::string outcome = "ok";
  for (int r = 0; ctx.rank() == 0 && r < static_cast<int>(parts.size()); ++r) {
    llvm::StringRef part(parts[r]);
    if (part == "ok")
      continue;
    bool isCorrupt = part.consume_front("corrupt ");
    if (!isCorrupt && !part.consume_front("error "))
      part = "sent a malformed report";
    outcome = llvm::formatv("{0} {1}", r, part).str();
    if (isCorrupt)
      outcome += olderCheckpointNote(dir, path);
    break;
  }
  if (llvm::Error err =
          broadcastBytes(ctx.transport(), outcome, 0, "the resume's outcome"))
    return err;
  if (outcome == "ok")
    return llvm::Error::success();
  auto [who, what] = llvm::StringRef(outcome).split(' ');
  if (who == std::to_string(ctx.rank()))
    return makeError(what);
  return makeError("the resume failed on rank " + who + ": " + what);
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
  if (llvm::Error err =
          agreeOnResume(pipeline.ctx, std::move(loaded), dir, resumed.path))
    return err;
  return resumed;
}

} // namespace ppc
