//===- tools/ppc/TrainCommand.cpp - ppc train -----------------------------===//
//
// `ppc train`: one rank of a pipeline training job, started by ppc launch
// or torchrun like `ppc run`, as a short list of steps (options, output
// checks, the trainer, the data, the steps, the outputs). The flags are
// TrainFlags.h's; the work is Trainer (runtime/train/Trainer.h) and
// loadTrainingData (runtime/train/TrainData.h).
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
#include "tools/ppc/OutputClaims.h"
#include "tools/ppc/Progress.h"
#include "tools/ppc/RankProcess.h"
#include "tools/ppc/RuntimeFlags.h"
#include "tools/ppc/TrainFlags.h"
#include "tools/ppc/TrainLog.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>

namespace ppc {

namespace {
/// Where rank `rank` writes its gradients under --save-grads DIR.
std::string gradsPath(llvm::StringRef dir, int rank) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "grads.rank" + std::to_string(rank) + ".pt");
  return std::string(path);
}

/// Refuses, before any work, outputs that would replace what training
/// reads or keeps (OutputGuard): the manifest and its files, the data, the
/// schedule CSV, meta caches, each other; a --save directory that holds
/// anything but an earlier ppc output (as ppc split -o); a --save-grads
/// directory that does not exist; any output on or inside the checkpoints
/// the run reads (--resume, or the one its manifest is in).
llvm::Error checkOutputPaths(const TrainCommandOptions &o,
                             const RunOptions &run, int rank) {
  OutputGuard guard;
  keepManifestFiles(guard, o.manifestPath, metaCacheDirOf(run, o.manifestPath));
  guard.keep(o.dataPath, "the --data file");
  guard.keep(o.scheduleCSVPath, "the --schedule-csv file");
  guard.keep(o.evalData, "the --eval-data file");
  if (!o.gradsDir.empty() && !llvm::sys::fs::is_directory(o.gradsDir))
    return makeError("--save-grads '" + o.gradsDir +
                     "' is not an existing directory");
  OutputClaim checkpoints{"--checkpoint-dir", o.checkpointDir,
                          OutputClaim::Kind::Directory};
  checkpoints.intoCheckpoints = true;
  if (llvm::Error err = claimOutputs(
          guard,
          {{o.resumeDir, "--resume"}, {o.manifestPath, "the checkpoint"}},
          {{"--save", o.savePath, OutputClaim::Kind::ReplacedDirectory},
           {"--save-grads",
            o.gradsDir.empty() ? "" : gradsPath(o.gradsDir, rank)},
           checkpoints,
           {"--trace", o.flags.tracePath},
           {"--log-file", o.logFile},
           {"--stats-json", o.flags.statsJsonPath}}))
    return err;
  if (o.checkpointDir.empty())
    return llvm::Error::success();
  return checkCheckpointDirectory(o.checkpointDir, "--checkpoint-dir");
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
/// loss: the step's time and its own rate (`rows` over `seconds`; none
/// without rows), then the time left once the meter has a steady rate
/// (which counts checkpoints and evaluations too).
std::string stepTiming(double seconds, int64_t rows, const RateMeter &meter,
                       int64_t step, int64_t steps) {
  std::string out = " (" + formatSeconds(seconds);
  if (rows >= 0 && seconds > 0)
    out += ", " + formatRate(static_cast<double>(rows) / seconds, "samples");
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

/// "%.9g": every float32 loss printed exactly enough to compare; any NaN
/// as "nan" (printf may say "-nan").
std::string formatLoss(double loss) {
  if (std::isnan(loss))
    return "nan";
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

/// A test hook (TrainOptions::beforeCheckpointReport): with
/// PPC_TEST_CHECKPOINT_PAUSE="STEP:RANK", rank RANK sleeps (up to 10
/// minutes) once its files of checkpoint STEP are written and before it
/// reports them, so that a test can kill it mid-checkpoint
/// (tests/cli/test_checkpoint.py). Empty otherwise.
static std::function<void(int64_t)> checkpointTestPause(int rank) {
  const char *spec = std::getenv("PPC_TEST_CHECKPOINT_PAUSE");
  if (!spec)
    return nullptr;
  auto [s, r] = llvm::StringRef(spec).split(':');
  int wantStep = 0, wantRank = 0;
  if (s.getAsInteger(10, wantStep) || r.getAsInteger(10, wantRank) ||
      wantRank != rank)
    return nullptr;
  return [wantStep](int64_t step) {
    if (step == wantStep)
      std::this_thread::sleep_for(std::chrono::minutes(10));
  };
}

/// What every rank must have alike that only `ppc train` sees (the
/// trainer and the runtime record the rest: runtime/link/Agreement.h).
/// The data files' digests come first; outputs of one rank's own
/// (--log-file, --stats-json, --trace, --save-grads) and --keep (rank 0
/// prunes) need not agree.
static void recordTrainFlags(const TrainCommandOptions &o, Agreement &record) {
  auto given = [](const std::string &path) {
    return path.empty() ? std::nullopt : std::optional(path);
  };
  record.setFileDigest("--data", o.dataPath);
  record.setFileDigest("--eval-data", o.evalData);
  record.set("--steps", std::to_string(o.steps));
  record.set("--eval-every", std::to_string(o.evalEvery));
  record.setPresence("--checkpoint-dir", given(o.checkpointDir));
  record.set("--checkpoint-every", std::to_string(o.checkpointEvery));
  record.setPresence("--resume", given(o.resumeDir));
  record.setPresence("--save", given(o.savePath));
}

/// The trainer's options of `o` on rank `rank`. Errors: flags that need
/// another.
static llvm::Expected<TrainOptions> trainOptionsOf(const TrainCommandOptions &o,
                                                   int rank) {
  TrainOptions options;
  if (llvm::Error err = o.flags.applyTo(options.run))
    return err;
  options.autoSchedule = o.schedule == "auto";
  if (!options.autoSchedule)
    options.run.schedule = *parseScheduleName(o.schedule); // validated
  if (o.maxActivations && !options.autoSchedule)
    return makeError("--max-activations applies to --schedule auto");
  options.loss = *parseLossName(o.loss);
  applyOptimizerFlags(o, options);
  if (o.evalEvery > 0 && o.evalData.empty())
    return makeError("--eval-every needs --eval-data");
  options.run.precision = *parsePrecision(o.precision); // validated
  // The flags of the same name and type.
#define PPC_TRAIN_OPTION(NAME)                                                 \
  static_assert(std::is_same_v<decltype(options.NAME), decltype(o.NAME)>);     \
  options.NAME = o.NAME;
#include "runtime/train/TrainOptions.def"
  options.beforeCheckpointReport = checkpointTestPause(rank);
  recordTrainFlags(o, options.run.agreement);
  return options;
}

/// Trainer::create, and what it says first: the schedule it picked
/// (--schedule auto), this rank's schedule (--print-schedule).
static llvm::Expected<std::unique_ptr<Trainer>>
createTrainer(const TrainCommandOptions &o, const LaunchEnv &env,
              const TrainOptions &options) {
  auto trainer = Trainer::create(o.manifestPath, env, options);
  if (!trainer)
    return trainer.takeError();
  Trainer &t = **trainer;
  if (!t.scheduleNote().empty() && t.jobRank() == 0 && !o.flags.quiet)
    llvm::errs() << "note: " << terminalText(t.scheduleNote()) << "\n";
  if (o.flags.printSchedule) {
    t.printSchedule(llvm::outs());
    llvm::outs().flush();
  }
  return trainer;
}

/// --data on the ranks that read it. Every rank's file has the same contents:
/// the start-up agreement compared their digests (runtime/link/Agreement.h).
static llvm::Expected<std::vector<TrainingBatch>>
loadData(Trainer &t, const TrainCommandOptions &o) {
  if (!t.needsInputs() && !t.needsTargets())
    return std::vector<TrainingBatch>();
  return loadTrainingData(o.dataPath, t.modelInputCount(), t.modelInputNames());
}

/// --eval-data: every rank reads the whole evaluation set, so that all
/// agree on its batches' count.
static llvm::Expected<std::vector<TrainingBatch>>
loadEvalData(Trainer &t, const TrainCommandOptions &o) {
  if (o.evalData.empty())
    return std::vector<TrainingBatch>();
  return loadTrainingData(o.evalData, t.modelInputCount(), t.modelInputNames());
}

/// --resume: continues from the checkpoint, if it leaves steps to train.
static llvm::Error resumeIfAsked(Trainer &t, const TrainCommandOptions &o) {
  if (o.resumeDir.empty())
    return llvm::Error::success();
  auto from = t.resume(o.resumeDir);
  if (!from)
    return from.takeError();
  if (t.stepsDone() >= o.steps)
    return makeError(llvm::formatv("--resume: the checkpoint '{0}' is after "
                                   "step {1}; --steps {2} leaves no step to "
                                   "train",
                                   *from, t.stepsDone(), o.steps)
                         .str());
  if (t.rank() == 0 && !o.flags.quiet)
    llvm::errs() << "resumed from " << *from << " (after step " << t.stepsDone()
                 << ")\n";
  return llvm::Error::success();
}

namespace {
/// The steps of one rank's run, from the first after any resumed
/// checkpoint to --steps, and what they report.
class StepLoop {
public:
  StepLoop(Trainer &t, const TrainCommandOptions &o, const TrainOptions &opts,
           std::vector<TrainingBatch> data, std::vector<TrainingBatch> evalData)
      : t_(t), o_(o), data_(std::move(data)), evalData_(std::move(evalData)),
        // Steps are numbered globally: a resumed run goes on after its
        // checkpoint's step; the meter counts this run's steps.
        resumed_(t.stepsDone()),
        // The loss rank reports: the loss, the step's time, the rate and
        // the time left (RateMeter counts from the end of step 1, which
        // infers shapes). With replicas, replica 0's: the loss is the
        // whole batch's.
        reports_(t.rank() == t.lossRank() && t.replica() == 0),
        showLr_(showsLearningRate(opts)), meter_(ProgressClock::now()) {}

  /// Opens --log-file on the reporting rank.
  llvm::Error openLog();
  llvm::Error run();
  /// The reported steps and their meter, for --stats-json.
  bool reports() const { return reports_; }
  const std::vector<StepRecord> &records() const { return records_; }
  const RateMeter &meter() const { return meter_; }

private:
  llvm::Error step(int s);
  /// The step line of the loss rank (and its --log-file record).
  llvm::Error report(int s, double loss, double seconds, int64_t rows);
  /// --eval-data every --eval-every steps and after the last.
  llvm::Error evaluateIfDue(int s);

  Trainer &t_;
  const TrainCommandOptions &o_;
  std::vector<TrainingBatch> data_, evalData_;
  const int resumed_;
  const bool reports_, showLr_;
  std::unique_ptr<StepLog> log_;
  std::vector<StepRecord> records_;
  RateMeter meter_;
};
} // namespace

llvm::Error StepLoop::openLog() {
  if (!reports_ || o_.logFile.empty())
    return llvm::Error::success();
  auto opened = StepLog::open(o_.logFile);
  if (!opened)
    return opened.takeError();
  log_ = std::move(*opened);
  return llvm::Error::success();
}

llvm::Error StepLoop::run() {
  meter_ = RateMeter(ProgressClock::now());
  // (int64_t: --steps may be INT_MAX, and s must pass it without overflowing.)
  for (int64_t s = resumed_ + 1; s <= o_.steps; ++s)
    if (llvm::Error err = step(static_cast<int>(s)))
      return err;
  return llvm::Error::success();
}

llvm::Error StepLoop::step(int s) {
  TrainingBatch batch;
  if (!data_.empty())
    batch = data_[(s - 1) % data_.size()];
  ProgressClock::time_point stepStart = ProgressClock::now();
  auto loss = t_.step(batch.inputs, batch.target);
  if (!loss)
    return loss.takeError();
  ProgressClock::time_point stepEnd = ProgressClock::now();
  // Once step 1 has run, so that a failure stays one line.
  std::string note = s == resumed_ + 1 && t_.jobRank() == 0
                         ? o_.flags.microbatchesNote(t_.stageCount())
                         : "";
  if (!note.empty())
    llvm::errs() << note << "\n";
  double seconds = std::chrono::duration<double>(stepEnd - stepStart).count();
  int64_t rows = samplesOf(batch.target);
  meter_.record(s - resumed_, rows, stepEnd);
  if (reports_)
    if (llvm::Error err = report(s, *loss, seconds, rows))
      return err;
  if (o_.stats)
    llvm::outs() << t_.stats().line()
                 << (t_.replicas() > 1
                         ? " weights_sha=" + t_.weightsSha256().substr(0, 16)
                         : "")
                 << "\n";
  if (llvm::Error err = evaluateIfDue(s))
    return err;
  llvm::outs().flush();
  // Replica 0 writes checkpoints; the other replicas wait for it.
  if (!o_.checkpointDir.empty() &&
      ((o_.checkpointEvery > 0 && s % o_.checkpointEvery == 0) ||
       s == o_.steps))
    return writeCheckpoint(t_, o_);
  return llvm::Error::success();
}

llvm::Error StepLoop::report(int s, double loss, double seconds, int64_t rows) {
  StepRecord record = t_.lastStep();
  record.seconds = seconds;
  record.samples = rows;
  records_.push_back(record);
  if (log_)
    if (llvm::Error err = log_->write(record))
      return err;
  llvm::outs() << "step " << s << " loss " << formatLoss(loss)
               << stepNumbers(record, showLr_)
               << (o_.flags.quiet
                       ? ""
                       : stepTiming(seconds, rows, meter_, s - resumed_,
                                    o_.steps - resumed_))
               << "\n";
  return llvm::Error::success();
}

llvm::Error StepLoop::evaluateIfDue(int s) {
  if (evalData_.empty() ||
      !((o_.evalEvery > 0 && s % o_.evalEvery == 0) || s == o_.steps))
    return llvm::Error::success();
  auto evalStart = ProgressClock::now();
  auto evalLoss = evaluateSet(t_, evalData_);
  if (!evalLoss)
    return evalLoss.takeError();
  double seconds =
      std::chrono::duration<double>(ProgressClock::now() - evalStart).count();
  if (!reports_)
    return llvm::Error::success();
  llvm::outs() << "eval loss " << formatLoss(*evalLoss) << " at step " << s
               << "\n";
  if (log_)
    if (llvm::Error err = log_->writeEval(s, *evalLoss, seconds))
      return err;
  return checkEvalLoss(s, *evalLoss);
}

/// After the last step: --save-grads and --save, each said on stderr.
static llvm::Error writeOutputs(Trainer &t, const TrainCommandOptions &o) {
  bool quiet = o.flags.quiet;
  if (!o.gradsDir.empty()) {
    std::string path = gradsPath(o.gradsDir, t.jobRank());
    if (llvm::Error err = t.saveGradients(path))
      return err;
    if (!quiet)
      llvm::errs() << "wrote " << path << " (the gradients of rank "
                   << t.jobRank() << ")\n";
  }
  if (o.savePath.empty())
    return llvm::Error::success();
  if (llvm::Error err = t.save(o.savePath))
    return err;
  if (t.jobRank() == 0 && !quiet)
    llvm::errs() << "wrote " << o.savePath << " (" << t.stageCount()
                 << " trained stages and their manifest, after " << o.steps
                 << (o.steps == 1 ? " step)\n" : " steps)\n");
  return llvm::Error::success();
}

/// Waits for every rank, then --trace's note and --stats-json.
static llvm::Error finishRun(Trainer &t, const TrainCommandOptions &o,
                             const LaunchEnv &env, const StepLoop &loop) {
  if (llvm::Error err = t.finish())
    return err;
  if (!o.flags.tracePath.empty() && t.jobRank() == 0 && !o.flags.quiet)
    llvm::errs() << "wrote " << o.flags.tracePath << " (the trace of "
                 << o.steps << (o.steps == 1 ? " step)\n" : " steps)\n");
  if (loop.reports() && !o.flags.statsJsonPath.empty())
    return writeJSONFileAtomically(
        o.flags.statsJsonPath, statsJSON(o, env, loop.records(), loop.meter()));
  return llvm::Error::success();
}

/// Trains on the data after the trainer is created: the data, any resume,
/// the steps, the outputs.
static llvm::Error train(Trainer &t, const TrainCommandOptions &o,
                         const LaunchEnv &env, const TrainOptions &options) {
  auto data = loadData(t, o);
  if (!data)
    return data.takeError();
  if (llvm::Error err = resumeIfAsked(t, o))
    return err;
  auto evalData = loadEvalData(t, o);
  if (!evalData)
    return evalData.takeError();
  if (llvm::Error err = checkEvalData(t, *evalData, o.evalData))
    return err;
  StepLoop loop(t, o, options, std::move(*data), std::move(*evalData));
  if (llvm::Error err = loop.openLog())
    return err;
  if (llvm::Error err = loop.run())
    return err;
  if (llvm::Error err = writeOutputs(t, o))
    return err;
  return finishRun(t, o, env, loop);
}

static llvm::Expected<int> runTrain(const TrainCommandOptions &o) {
  if (o.dryRun)
    return printPlan(o);
  auto env = startRank();
  if (!env)
    return env.takeError();
  auto options = trainOptionsOf(o, env->rank);
  if (!options)
    return options.takeError();
  // bf16 and activation recompute: the meter counts every step's
  // peak host bytes (its cost is two atomic operations per allocation).
  MemoryMeter::install();
  if (llvm::Error err = checkOutputPaths(o, options->run, env->rank))
    return err;
  auto trainer = createTrainer(o, *env, *options);
  if (!trainer)
    return trainer.takeError();
  if (llvm::Error err = train(**trainer, o, *env, *options))
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
  addTrainFlags(*app, *o);
  return {app, [o] { return runTrain(*o); }};
}

} // namespace ppc
