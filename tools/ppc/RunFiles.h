//===- tools/ppc/RunFiles.h - ppc run's files in and out --------*- C++ -*-===//
//
// `ppc run`'s file semantics on top of the runtime's Pipeline
// (runtime/run/Pipeline.h): which inputs a path holds, where the outputs go,
// and which outputs it refuses to write. Part of the CLI, not of
// libppc_runtime: a program that links the runtime brings its own inputs and
// outputs.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_RUNFILES_H
#define PPC_TOOLS_PPC_RUNFILES_H

#include "runtime/run/Pipeline.h"
#include "tools/ppc/Progress.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace ppc {

/// The most batches one input may hold (a list or a directory), and the
/// most runs --repeat may ask for.
constexpr int64_t kMaxBatches = 1000000;
constexpr int64_t kMaxRepeat = 1000000;

/// What runPipelineFiles shows while it runs, besides errors.
struct RunDisplay {
  /// The progress of the batches, on the output rank.
  ProgressStyle progress = ProgressStyle::Off;
  /// The note rank 0 prints to stderr once the first batch has run, given
  /// the stage count ("" or null: none); RuntimeFlags::microbatchesNote.
  std::function<std::string(int stages)> microbatchesNote;
};

/// What one rank of `ppc run` did.
struct RunSummary {
  /// The stats of the whole launch (batches = every batch of every
  /// repetition).
  RunStats stats;
  /// The samples (rows along dim 0 of the first output) of every batch,
  /// counted on the output rank; nullopt elsewhere or when the output has
  /// no batch dimension.
  std::optional<int64_t> samples;
  /// Whether this rank wrote the outputs.
  bool wroteOutputs = false;

  /// Seconds from the first batch's start to the last one's end.
  double seconds() const { return stats.totalMs / 1000; }
  /// Samples per second over the launch, when known.
  std::optional<double> samplesPerSecond() const {
    if (!samples || !(stats.totalMs > 0))
      return std::nullopt;
    return *samples / seconds();
  }
};

/// What `ppc run` runs: its files and --repeat.
struct RunFilesRequest {
  std::string manifestPath;
  /// One batch, a list of batches, or a directory of batch files.
  std::string inputPath;
  std::string outputPath;
  /// Runs of every batch, 1..kMaxRepeat.
  int64_t repeat = 1;
  /// More output files the caller writes (--stats-json), claimed with the
  /// others: (option, path) pairs.
  std::vector<std::pair<std::string, std::string>> extraOutputs;
  /// If not null, receives the printed schedule before the run.
  llvm::raw_ostream *schedule = nullptr;
};

/// The whole of `ppc run` for one rank, as a sequence of steps:
///   1. check --repeat and the outputs (every rank, before meeting the
///      others): an --output or --trace that would replace what the run
///      reads or keeps is refused (OutputGuard: the input, the manifest, a
///      stage file, the model, a meta cache file, --input-meta, each
///      other, `extraOutputs`);
///   2. create the pipeline (print its schedule if asked);
///   3. read the input where needed and share the input root's view of it
///      and of `repeat` with every rank;
///   4. on the output rank, check the output's form (create a directory);
///   5. run every batch `repeat` times;
///   6. write the outputs of the last repetition on the output rank, and
///      finish.
/// The input is one batch (a file loadTensors reads; the output is then a
/// tensor, or a tuple if the model returns one), a list of batches
/// (loadInputBatches; the output is a list of such outputs, written after
/// the last batch), or a directory of one-batch .pt files run in bytewise
/// name order (the output is a directory, created if missing, receiving one
/// file of the same name per input file as its batch completes);
/// docs/runtime.md, "Many batches per launch". The batches of all
/// repetitions flow as one stream of windows (RunOptions::streamMicrobatches,
/// Pipeline::submit): a window's outputs are written, and its progress
/// shown, batch by batch once the window has run; after a failure the files
/// of earlier windows stay, whole. Returns the stats of the whole launch.
/// Errors: those of Pipeline::create, run (prefixed with the batch when
/// there are several) and finish; --repeat out of range; a refused output;
/// an unreadable input or a batch that does not fit the model; input ranks
/// that see different inputs; an unwritable output.
llvm::Expected<RunSummary> runPipelineFiles(const RunFilesRequest &request,
                                            const LaunchEnv &env,
                                            const RunOptions &options,
                                            const RunDisplay &display);

} // namespace ppc

#endif // PPC_TOOLS_PPC_RUNFILES_H
