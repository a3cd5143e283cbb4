//===- tools/ppc/TrainLog.h - ppc train's plan and step log -----*- C++ -*-===//
//
// What `ppc train` says about the optimization of a run beyond the loss:
// the plan --dry-run prints (docs/training.md), the learning rate and
// gradient norm after each step's loss, the --log-file of JSON lines, and
// the loss over an --eval-data set (and the set's check before step 1).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_TRAINLOG_H
#define PPC_TOOLS_PPC_TRAINLOG_H

#include "runtime/train/TrainData.h"
#include "runtime/train/Trainer.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace ppc {

/// --dry-run's plan of `options` (checked already) over its schedule's
/// steps: "optimizer adamw lr 0.001 weight_decay 0.01", "lr_schedule cosine
/// warmup_steps 2 min_lr 0 steps 20", "clip_grad_norm 1" (or "off"), then
/// "step N lr X" for every step, each number as formatNumber() prints it
/// (it reads back exactly).
void printTrainPlan(llvm::raw_ostream &os, const TrainOptions &options);

/// Whether the step lines show the learning rate: when it changes over
/// the run (a decaying schedule or a warm-up).
bool showsLearningRate(const TrainOptions &options);

/// " lr 0.001 grad_norm 2.31": the part of a step line after its loss,
/// lr as showsLearningRate() says, grad_norm with clipping ("%.9g").
std::string stepNumbers(const StepRecord &record, bool showLr);

/// The loss over every batch of `batches` (Trainer::evaluate), the mean
/// of the batches' losses weighted by their rows (their labels that count,
/// for a token loss: Trainer::lossTerms): the mean loss over the whole set.
/// Every rank must call it with the same batches (each rank reads the whole
/// --eval-data, so that all agree on its length); NaN but on the loss rank.
/// Errors: Trainer::evaluate's.
llvm::Expected<double> evaluateSet(Trainer &trainer,
                                   const std::vector<TrainingBatch> &batches);

/// Checks, before step 1, that the evaluation set `batches` (read from
/// `path`, --eval-data) fits the model, so that a misfit ends the run
/// before any training rather than after the last step: Trainer::evaluate
/// runs the first batch of each kind (the inputs' and target's dtypes and
/// shapes) as the evaluations after steps will, leaving the model as it
/// was. Every rank must call it with the same batches. Errors:
/// "--eval-data 'ev.pt' batch 0 does not fit the model: REASON" on the
/// rank that found it (REASON: Trainer::evaluate's); LostRankError on the
/// others.
llvm::Error checkEvalData(Trainer &trainer,
                          const std::vector<TrainingBatch> &batches,
                          llvm::StringRef path);

/// Success when the evaluation loss `loss` after step `step` is finite, on
/// the rank that computes it, as Trainer::step() refuses a non-finite
/// training loss. Errors: "step 4: the evaluation loss is nan".
llvm::Error checkEvalLoss(int step, double loss);

/// The --log-file: one JSON object per line, written and flushed as each
/// step ends, so that a run in progress can be followed and plotted. Every
/// line is JSON (json.loads reads it): a number that is not finite (a NaN
/// or infinite evaluation loss, gradient norm) is written as null.
class StepLog {
public:
  /// Creates (truncates) `path`. Errors: "cannot write 'PATH': it exists
  /// and is not a regular file" (a FIFO, a device: checkOutputFile()),
  /// "cannot write 'PATH': REASON".
  static llvm::Expected<std::unique_ptr<StepLog>> open(llvm::StringRef path);

  /// {"step": N, "loss": X, "lr": X, "grad_norm": X (with clipping),
  /// "samples": N, "seconds": X, "samples_per_second": X}. Errors: the
  /// write failed.
  llvm::Error write(const StepRecord &record);
  /// {"eval_loss": X, "step": N, "seconds": S}: the evaluation after step
  /// N, which took S seconds on this rank. Errors: as write().
  llvm::Error writeEval(int step, double loss, double seconds);

private:
  llvm::Error writeLine(llvm::json::Object line);
  StepLog(std::string path, std::unique_ptr<llvm::raw_fd_ostream> os)
      : path_(std::move(path)), os_(std::move(os)) {}
  std::string path_;
  std::unique_ptr<llvm::raw_fd_ostream> os_;
};

} // namespace ppc

#endif // PPC_TOOLS_PPC_TRAINLOG_H
