//===- runtime/train/Save.h - Saving and restoring a trained pipeline -----===//
//
// What Trainer::save, Trainer::saveCheckpoint and Trainer::resume do on each
// rank (runtime/train/Trainer.h states their contracts and errors;
// runtime/train/Checkpoint.h the checkpoints' layout on disk).
//
// A save writes one directory atomically as a whole, across ranks:
//   1. rank 0 stages a directory beside the destination and tells every
//      rank where;
//   2. each rank writes its stages there (in the mode they were saved in)
//      and its own extra files (a checkpoint's optimizer state and
//      generators), then reports to rank 0 the SHA-256 of each, or its
//      error;
//   3. rank 0 writes the manifest (and a checkpoint's checkpoint.json)
//      beside them and switches the directory in, or discards it if any
//      rank failed; every rank learns which.
// With replicas, replica 0's ranks write and the other replicas wait for
// them (the replicas hold the same state).
//
// Internal to libppc_runtime: not installed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_SAVE_H
#define PPC_RUNTIME_TRAIN_SAVE_H

#include "runtime/train/TrainOptions.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
} // namespace torch::optim

namespace ppc {

class RankContext;

/// What saving reads (and resuming sets) of one rank's training job.
struct TrainedPipeline {
  RankContext &ctx;
  /// Whether each stage's module was saved in training mode: a save writes
  /// each in that mode and puts it back into training mode.
  const std::map<int, bool> &savedTraining;
  /// This rank's optimizer; null on a rank without parameters.
  torch::optim::Optimizer *optimizer;
  const TrainOptions &options;
};

/// Trainer::save: the stages and a manifest to `dir`.
llvm::Error saveTrained(const TrainedPipeline &pipeline, llvm::StringRef dir);

/// Trainer::saveCheckpoint: the checkpoint after step `step` to
/// `dir`/step-<8-digit step>, keeping the `keep` newest. Calls
/// TrainOptions::beforeCheckpointReport, when set, once this rank's files
/// are written.
llvm::Error saveCheckpointAfter(const TrainedPipeline &pipeline, int step,
                                llvm::StringRef dir, int keep);

/// Trainer::resume: the checkpoint loaded, and its step.
struct ResumedCheckpoint {
  std::string path;
  int step = 0;
};
llvm::Expected<ResumedCheckpoint>
resumeCheckpoint(const TrainedPipeline &pipeline, llvm::StringRef dir);

/// The parameters of stage `stage` of this rank with their paths: what a
/// checkpoint's optimizer state is keyed by.
std::vector<std::pair<std::string, at::Tensor>>
stageParameters(RankContext &ctx, int stage);

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_SAVE_H
