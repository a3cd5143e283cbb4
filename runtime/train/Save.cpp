//===- runtime/train/Save.cpp - Saving and restoring a trained pipeline ---===//
//
// This file implements Save.h's saving: the staged-directory protocol of a
// save (StagedSave, one rank's part in it) and a checkpoint's files on top
// of it. Resume.cpp implements resuming.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Save.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/OptionName.h"
#include "lib/OutputGuard.h"
#include "lib/Stage.h"
#include "runtime/exec/RankContext.h"
#include "runtime/link/Collectives.h"
#include "runtime/train/Checkpoint.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <optional>
#include <sstream>

#include <unistd.h>

namespace ppc {

namespace {
/// What a save writes besides the stages and the manifest (a checkpoint's
/// files); the default writes nothing more.
struct SaveExtras {
  /// Writes this rank's own files into the staged directory `tmp`, adding
  /// the path of each (relative to `tmp`) to `names` before writing it.
  std::function<llvm::Error(llvm::StringRef tmp,
                            std::vector<std::string> &names)>
      write;
  /// On rank 0, after the manifest: writes the last file into `tmp`,
  /// given the SHA-256 of every other file (relative path to hash).
  std::function<llvm::Error(llvm::StringRef tmp,
                            const std::map<std::string, std::string> &hashes)>
      last;
  /// Whether an existing `dir` may be replaced (StagedDirectory::commit).
  std::function<llvm::Error(llvm::StringRef dir)> replaceable;
};

/// What one rank wrote into a save's staged directory: removed again (its
/// files, the directories it made, then the staged directory if that is
/// now empty) unless the save succeeded, so that a rank whose peer died
/// mid-save leaves nothing behind; rank 0's StagedDirectory removes the
/// rest.
struct WrittenPart {
  std::string staged;
  std::vector<std::string> files, dirs;
  bool keep = false;
  ~WrittenPart() {
    if (keep || staged.empty())
      return;
    for (const std::string &file : files)
      llvm::sys::fs::remove(file);
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
      ::rmdir(it->c_str());
    ::rmdir(staged.c_str());
  }
};

/// `name` inside directory `dir`.
std::string pathIn(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

/// One rank's part in a save (Save.h's steps 1-3). Rank 0 reports in
/// lines: "ok\n" and an "INDEX SHA256" line per stage and a "file NAME
/// SHA256" line per extra file, or "error MESSAGE".
class StagedSave {
public:
  StagedSave(const TrainedPipeline &pipeline, const SaveExtras &extras)
      : ctx_(pipeline.ctx), savedTraining_(pipeline.savedTraining),
        extras_(extras), rank_(pipeline.ctx.rank()) {}

  llvm::Error run(llvm::StringRef dir);

private:
  /// 1. Learns the staged directory from rank 0 (which creates it).
  llvm::Error start(llvm::StringRef dir);
  /// 2. This rank's stages and extra files, and their hashes.
  llvm::Error writeOwnPart();
  llvm::Error writeStage(int index, Stage &stage);
  /// Stage `index`'s file, saved from the CPU in its saved mode.
  llvm::Expected<std::string> stageBytes(int index, Stage &stage);
  /// The directories of a nested stage file, one by one below the staged
  /// directory: never that itself, which rank 0 removes if it fails.
  llvm::Error createStageDirectories(llvm::StringRef file);
  llvm::Error writeExtras();
  /// Sends rank 0 this rank's report.
  llvm::Error report(llvm::Error written, llvm::StringRef dir);
  /// 3. On rank 0: the manifest, the last extra file and the switch;
  /// "ok" or "error MESSAGE".
  std::string commit();
  /// The ranks' reports, read into the manifest's stage hashes and the
  /// extra files' hashes; "" or "error MESSAGE".
  std::string readReports(Manifest &trained,
                          std::map<std::string, std::string> &files);
  llvm::Error writeManifest(const Manifest &trained,
                            std::map<std::string, std::string> &files);
  /// Every rank learns rank 0's outcome and returns it.
  llvm::Error share(std::string outcome);

  RankContext &ctx_;
  const std::map<int, bool> &savedTraining_;
  const SaveExtras &extras_;
  const int rank_;
  /// Rank 0's staged directory; every rank's path of it.
  std::optional<StagedDirectory> staged_;
  std::string tmp_;
  WrittenPart ownFiles_;
  /// Until this rank reports, rank 0 cannot commit: a signal that stops it
  /// here (the launcher's SIGTERM when a peer died) removes the whole
  /// staged directory, which no destructor would. Rank 0's StagedDirectory
  /// does the same for rank 0.
  std::optional<RemovedOnSignal> removedOnSignal_;
  std::string hashes_, mine_;
  bool failedHere_ = false;
  std::vector<std::string> parts_;
};

llvm::Error StagedSave::run(llvm::StringRef dir) {
  if (llvm::Error err = start(dir))
    return err;
  if (llvm::Error err = report(writeOwnPart(), dir))
    return err;
  std::string outcome = "ok";
  if (rank_ == 0) {
    outcome = commit();
    if (outcome != "ok")
      staged_->discard();
  }
  return share(std::move(outcome));
}

llvm::Error StagedSave::start(llvm::StringRef dir) {
  std::string where;
  if (rank_ == 0) {
    auto created = StagedDirectory::create(dir);
    if (created)
      staged_.emplace(std::move(*created));
    where = created ? "ok " + staged_->path()
                    : "error " + llvm::toString(created.takeError());
  }
  if (llvm::Error err = broadcastBytes(ctx_.transport(), where, 0,
                                       "the directory of the save"))
    return err;
  llvm::StringRef whereRef(where);
  if (whereRef.consume_front("error "))
    return makeError(rank_ == 0 ? whereRef.str()
                                : "rank 0 could not start the save: " + where);
  if (!whereRef.consume_front("ok "))
    return makeError("rank 0 sent a malformed save directory");
  tmp_ = whereRef.str();
  ownFiles_.staged = tmp_;
  if (rank_ != 0)
    removedOnSignal_.emplace(tmp_);
  return llvm::Error::success();
}

llvm::Error StagedSave::writeOwnPart() {
  if (!llvm::sys::fs::is_directory(tmp_))
    return makeError(llvm::formatv("rank {0} does not see the save's "
                                   "directory '{1}': every rank must save "
                                   "into one shared directory",
                                   rank_, tmp_)
                         .str());
  for (auto &[index, stage] : ctx_.stages())
    if (llvm::Error err = writeStage(index, stage))
      return err;
  return writeExtras();
}

llvm::Expected<std::string> StagedSave::stageBytes(int index, Stage &stage) {
  // Saved from the CPU, so that the file loads on any machine (a module
  // saved on CUDA names its device); to() keeps the parameters'
  // identity, so the optimizer still holds them after moving back.
  c10::Device device = ctx_.device();
  bool training = savedTraining_.at(index);
  return torchCall("cannot save stage " + std::to_string(index), [&] {
    stage.executable().setTraining(training);
    if (!device.is_cpu())
      stage.executable().to(c10::kCPU);
    std::ostringstream os;
    stage.executable().save(os);
    if (!device.is_cpu())
      stage.executable().to(device);
    stage.executable().setTraining(true);
    return os.str();
  });
}

llvm::Error StagedSave::createStageDirectories(llvm::StringRef file) {
  llvm::StringRef parent = llvm::sys::path::parent_path(file);
  llvm::SmallString<256> path(tmp_);
  for (llvm::StringRef part : llvm::make_range(llvm::sys::path::begin(parent),
                                               llvm::sys::path::end(parent))) {
    llvm::sys::path::append(path, part);
    if (std::error_code ec = llvm::sys::fs::create_directory(path))
      return makeError("cannot create '" + path + "': " + ec.message());
    ownFiles_.dirs.push_back(std::string(path));
  }
  return llvm::Error::success();
}

llvm::Error StagedSave::writeStage(int index, Stage &stage) {
  const StageInfo &info = ctx_.manifest().stages[index];
  auto bytes = stageBytes(index, stage);
  if (!bytes)
    return bytes.takeError();
  if (llvm::Error err = createStageDirectories(info.file))
    return err;
  std::string path = pathIn(tmp_, info.file);
  ownFiles_.files.push_back(path);
  if (llvm::Error err = writeFileAtomically(path, [&](llvm::raw_ostream &os) {
        os.write(bytes->data(), bytes->size());
        return llvm::Error::success();
      }))
    return err;
  hashes_ += llvm::formatv("{0} {1}\n", index, sha256Hex(*bytes)).str();
  return llvm::Error::success();
}

llvm::Error StagedSave::writeExtras() {
  if (!extras_.write)
    return llvm::Error::success();
  std::vector<std::string> names;
  llvm::Error err = extras_.write(tmp_, names);
  for (const std::string &name : names)
    ownFiles_.files.push_back(pathIn(tmp_, name));
  if (err)
    return err;
  for (const std::string &name : names) {
    auto hash = sha256File(pathIn(tmp_, name));
    if (!hash)
      return hash.takeError();
    hashes_ += "file " + name + " " + *hash + "\n";
  }
  return llvm::Error::success();
}

llvm::Error StagedSave::report(llvm::Error written, llvm::StringRef dir) {
  llvm::Error failure = StagedDirectory::renamed(std::move(written), tmp_, dir);
  mine_ = failure ? "error " + llvm::toString(std::move(failure))
                  : "ok\n" + hashes_;
  failedHere_ = llvm::StringRef(mine_).startswith("error ");
  removedOnSignal_.reset();
  return gatherBytes(ctx_.transport(), mine_, 0, parts_, "the saved stages");
}

std::string StagedSave::readReports(Manifest &trained,
                                    std::map<std::string, std::string> &files) {
  for (int r = 0; r < ctx_.env().worldSize; ++r) {
    llvm::StringRef part(parts_[r]);
    if (part.consume_front("error "))
      return llvm::formatv("error rank {0} could not save: {1}", r,
                           printable(part, 400))
          .str();
    if (!part.consume_front("ok\n"))
      return llvm::formatv("error rank {0} sent a malformed save report", r)
          .str();
    llvm::SmallVector<llvm::StringRef, 8> rows;
    part.split(rows, '\n', -1, false);
    for (llvm::StringRef row : rows) {
      if (row.consume_front("file ")) {
        auto [name, hash] = row.rsplit(' ');
        files[name.str()] = hash.str();
        continue;
      }
      auto [index, hash] = row.split(' ');
      unsigned stage = 0;
      if (index.getAsInteger(10, stage) || stage >= trained.stages.size() ||
          hash.size() != 64)
        return llvm::formatv("error rank {0} sent a malformed stage "
                             "hash '{1}'",
                             r, printable(row))
            .str();
      trained.stages[stage].sha256 = hash.str();
    }
  }
  return "";
}

llvm::Error
StagedSave::writeManifest(const Manifest &trained,
                          std::map<std::string, std::string> &files) {
  std::string path = pathIn(tmp_, "manifest.json");
  if (llvm::Error err = staged_->renamed(trained.save(path)))
    return err;
  if (!extras_.last)
    return llvm::Error::success();
  for (const StageInfo &info : trained.stages)
    files[info.file] = info.sha256;
  auto manifestHash = sha256File(path);
  if (!manifestHash)
    return manifestHash.takeError();
  files["manifest.json"] = *manifestHash;
  return staged_->renamed(extras_.last(tmp_, files));
}

std::string StagedSave::commit() {
  Manifest trained = ctx_.manifest();
  std::map<std::string, std::string> files;
  std::string problem = readReports(trained, files);
  if (!problem.empty())
    return problem;
  llvm::Error err = writeManifest(trained, files);
  if (!err)
    err = staged_->commit(extras_.replaceable);
  return err ? "error " + llvm::toString(std::move(err)) : "ok";
}

llvm::Error StagedSave::share(std::string outcome) {
  if (llvm::Error err =
          broadcastBytes(ctx_.transport(), outcome, 0, "the save's outcome"))
    return err;
  llvm::StringRef result(outcome);
  if (result == "ok") {
    ownFiles_.keep = true;
    return llvm::Error::success();
  }
  if (!result.consume_front("error "))
    return makeError("rank 0 sent a malformed save outcome");
  // The rank that failed has reported its own error already.
  if (failedHere_)
    return makeError(llvm::StringRef(mine_).drop_front(6));
  return makeError(rank_ == 0 ? result.str()
                              : "the save failed on rank 0: " + result.str());
}

/// Data parallel: runs `write` on the ranks of replica 0 (the
/// replicas hold the same state); the other replicas wait for it, so that
/// the job ends together. Without replicas, just `write`.
llvm::Error onReplicaZero(RankContext &ctx,
                          llvm::function_ref<llvm::Error()> write) {
  Transport *replicas = ctx.replicaTransport();
  if (!replicas)
    return write();
  if (ctx.replica() == 0)
    if (llvm::Error err = write())
      return err;
  return barrier(*replicas);
}
} // namespace

llvm::Error saveTrained(const TrainedPipeline &pipeline, llvm::StringRef dir) {
  return onReplicaZero(pipeline.ctx, [&]() -> llvm::Error {
    RankContext &ctx = pipeline.ctx;
    {
      OutputGuard guard;
      keepManifestFiles(guard, ctx.manifestPath(),
                        metaCacheDirOf(ctx.options(), ctx.manifestPath()));
      if (llvm::Error err =
              guard.claimReplacedDirectory(optionName(Option::Save), dir))
        return err;
    }
    SaveExtras extras;
    extras.replaceable = [](llvm::StringRef d) {
      return checkEarlierOutput(d, optionName(Option::Save));
    };
    return StagedSave(pipeline, extras).run(dir);
  });
}

// Checkpoints

std::vector<std::pair<std::string, at::Tensor>>
stageParameters(RankContext &ctx, int stage) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto &named :
       ctx.stages().at(stage).executable().namedParameters())
    out.emplace_back(named.name, named.value);
  return out;
}

namespace {
/// A checkpoint's files of this rank: each stage's optimizer state and the
/// generators (SaveExtras::write).
llvm::Error writeCheckpointFiles(const TrainedPipeline &pipeline, int step,
                                 llvm::StringRef tmp,
                                 std::vector<std::string> &names) {
  RankContext &ctx = pipeline.ctx;
  for (auto &entry : ctx.stages()) {
    if (!pipeline.optimizer)
      break;
    auto state =
        optimizerStateOf(*pipeline.optimizer, pipeline.options.optimizer,
                         stageParameters(ctx, entry.first));
    if (!state)
      return state.takeError();
    names.push_back(optimizerFileName(entry.first));
    if (llvm::Error err = saveTensorDict(pathIn(tmp, names.back()), *state))
      return err;
  }
  names.push_back(rngFileName(ctx.rank()));
  if (llvm::Error err =
          saveTensorDict(pathIn(tmp, names.back()), rngStateOf(ctx.device())))
    return err;
  if (pipeline.options.beforeCheckpointReport)
    pipeline.options.beforeCheckpointReport(step);
  return llvm::Error::success();
}

/// checkpoint.json, written last by rank 0 (SaveExtras::last).
llvm::Error
writeCheckpointInfo(const TrainedPipeline &pipeline, int step,
                    llvm::StringRef tmp,
                    const std::map<std::string, std::string> &hashes) {
  const TrainOptions &options = pipeline.options;
  CheckpointInfo info;
  info.step = step;
  info.dataIndex = step;
  info.stages = static_cast<int>(pipeline.ctx.manifest().stages.size());
  info.worldSize = pipeline.ctx.env().worldSize;
  info.optimizer = options.optimizer;
  info.lr = options.lr;
  info.momentum = options.momentum;
  info.weightDecay = options.weightDecay;
  info.files = hashes;
  return writeFileAtomically(pathIn(tmp, kCheckpointFile),
                             [&](llvm::raw_ostream &os) {
                               os << checkpointJSON(info);
                               return llvm::Error::success();
                             });
}

llvm::Error saveCheckpointOfPipeline(const TrainedPipeline &pipeline, int step,
                                     llvm::StringRef dir, int keep) {
  const int rank = pipeline.ctx.rank();
  if (rank == 0)
    removeCheckpointParts(dir);
  SaveExtras extras;
  extras.replaceable = [](llvm::StringRef d) {
    return checkCheckpointContents(d);
  };
  extras.write = [&](llvm::StringRef tmp, std::vector<std::string> &names) {
    return writeCheckpointFiles(pipeline, step, tmp, names);
  };
  extras.last = [&](llvm::StringRef tmp,
                    const std::map<std::string, std::string> &hashes) {
    return writeCheckpointInfo(pipeline, step, tmp, hashes);
  };
  if (llvm::Error err = StagedSave(pipeline, extras)
                            .run(pathIn(dir, checkpointDirName(step))))
    return err;
  if (rank == 0)
    pruneCheckpoints(dir, keep, step);
  return llvm::Error::success();
}
} // namespace

llvm::Error saveCheckpointAfter(const TrainedPipeline &pipeline, int step,
                                llvm::StringRef dir, int keep) {
  return onReplicaZero(pipeline.ctx, [&] {
    return saveCheckpointOfPipeline(pipeline, step, dir, keep);
  });
}

} // namespace ppc
