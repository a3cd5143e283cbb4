//===- tools/ppc/TrainCommand.cpp - ppc train -----------------------------===//
//
// CLI11 wiring for `ppc train`: one rank of a pipeline training job, started
// by ppc launch or torchrun like `ppc run`. The work is Trainer
// (runtime/train/Trainer.h) and loadTrainingData (runtime/train/TrainData.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/OutputGuard.h"
#include "runtime/exec/Precision.h"
#include "runtime/platform/Blas.h"
#include "runtime/platform/MemoryMeter.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Optimizer.h"
#include "runtime/train/TrainData.h"
#include "runtime/train/Trainer.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/Progress.h"
#include "tools/ppc/RuntimeFlags.h"
#include "tools/ppc/TrainLog.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <memory>

namespace ppc {

namespace {
struct TrainCommandOptions {
  std::string manifestPath, dataPath, savePath, scheduleCSV, gradsDir;
  std::string loss = "mse", optimizer = "sgd";
  /// A name of Schedules.def, or "auto".
  std::string schedule = "1f1b";
  std::optional<int> maxActivations;
  RuntimeFlags flags;
  int steps = 1, lossOutput = 0;
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

/// Where rank `rank` writes its gradients under --save-grads DIR.
std::string gradsPath(llvm::StringRef dir, int rank) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "grads.rank" + std::to_string(rank) + ".pt");
  return std::string(path);
}

/// The spellings of every value of an enum, in its .def's order, for
/// CLI::IsMember.
template <typename Kind, size_t N>
std::vector<std::string> names(const Kind (&all)[N],
                               llvm::StringRef (*name)(Kind)) {
  std::vector<std::string> out;
  for (Kind kind : all)
    out.push_back(name(kind).str());
  return out;
}

/// Refuses, before any work, outputs that would replace what training
/// reads or keeps (OutputGuard): the manifest and its files, the data, the
/// schedule CSV, meta caches, each other; a --save directory that holds
/// anything but an earlier ppc output (as ppc split -o); a --save-grads
/// directory that does not exist.
llvm::Error checkOutputPaths(const TrainCommandOptions &o,
                             const RunOptions &run, int rank) {
  OutputGuard guard;
  keepManifestFiles(guard, o.manifestPath, metaCacheDirOf(run, o.manifestPath));
  guard.keep(o.dataPath, "the --data file");
  guard.keep(o.scheduleCSV, "the --schedule-csv file");
  guard.keep(o.evalData, "the --eval-data file");
  if (!o.savePath.empty()) {
    if (llvm::Error err = guard.claimReplacedDirectory("--save", o.savePath))
      return err;
  }
  if (!o.gradsDir.empty()) {
    if (!llvm::sys::fs::is_directory(o.gradsDir))
      return makeError("--save-grads '" + o.gradsDir +
                       "' is not an existing directory");
    if (llvm::Error err =
            guard.claimFile("--save-grads", gradsPath(o.gradsDir, rank)))
      return err;
  }
  if (!o.checkpointDir.empty()) {
    if (llvm::Error err =
            guard.claimDirectory("--checkpoint-dir", o.checkpointDir))
      return err;
    if (llvm::Error err =
            checkCheckpointDirectory(o.checkpointDir, "--checkpoint-dir"))
      return err;
  }
  if (!o.flags.tracePath.empty())
    if (llvm::Error err = guard.claimFile("--trace", o.flags.tracePath))
      return err;
  if (!o.logFile.empty())
    if (llvm::Error err = guard.claimFile("--log-file", o.logFile))
      return err;
  if (!o.flags.statsJsonPath.empty())
    return guard.claimFile("--stats-json", o.flags.statsJsonPath);
  return llvm::Error::success();
}

/// The rows of a target (the samples of a step), or -1 without a batch
/// dimension.
int64_t samplesOf(const at::Tensor &target) {
  return target.defined() && target.dim() >= 1 ? target.size(0) : -1;
}

/// The --stats-json document of the loss rank (docs/training.md).
llvm::json::Value statsJSON(const TrainCommandOptions &o, const LaunchEnv &env,
                            const std::vector<StepRecord> &steps,
                            const RateMeter &meter) {
  llvm::json::Array records;
  for (const StepRecord &r : steps) {
    llvm::json::Object record{
        {"step", r.step}, {"loss", r.loss}, {"seconds", r.seconds}};
    if (r.samples >= 0)
      record["samples"] = r.samples;
    if (r.peakBytes >= 0)
      record["peak_bytes"] = r.peakBytes;
    records.push_back(std::move(record));
  }
  llvm::json::Object out{{"command", "train"},
                         {"world_size", env.worldSize},
                         {"rank", env.rank},
                         {"microbatches", o.flags.microbatches},
                         {"schedule", o.schedule},
                         {"steps", std::move(records)},
                         {"seconds", meter.elapsedSeconds()}};
  if (o.dataParallel > 1)
    out["data_parallel"] = o.dataParallel;
  if (std::optional<double> rate = meter.overallSamplesPerSecond())
    out["samples_per_second"] = *rate;
  if (std::optional<double> rate = meter.samplesPerSecond())
    out["steady_samples_per_second"] = *rate;
  out["blas"] = blasStatsName(loadedBlas());
  return out;
}

/// " (0.041 s, 780 samples/s, 3.2 s left)": the timing after a step's
/// loss.
std::string stepTiming(double seconds, const RateMeter &meter, int64_t step,
                       int64_t steps) {
  std::string out = " (" + formatSeconds(seconds);
  if (std::optional<double> rate = meter.samplesPerSecond())
    out += ", " + formatRate(*rate, "samples");
  if (step < steps)
    if (std::optional<double> left = meter.secondsLeft(steps))
      out += ", " + formatSeconds(*left) + " left";
  return out + ")";
}

/// Writes the checkpoint after the step just done (Trainer::saveCheckpoint)
/// and says so on rank 0: "wrote checkpoint ck/step-00000004 (4.2 MB in
/// 0.031 s)".
llvm::Error writeCheckpoint(Trainer &t, const TrainCommandOptions &o) {
  ProgressClock::time_point start = ProgressClock::now();
  if (llvm::Error err = t.saveCheckpoint(o.checkpointDir, o.keep))
    return err;
  if (t.rank() != 0 || o.flags.quiet)
    return llvm::Error::success();
  double seconds =
      std::chrono::duration<double>(ProgressClock::now() - start).count();
  llvm::SmallString<256> dir(o.checkpointDir);
  llvm::sys::path::append(dir, checkpointDirName(t.stepsDone()));
  uint64_t bytes = 0;
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(dir, ec), end;
       !ec && it != end; it.increment(ec))
    if (auto size = fileSize(it->path()))
      bytes += *size;
    else
      llvm::consumeError(size.takeError());
  llvm::errs() << llvm::formatv("wrote checkpoint {0} ({1:f1} MB in {2})\n",
                                dir, double(bytes) / 1e6,
                                formatSeconds(seconds));
  return llvm::Error::success();
}

/// "%.9g": every float32 loss printed exactly enough to compare.
std::string formatLoss(double loss) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", loss);
  return text;
}
} // namespace

/// The optimizer's options of `o` (--optimizer ... --clip-grad-norm) in
/// `options`.
static void applyOptimizerFlags(const TrainCommandOptions &o,
                                TrainOptions &options) {
  options.optimizer = *parseOptimizerName(o.optimizer);
  options.lr = o.lr;
  options.momentum = o.momentum;
  options.weightDecay =
      o.weightDecay.value_or(defaultWeightDecay(options.optimizer));
  options.clipGradNorm = o.clipGradNorm;
  options.lrSchedule.kind = *parseLrScheduleName(o.lrSchedule); // validated
  options.lrSchedule.warmupSteps = o.warmupSteps;
  options.lrSchedule.minLr = o.minLr;
  options.lrSchedule.steps = o.steps;
}

/// --dry-run: the plan, checked, without a launch.
static llvm::Expected<int> printPlan(const TrainCommandOptions &o) {
  TrainOptions options;
  applyOptimizerFlags(o, options);
  if (llvm::Error err = checkOptimizerOptions(options))
    return err;
  printTrainPlan(llvm::outs(), options);
  return 0;
}

static llvm::Expected<int> runTrain(const TrainCommandOptions &o) {
  if (o.dryRun)
    return printPlan(o);
  auto env = LaunchEnv::fromEnvironment();
  if (!env)
    return env.takeError();
  TrainOptions options;
  o.flags.applyTo(options.run);
  options.autoSchedule = o.schedule == "auto";
  if (!options.autoSchedule)
    options.run.schedule = *parseScheduleName(o.schedule); // validated
  options.maxActivations = o.maxActivations;
  if (o.maxActivations && !options.autoSchedule)
    return makeError("--max-activations applies to --schedule auto");
  options.loss = *parseLossName(o.loss);
  options.lossOutput = o.lossOutput;
  applyOptimizerFlags(o, options);
  options.scheduleCSVPath = o.scheduleCSV;
  if (o.evalEvery > 0 && o.evalData.empty())
    return makeError("--eval-every needs --eval-data");
  options.dataParallel = o.dataParallel;
  // bf16 and activation recompute: the meter counts every step's
  // peak host bytes (its cost is two atomic operations per allocation).
  options.run.precision = *parsePrecision(o.precision); // validated
  options.recompute = o.recompute;
  options.seed = o.seed;
  MemoryMeter::install();
  if (llvm::Error err = checkOutputPaths(o, options.run, env->rank))
    return err;

  auto trainer = Trainer::create(o.manifestPath, *env, options);
  if (!trainer)
    return trainer.takeError();
  Trainer &t = **trainer;
  bool quiet = o.flags.quiet;
  if (!t.scheduleNote().empty() && t.jobRank() == 0 && !quiet)
    llvm::errs() << "note: " << t.scheduleNote() << "\n";
  if (o.flags.printSchedule) {
    t.printSchedule(llvm::outs());
    llvm::outs().flush();
  }
  std::vector<TrainingBatch> data;
  std::string digest;
  if (t.needsInputs() || t.needsTargets()) {
    auto loaded = loadTrainingData(o.dataPath, t.modelInputCount());
    if (!loaded)
      return loaded.takeError();
    data = std::move(*loaded);
    auto hash = sha256File(o.dataPath);
    if (!hash)
      return hash.takeError();
    digest = *hash;
  }
  if (llvm::Error err = t.checkSameData(digest))
    return err;
  if (!o.resumeDir.empty()) {
    auto from = t.resume(o.resumeDir);
    if (!from)
      return from.takeError();
    if (t.stepsDone() >= o.steps)
      return makeError(llvm::formatv("--resume: the checkpoint '{0}' is after "
                                     "step {1}; --steps {2} leaves no step to "
                                     "train",
                                     *from, t.stepsDone(), o.steps)
                           .str());
    if (t.rank() == 0 && !quiet)
      llvm::errs() << "resumed from " << *from << " (after step "
                   << t.stepsDone() << ")\n";
  }
  // Steps are numbered globally: a resumed run goes on after its
  // checkpoint's step; the meter counts this run's steps.
  const int resumed = t.stepsDone();
  // Every rank reads the whole evaluation set: all must agree on its
  // batches' count.
  std::vector<TrainingBatch> evalData;
  if (!o.evalData.empty()) {
    auto loaded = loadTrainingData(o.evalData, t.modelInputCount());
    if (!loaded)
      return loaded.takeError();
    evalData = std::move(*loaded);
    auto hash = sha256File(o.evalData);
    if (!hash)
      return hash.takeError();
    if (llvm::Error err = t.checkSameData(*hash))
      return err;
  }
  // The loss rank reports: the loss, the step's time, the rate and the
  // time left (RateMeter counts from the end of step 1, which infers
  // shapes). With replicas, replica 0's: the loss is the whole batch's.
  bool reports = t.rank() == t.lossRank() && t.replica() == 0;
  std::unique_ptr<StepLog> log;
  if (reports && !o.logFile.empty()) {
    auto opened = StepLog::open(o.logFile);
    if (!opened)
      return opened.takeError();
    log = std::move(*opened);
  }
  bool showLr = showsLearningRate(options);
  std::vector<StepRecord> records;
  ProgressClock::time_point start = ProgressClock::now();
  RateMeter meter(start);
  for (int s = resumed + 1; s <= o.steps; ++s) {
    TrainingBatch batch;
    if (!data.empty())
      batch = data[(s - 1) % data.size()];
    ProgressClock::time_point stepStart = ProgressClock::now();
    auto loss = t.step(batch.inputs, batch.target);
    if (!loss)
      return loss.takeError();
    ProgressClock::time_point stepEnd = ProgressClock::now();
    // Once step 1 has run, so that a failure stays one line.
    std::string note = s == resumed + 1 && t.jobRank() == 0
                           ? o.flags.microbatchesNote(t.stageCount())
                           : "";
    if (!note.empty())
      llvm::errs() << note << "\n";
    double seconds = std::chrono::duration<double>(stepEnd - stepStart).count();
    int64_t rows = samplesOf(batch.target);
    meter.record(s - resumed, rows, stepEnd);
    if (reports) {
      StepRecord record = t.lastStep();
      record.seconds = seconds;
      record.samples = rows;
      records.push_back(record);
      if (log)
        if (llvm::Error err = log->write(record))
          return err;
      llvm::outs() << "step " << s << " loss " << formatLoss(*loss)
                   << stepNumbers(record, showLr)
                   << (quiet ? ""
                             : stepTiming(seconds, meter, s - resumed,
                                          o.steps - resumed))
                   << "\n";
    }
    if (o.stats)
      llvm::outs() << t.stats().line()
                   << (t.replicas() > 1
                           ? " weights_sha=" + t.weightsSha256().substr(0, 16)
                           : "")
                   << "\n";
    if (!evalData.empty() &&
        ((o.evalEvery > 0 && s % o.evalEvery == 0) || s == o.steps)) {
      auto evalLoss = evaluateSet(t, evalData);
      if (!evalLoss)
        return evalLoss.takeError();
      if (reports) {
        llvm::outs() << "eval loss " << formatLoss(*evalLoss) << " at step "
                     << s << "\n";
        if (log)
          if (llvm::Error err = log->writeEval(s, *evalLoss))
            return err;
      }
    }
    llvm::outs().flush();
    // Replica 0 writes checkpoints; the other replicas wait for it.
    if (!o.checkpointDir.empty() &&
        ((o.checkpointEvery > 0 && s % o.checkpointEvery == 0) || s == o.steps))
      if (llvm::Error err = writeCheckpoint(t, o))
        return err;
  }
  if (!o.gradsDir.empty()) {
    std::string path = gradsPath(o.gradsDir, t.jobRank());
    if (llvm::Error err = t.saveGradients(path))
      return err;
    if (!quiet)
      llvm::errs() << "wrote " << path << " (the gradients of rank "
                   << t.jobRank() << ")\n";
  }
  if (!o.savePath.empty()) {
    if (llvm::Error err = t.save(o.savePath))
      return err;
    if (t.jobRank() == 0 && !quiet)
      llvm::errs() << "wrote " << o.savePath << " (" << t.stageCount()
                   << " trained stages and their manifest, after " << o.steps
                   << (o.steps == 1 ? " step)\n" : " steps)\n");
  }
  if (llvm::Error err = t.finish())
    return err;
  if (!o.flags.tracePath.empty() && t.jobRank() == 0 && !quiet)
    llvm::errs() << "wrote " << o.flags.tracePath << " (the trace of "
                 << o.steps << (o.steps == 1 ? " step)\n" : " steps)\n");
  if (reports && !o.flags.statsJsonPath.empty())
    if (llvm::Error err = writeJSONFileAtomically(
            o.flags.statsJsonPath, statsJSON(o, *env, records, meter)))
      return err;
  return 0;
}

Command addTrainCommand(CLI::App &parent) {
  auto o = std::make_shared<TrainCommandOptions>();
  CLI::App *app = parent.add_subcommand(
      "train", "Train a pipeline, one rank per process (start every rank "
               "with ppc launch or torchrun)");
  app->footer(
      "Trains the stages of MANIFEST on the ranks of a torchrun-style job, "
      "as ppc run runs them: stage k on rank k mod WORLD_SIZE (zbv and "
      "dualpipev: on a V, rank r running stages r and 2R-1-r; --schedule-csv: "
      "as the file's rows). Each step "
      "splits one batch of DATA into microbatches, runs the schedule's "
      "forwards and backwards, sums the gradients of tied parameters and "
      "updates each rank's parameters. The rank computing the loss prints "
      "'step N loss X (T s, R samples/s, L s left)' (the batch's mean loss "
      "before the update, the step's time, the rate since step 1 and the "
      "time left; the part in brackets goes under --quiet), with 'lr X' "
      "after the loss when the learning rate changes over the run and "
      "'grad_norm X' with --clip-grad-norm. DATA is "
      "written by torch.save: an (input, target) pair or a list of them, "
      "one per step, cycled (docs/training.md).");
  app->add_option("manifest", o->manifestPath,
                  "manifest.json written by ppc split (or ppc train --save)")
      ->required()
      ->check(pathOption());
  app->add_option("--data", o->dataPath,
                  "torch.save file: (input, target) or a list of such pairs; "
                  "a tuple input feeds a model with several inputs")
      ->required()
      ->check(pathOption());
  app->add_option("--loss", o->loss, "Loss over the chosen model output")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllLossKinds, lossName)));
  app->add_option("--loss-output", o->lossOutput,
                  "Which model output the loss reads (for models returning "
                  "a tuple)")
      ->capture_default_str()
      ->transform(intInRange(0));
  app->add_option("--optimizer", o->optimizer, "torch::optim optimizer")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllOptimizerKinds, optimizerName)));
  app->add_option("--lr", o->lr, "Learning rate (positive)")
      ->capture_default_str()
      ->transform(finiteAbove(0));
  app->add_option("--momentum", o->momentum, "SGD momentum")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
  app->add_option("--weight-decay", o->weightDecay,
                  "Weight decay (L2; decoupled for adamw); default 0, for "
                  "adamw 0.01 as torch.optim.AdamW")
      ->type_name("FLOAT")
      ->transform(finiteAtLeast(0));
  app->add_option("--steps", o->steps, "Optimizer steps")
      ->capture_default_str()
      ->transform(intInRange(1));
  o->flags.addTo(*app);
  app->add_option(
         "--schedule", o->schedule,
         "Pipeline schedule: " + scheduleChoicesHelp(/*inference=*/false) +
             ", or auto: the one with the shortest simulated step "
             "under the manifest's stage costs (measured with "
             "ppc split --cost profile), printed with the others' "
             "on rank 0")
      ->type_name("NAME")
      ->default_str("1f1b")
      ->check(scheduleValidator(/*inference=*/false, /*storeKind=*/false,
                                /*allowAuto=*/true));
  app->add_option("--max-activations", o->maxActivations,
                  "With --schedule auto: leave out schedules that hold more "
                  "microbatches' activations at once on a rank")
      ->type_name("N")
      ->transform(intInRange(1, 1 << 20));
  app->add_option("--schedule-csv", o->scheduleCSV,
                  "Run this schedule (PyTorch pipelining's compute_only or "
                  "compute_comms CSV, as ppc schedule --csv writes them) "
                  "instead of --schedule")
      ->check(pathOption());
  app->add_option("--save", o->savePath,
                  "Write the trained stages and a manifest to this directory "
                  "(ppc run, ppc train and ppc join read it)")
      ->check(pathOption());
  app->add_option("--save-grads", o->gradsDir,
                  "After the last step, each rank writes its parameters' "
                  "gradients to DIR/grads.rank<R>.pt (a dict by parameter "
                  "path that torch.load reads)")
      ->check(pathOption());
  app->add_flag("--stats", o->stats,
                "Print one 'stats: rank=R step=N ...' line per rank and step");
  // Checkpoints
  CLI::Option *checkpointDir =
      app->add_option("--checkpoint-dir", o->checkpointDir,
                      "Write a complete checkpoint (stages, manifest, "
                      "optimizer state, random generators) to "
                      "DIR/step-<8-digit step> after every "
                      "--checkpoint-every-th step and the last, atomically; "
                      "ppc join, ppc run and --resume read it")
          ->type_name("DIR")
          ->check(pathOption());
  app->add_option("--checkpoint-every", o->checkpointEvery,
                  "With --checkpoint-dir: also checkpoint after every K-th "
                  "step (0: only after the last)")
      ->type_name("K")
      ->capture_default_str()
      ->transform(intInRange(0))
      ->needs(checkpointDir);
  app->add_option("--keep", o->keep,
                  "With --checkpoint-dir: after each checkpoint, remove the "
                  "complete ones older than the N newest")
      ->type_name("N")
      ->capture_default_str()
      ->transform(intInRange(1))
      ->needs(checkpointDir);
  app->add_option("--resume", o->resumeDir,
                  "Continue from the newest complete checkpoint in DIR "
                  "(verified; a corrupt newest one is refused) with step "
                  "K+1 of --steps, as if never stopped; DIR may be "
                  "--checkpoint-dir")
      ->type_name("DIR")
      ->check(pathOption());
  // Clipping, LR schedules, step log
  app->add_option("--clip-grad-norm", o->clipGradNorm,
                  "Clip the gradients to this global L2 norm, as "
                  "torch.nn.utils.clip_grad_norm_ on the unsplit model "
                  "(0: off); the step lines show grad_norm")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
  app->add_option("--lr-schedule", o->lrSchedule,
                  "The learning rate over the steps, after any warm-up: "
                  "constant, linear or cosine (from --lr down to --min-lr "
                  "at --steps; docs/training.md)")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllLrScheduleKinds, lrScheduleName)));
  app->add_option("--warmup-steps", o->warmupSteps,
                  "Rise linearly to --lr over the first N steps "
                  "(lr * (s + 1) / N at 0-based step s)")
      ->capture_default_str()
      ->transform(intInRange(0));
  app->add_option("--min-lr", o->minLr,
                  "Where linear and cosine schedules end (at most --lr)")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
  app->add_option("--log-file", o->logFile,
                  "The loss rank writes one JSON object per step to FILE "
                  "(step, loss, lr, grad_norm, samples, seconds, "
                  "samples_per_second), flushed as each step ends")
      ->check(pathOption());
  app->add_option("--eval-data", o->evalData,
                  "A validation set in --data's format: after the last step "
                  "(and every --eval-every steps) the loss rank prints 'eval "
                  "loss X at step N', the rows-weighted mean loss over the "
                  "set with the stages in eval mode; every rank reads it")
      ->check(pathOption());
  app->add_option("--eval-every", o->evalEvery,
                  "Evaluate --eval-data every K steps too (0: after the last "
                  "step only)")
      ->capture_default_str()
      ->transform(intInRange(0));
  app->add_flag("--dry-run", o->dryRun,
                "Print the optimizer, clipping and every step's learning "
                "rate, checked, and exit without training (needs no launch)");
  // Data parallel
  app->add_option("--data-parallel", o->dataParallel,
                  "Run D replicas of the pipeline on the WORLD_SIZE ranks "
                  "(D must divide it): pipeline d is ranks d*R..d*R+R-1 "
                  "(R = WORLD_SIZE/D), each replica trains on its slice of "
                  "every batch, and each stage's gradients are summed over "
                  "its replicas before the update (docs/training.md)")
      ->type_name("D")
      ->capture_default_str()
      ->transform(intInRange(1, 65536));
  // bf16 and activation recompute
  app->add_option("--precision", o->precision,
                  "fp32, or bf16: the stages' forwards under autocast to "
                  "bfloat16 (fp32 weights, optimizer state and loss; bf16 "
                  "boundary tensors)")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllPrecisions, precisionName)));
  app->add_flag("--recompute", o->recompute,
                "Keep only each stage's inputs per microbatch in flight and "
                "recompute its forward for the backward (same gradients, "
                "less activation memory; --stats peak_bytes=)");
  app->add_option("--seed", o->seed,
                  "Seed rank R's random generators (dropout) with SEED + R; "
                  "default: nondeterministic, as LibTorch's");
  return {app, [o] { return runTrain(*o); }};
}

} // namespace ppc
