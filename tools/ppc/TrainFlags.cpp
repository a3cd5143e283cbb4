//===- tools/ppc/TrainFlags.cpp - ppc train's flags -----------------------===//
//
// This file implements addTrainFlags (TrainFlags.h): `ppc train`'s CLI11
// option table, one function per topic.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TrainFlags.h"

#include "runtime/exec/LossKind.h"
#include "runtime/exec/Precision.h"
#include "runtime/schedule/ScheduleKind.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/OptimizerKind.h"
#include "tools/ppc/OptionChecks.h"

#include "llvm/ADT/StringRef.h"

#include <vector>

namespace ppc {

namespace {
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

} // namespace

/// The manifest, the data and the loss.
static void addModelFlags(CLI::App &app, TrainCommandOptions &o) {
  app.add_option("manifest", o.manifestPath,
                 "manifest.json written by ppc split (or ppc train --save)")
      ->required()
      ->check(pathOption());
  app.add_option("--data", o.dataPath,
                 "torch.save file: (input, target) or a list of such pairs; "
                 "a tuple input feeds a model with several inputs")
      ->required()
      ->check(pathOption());
  app.add_option("--loss", o.loss,
                 "Loss over the chosen model output: mse; cross_entropy (class "
                 "scores in the last dimension when the target is the output's "
                 "shape without it, e.g. logits [B, T, V] and labels [B, T]); "
                 "causal_lm (transformers' language-model loss: labels "
                 "shifted by one, so position t predicts token t+1). Over "
                 "class indices the mean over every label of the batch that "
                 "is not --ignore-index")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllLossKinds, lossName)));
  app.add_option("--ignore-index", o.ignoreIndex,
                 "Label that counts for nothing in cross_entropy and "
                 "causal_lm (transformers' padding label)")
      ->capture_default_str();
  app.add_option("--loss-output", o.lossOutput,
                 "Which model output the loss reads (for models returning "
                 "a tuple)")
      ->capture_default_str()
      ->transform(intInRange(0));
}

/// --optimizer and its settings, --steps.
static void addOptimizerFlags(CLI::App &app, TrainCommandOptions &o) {
  app.add_option("--optimizer", o.optimizer, "torch::optim optimizer")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllOptimizerKinds, optimizerName)));
  app.add_option("--lr", o.lr, "Learning rate (positive)")
      ->capture_default_str()
      ->transform(finiteAbove(0));
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
  app.add_option("--weight-decay", o.weightDecay,
                 "Weight decay (L2; decoupled for adamw); default 0, for "
                 "adamw 0.01 as torch.optim.AdamW")
      ->type_name("FLOAT")
      ->transform(finiteAtLeast(0));
  app.add_option("--steps", o.steps, "Optimizer steps")
      ->capture_default_str()
      ->transform(intInRange(1));
}

/// The schedule: a name, auto, or a CSV.
static void addScheduleFlags(CLI::App &app, TrainCommandOptions &o) {
  app.add_option(
         "--schedule", o.schedule,
         "Pipeline schedule: " + scheduleChoicesHelp(/*inference=*/false) +
             ", or auto: the one with the shortest simulated step "
             "under the manifest's stage costs (measured with "
             "ppc split --cost profile), printed with the others' "
             "on rank 0")
      ->type_name("NAME")
      ->default_str("1f1b")
      ->check(scheduleValidator(/*inference=*/false, /*storeKind=*/false,
                                /*allowAuto=*/true));
  app.add_option("--max-activations", o.maxActivations,
                 "With --schedule auto: leave out schedules that hold more "
                 "microbatches' activations at once on a rank")
      ->type_name("N")
      ->transform(intInRange(1, 1 << 20));
  app.add_option("--schedule-csv", o.scheduleCSVPath,
                 "Run this schedule (PyTorch pipelining's compute_only or "
                 "compute_comms CSV, as ppc schedule --csv writes them) "
                 "instead of --schedule")
      ->check(pathOption());
}

/// What a run writes after its last step, and --stats.
static void addOutputFlags(CLI::App &app, TrainCommandOptions &o) {
  app.add_option("--save", o.savePath,
                 "Write the trained stages and a manifest to this directory "
                 "(ppc run, ppc train and ppc join read it)")
      ->check(pathOption());
  app.add_option("--save-grads", o.gradsDir,
                 "After the last step, each rank writes its parameters' "
                 "gradients to DIR/grads.rank<R>.pt (a dict by parameter "
                 "path that torch.load reads)")
      ->check(pathOption());
  app.add_flag("--stats", o.stats,
               "Print one 'stats: rank=R step=N ...' line per rank and step");
}

/// Checkpoints and resuming.
static void addCheckpointFlags(CLI::App &app, TrainCommandOptions &o) {
  CLI::Option *checkpointDir =
      app.add_option("--checkpoint-dir", o.checkpointDir,
                     "Write a complete checkpoint (stages, manifest, "
                     "optimizer state, random generators) to "
                     "DIR/step-<8-digit step> after every "
                     "--checkpoint-every-th step and the last, atomically; "
                     "ppc join, ppc run and --resume read it")
          ->type_name("DIR")
          ->check(pathOption());
  app.add_option("--checkpoint-every", o.checkpointEvery,
                 "With --checkpoint-dir: also checkpoint after every K-th "
                 "step (0: only after the last)")
      ->type_name("K")
      ->capture_default_str()
      ->transform(intInRange(0))
      ->needs(checkpointDir);
  app.add_option("--keep", o.keep,
                 "With --checkpoint-dir: after each checkpoint, remove the "
                 "complete ones older than the N newest")
      ->type_name("N")
      ->capture_default_str()
      ->transform(intInRange(1))
      ->needs(checkpointDir);
  app.add_option("--resume", o.resumeDir,
                 "Continue from the newest complete checkpoint in DIR "
                 "(verified; a corrupt newest one is refused) with step "
                 "K+1 of --steps, as if never stopped; DIR may be "
                 "--checkpoint-dir")
      ->type_name("DIR")
      ->check(pathOption());
}

/// Clipping and the learning rate over the steps.
static void addLrScheduleFlags(CLI::App &app, TrainCommandOptions &o) {
  app.add_option("--clip-grad-norm", o.clipGradNorm,
                 "Clip the gradients to this global L2 norm, as "
                 "torch.nn.utils.clip_grad_norm_ on the unsplit model "
                 "(0: off); the step lines show grad_norm")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
  app.add_option("--lr-schedule", o.lrSchedule,
                 "The learning rate over the steps, after any warm-up: "
                 "constant, linear or cosine (from --lr down to --min-lr "
                 "at --steps; docs/training.md)")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllLrScheduleKinds, lrScheduleName)));
  app.add_option("--warmup-steps", o.warmupSteps,
                 "Rise linearly to --lr over the first N steps "
                 "(lr * (s + 1) / N at 0-based step s)")
      ->capture_default_str()
      ->transform(intInRange(0));
  app.add_option("--min-lr", o.minLr,
                 "Where linear and cosine schedules end (at most --lr)")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
}

/// The step log, evaluation and --dry-run.
static void addStepLogFlags(CLI::App &app, TrainCommandOptions &o) {
  app.add_option("--log-file", o.logFile,
                 "The loss rank writes one JSON object per step to FILE "
                 "(step, loss, lr, grad_norm, samples, seconds, "
                 "samples_per_second), and one per evaluation (step, "
                 "eval_loss, seconds), flushed as each ends")
      ->check(pathOption());
  app.add_option("--eval-data", o.evalData,
                 "A validation set in --data's format: after the last step "
                 "(and every --eval-every steps) the loss rank prints 'eval "
                 "loss X at step N', the rows-weighted mean loss over the "
                 "set with the stages in eval mode; every rank reads it")
      ->check(pathOption());
  app.add_option("--eval-every", o.evalEvery,
                 "Evaluate --eval-data every K steps too (0: after the last "
                 "step only)")
      ->capture_default_str()
      ->transform(intInRange(0));
  app.add_flag("--dry-run", o.dryRun,
               "Print the optimizer, clipping and every step's learning "
               "rate, checked, and exit without training (needs no launch)");
}

/// Data parallelism, precision, recompute and the seed.
static void addParallelFlags(CLI::App &app, TrainCommandOptions &o) {
  app.add_option("--data-parallel", o.dataParallel,
                 "Run D replicas of the pipeline on the WORLD_SIZE ranks "
                 "(D must divide it): pipeline d is ranks d*R..d*R+R-1 "
                 "(R = WORLD_SIZE/D), each replica trains on its slice of "
                 "every batch, and each stage's gradients are summed over "
                 "its replicas before the update (docs/training.md)")
      ->type_name("D")
      ->capture_default_str()
      ->transform(intInRange(1, 65536));
  app.add_option("--precision", o.precision,
                 "fp32, or bf16: the stages' forwards under autocast to "
                 "bfloat16 (fp32 weights, optimizer state and loss; bf16 "
                 "boundary tensors)")
      ->capture_default_str()
      ->check(CLI::IsMember(names(kAllPrecisions, precisionName)));
  app.add_flag("--recompute", o.recompute,
               "Keep only each stage's inputs per microbatch in flight and "
               "recompute its forward for the backward (same gradients, "
               "less activation memory; --stats peak_bytes=)");
  app.add_option("--seed", o.seed,
                 "Seed rank R's random generators (dropout) with SEED + R; "
                 "default: nondeterministic, as LibTorch's")
      ->transform(seedOption());
}

void addTrainFlags(CLI::App &app, TrainCommandOptions &o) {
  addModelFlags(app, o);
  addOptimizerFlags(app, o);
  o.flags.addTo(app);
  addScheduleFlags(app, o);
  addOutputFlags(app, o);
  addCheckpointFlags(app, o);
  addLrScheduleFlags(app, o);
  addStepLogFlags(app, o);
  addParallelFlags(app, o);
}

} // namespace ppc
