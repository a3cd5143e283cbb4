//===- tools/ppc/RunCommand.cpp - ppc run ---------------------------------===//
//
// CLI11 wiring for `ppc run`: one rank of a pipeline job, started by ppc
// launch or torchrun (the launch environment says which rank). All the work
// is runPipelineFiles() (tools/ppc/RunFiles.h) over libppc_runtime.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/FileUtil.h"
#include "runtime/platform/Blas.h"
#include "runtime/run/Pipeline.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/Progress.h"
#include "tools/ppc/RankProcess.h"
#include "tools/ppc/RunFiles.h"
#include "tools/ppc/RuntimeFlags.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>

namespace ppc {

namespace {
struct RunCommandOptions {
  std::string manifestPath, inputPath, outputPath, inputMeta;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  RuntimeFlags flags;
  bool stats = false;
  int64_t repeat = 1;
  int streamWindow = RunOptions::kDefaultStreamMicrobatches;
};
} // namespace

/// The --stats-json document of the output rank (docs/runtime.md).
static llvm::json::Value statsJSON(const RunCommandOptions &o,
                                   const LaunchEnv &env,
                                   const RunSummary &run) {
  const RunStats &s = run.stats;
  llvm::json::Object out{
      {"command", "run"},
      {"output", o.outputPath},
      {"world_size", env.worldSize},
      {"rank", s.rank},
      {"microbatches", o.flags.microbatches},
      {"schedule", scheduleName(o.schedule)},
      {"stream_window", o.streamWindow},
      {"batches", s.batches},
      {"seconds", run.seconds()},
      {"first_output_ms", s.firstOutputMs},
      {"meta", metaSourceName(s.metaSource)},
      {"meta_messages_sent", s.metaMessagesSent},
      {"messages_sent", s.messagesSent},
      {"cache_written", s.cacheWritten},
      {"blas", blasStatsName(loadedBlas())},
  };
  if (run.samples)
    out["samples"] = *run.samples;
  if (std::optional<double> rate = run.samplesPerSecond())
    out["samples_per_second"] = *rate;
  return out;
}

static llvm::Expected<int> runRun(const RunCommandOptions &o) {
  auto env = startRank();
  if (!env)
    return env.takeError();
  RunOptions options;
  if (llvm::Error err = o.flags.applyTo(options))
    return err;
  options.schedule = o.schedule;
  options.inputMetaPath = o.inputMeta;
  options.streamMicrobatches = o.streamWindow;
  // What every rank must have alike besides the runtime's own record
  // (runtime/link/Agreement.h); --output is the output rank's.
  options.agreement.setFileDigest("--input", o.inputPath);
  options.agreement.set("--repeat", std::to_string(o.repeat));
  RunDisplay display;
  display.progress = progressStyle(2, o.flags.quiet, o.flags.progress);
  display.microbatchesNote = [&](int stages) {
    return o.flags.microbatchesNote(stages);
  };
  RunFilesRequest request;
  request.manifestPath = o.manifestPath;
  request.inputPath = o.inputPath;
  request.outputPath = o.outputPath;
  request.repeat = o.repeat;
  if (!o.flags.statsJsonPath.empty())
    request.extraOutputs.emplace_back("--stats-json", o.flags.statsJsonPath);
  request.schedule = o.flags.printSchedule ? &llvm::outs() : nullptr;
  auto run = runPipelineFiles(request, *env, options, display);
  if (!run)
    return run.takeError();
  if (o.stats)
    llvm::outs() << run->stats.line() << " batches=" << run->stats.batches
                 << "\n";
  llvm::outs().flush();
  int64_t batches = run->stats.batches;
  const char *noun = batches == 1 ? " batch" : " batches";
  if (!o.flags.tracePath.empty() && env->rank == 0 && !o.flags.quiet)
    llvm::errs() << "wrote " << o.flags.tracePath << " (the trace of "
                 << batches << noun << ")\n";
  if (!run->wroteOutputs)
    return 0;
  if (!o.flags.statsJsonPath.empty())
    if (llvm::Error err = writeJSONFileAtomically(o.flags.statsJsonPath,
                                                  statsJSON(o, *env, *run)))
      return err;
  if (!o.flags.quiet) {
    llvm::errs() << "wrote " << o.outputPath << " (" << batches << noun << ", "
                 << formatSeconds(run->seconds());
    if (std::optional<double> rate = run->samplesPerSecond())
      llvm::errs() << ", " << formatRate(*rate, "samples");
    llvm::errs() << ")\n";
  }
  return 0;
}

Command addRunCommand(CLI::App &parent) {
  auto o = std::make_shared<RunCommandOptions>();
  CLI::App *app =
      parent.add_subcommand("run", "Run one rank of a pipeline (start every "
                                   "rank with ppc launch or torchrun)");
  app->footer(
      "Run the stages of MANIFEST on the ranks of a torchrun-style job (RANK, "
      "WORLD_SIZE, "
      "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): stage k runs "
      "on rank k mod "
      "WORLD_SIZE, which must divide the stage count (ppc split says which "
      "rank counts its stages take). The input is split into microbatches "
      "along dim 0; the rank "
      "of the last "
      "stage writes the concatenated outputs to --output. Boundary shapes are "
      "inferred from "
      "the first microbatch and cached beside the manifest for later runs. "
      "--input may hold a list of batches, or be a directory of batch files: "
      "all run in one launch, and metadata is settled once per shape "
      "(docs/runtime.md, \"Many batches per launch\").");
  app->add_option("manifest", o->manifestPath,
                  "manifest.json written by ppc split")
      ->required()
      ->check(pathOption());
  app->add_option(
         "--input", o->inputPath,
         "Input written by torch.save: one batch (a tensor or a tuple/list of "
         "tensors, one per model input); a list of batches (a list whose "
         "elements include a tuple/list, or, for a one-input model, a list "
         "of more than one tensor); or a directory whose .pt files each hold "
         "one batch, run in name order")
      ->required()
      ->check(pathOption());
  app->add_option("--output", o->outputPath,
                  "Written by the last stage's rank (torch.load reads it): "
                  "the outputs of one batch, a list of them for a list of "
                  "batches, or for a directory input a directory receiving "
                  "one file per input file, of the same name")
      ->required()
      ->check(pathOption());
  app->add_option("--repeat", o->repeat,
                  "Run the input this many times (1..1000000) in one launch, "
                  "for benchmarking; the last run's outputs are written")
      ->capture_default_str()
      ->transform(intInRange(1, kMaxRepeat));
  app->add_option(
         "--stream-window", o->streamWindow,
         "Microbatches in flight across the batches of a launch (0..65536): "
         "consecutive batches run as one window of max(1, N / --microbatches) "
         "batches, so the pipeline does not drain between them; outputs "
         "still come out per batch, in order. 0 runs each batch on its own")
      ->capture_default_str()
      ->transform(intInRange(0, kMaxMicrobatches));
  o->flags.addTo(*app);
  addScheduleOption(*app, o->schedule, /*inference=*/true);
  app->add_option(
         "--input-meta", o->inputMeta,
         "JSON file with the boundary metadata (docs/runtime.md); no inference")
      ->check(pathOption());
  app->add_flag("--stats", o->stats,
                "Print one 'stats: rank=R ...' line per rank, covering every "
                "batch of the launch (batches=N at its end)");
  return {app, [o] { return runRun(*o); }};
}

} // namespace ppc
