//===- tools/ppc/TrainFlags.h - ppc train's flags ---------------*- C++ -*-===//
//
// The flags of `ppc train` (their CLI11 table, grouped by topic, in
// TrainFlags.cpp) and the struct they are parsed into; TrainCommand.cpp runs
// the command over it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_TRAINFLAGS_H
#define PPC_TOOLS_PPC_TRAINFLAGS_H

#include "runtime/train/Checkpoint.h"
#include "tools/ppc/RuntimeFlags.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ppc {

/// `ppc train`'s flags, as parsed.
struct TrainCommandOptions {
  std::string manifestPath, dataPath, savePath, scheduleCSVPath, gradsDir;
  std::string loss = "mse", optimizer = "sgd";
  /// A name of Schedules.def, or "auto".
  std::string schedule = "1f1b";
  std::optional<int> maxActivations;
  RuntimeFlags flags;
  int steps = 1, lossOutput = 0;
  int64_t ignoreIndex = -100;
  double lr = 0.01, momentum = 0;
  /// Unset: the optimizer's default (defaultWeightDecay).
  std::optional<double> weightDecay;
  bool stats = false;
  // Checkpoints
  std::string checkpointDir, resumeDir;
  int checkpointEvery = 0, keep = kDefaultCheckpointKeep;
  // Clipping, LR schedules, step log
  double clipGradNorm = 0, minLr = 0;
  std::string lrSchedule = "constant", logFile, evalData;
  int warmupSteps = 0, evalEvery = 0;
  bool dryRun = false;
  // Data parallel
  int dataParallel = 1;
  // bf16 and activation recompute
  std::string precision = "fp32";
  bool recompute = false;
  std::optional<uint64_t> seed;
};

/// Adds every flag of `ppc train` to `app`, bound to `o` (which must
/// outlive `app`'s parsing), in --help's order.
void addTrainFlags(CLI::App &app, TrainCommandOptions &o);

} // namespace ppc

#endif // PPC_TOOLS_PPC_TRAINFLAGS_H
