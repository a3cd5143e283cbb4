//===- tools/ppc/TrainLog.cpp - ppc train's plan and step log -------------===//
//
// This file implements --dry-run's plan, the numbers of a step line, the
// --log-file and the evaluation over a set (see TrainLog.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TrainLog.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/NumberRules.h"
#include "runtime/link/Link.h"

#include "llvm/Support/FileSystem.h"

#include <cmath>
#include <cstdio>
#include <set>

namespace ppc {

void printTrainPlan(llvm::raw_ostream &os, const TrainOptions &options) {
  os << "optimizer " << optimizerName(options.optimizer) << " lr "
     << formatNumber(options.lr);
  if (options.optimizer == OptimizerKind::SGD)
    os << " momentum " << formatNumber(options.momentum);
  os << " weight_decay " << formatNumber(options.weightDecay) << "\n";
  const LrSchedule &schedule = options.lrSchedule;
  os << "lr_schedule " << lrScheduleName(schedule.kind) << " warmup_steps "
     << schedule.warmupSteps << " min_lr " << formatNumber(schedule.minLr)
     << " steps " << schedule.steps << "\n";
  os << "clip_grad_norm "
     << (options.clipGradNorm > 0 ? formatNumber(options.clipGradNorm) : "off")
     << "\n";
  for (int s = 0; s < schedule.steps; ++s)
    os << "step " << s + 1 << " lr " << formatNumber(schedule.at(options.lr, s))
       << "\n";
}

bool showsLearningRate(const TrainOptions &options) {
  return options.lrSchedule.kind != LrScheduleKind::Constant ||
         options.lrSchedule.warmupSteps > 0;
}

/// "%.9g": a float32 number printed exactly enough to compare.
static std::string formatFloat(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", x);
  return text;
}

std::string stepNumbers(const StepRecord &record, bool showLr) {
  std::string out;
  if (showLr)
    out += " lr " + formatNumber(record.lr);
  if (record.gradNorm)
    out += " grad_norm " + formatFloat(*record.gradNorm);
  return out;
}

llvm::Expected<double> evaluateSet(Trainer &trainer,
                                   const std::vector<TrainingBatch> &batches) {
  double sum = 0;
  int64_t terms = 0;
  for (const TrainingBatch &batch : batches) {
    auto loss = trainer.evaluate(batch.inputs, batch.target);
    if (!loss)
      return loss.takeError();
    if (trainer.rank() == trainer.lossRank()) {
      // Weighted by rows, or by tokens for a token loss (runtime/exec/Loss.h).
      int64_t n = trainer.lossTerms(batch.target);
      sum += *loss * double(n);
      terms += n;
    }
  }
  return terms > 0 ? sum / double(terms) : std::nan("");
}

/// What a batch's fit to the model depends on: each input's and the
/// target's dtype and shape ("float32[8, 4]"), or an input's type.
static std::string signatureOf(const TrainingBatch &batch) {
  std::string out;
  auto add = [&](const c10::IValue &value) {
    if (value.isTensor()) {
      const at::Tensor &t = value.toTensor();
      out += std::string(c10::toString(t.scalar_type())) + c10::str(t.sizes()) +
             ";";
    } else {
      out += value.tagKind() + ";";
    }
  };
  for (const c10::IValue &input : batch.inputs)
    add(input);
  add(batch.target.defined() ? c10::IValue(batch.target) : c10::IValue());
  return out;
}

llvm::Error checkEvalData(Trainer &trainer,
                          const std::vector<TrainingBatch> &batches,
                          llvm::StringRef path) {
  std::set<std::string> seen;
  for (size_t i = 0; i < batches.size(); ++i) {
    if (!seen.insert(signatureOf(batches[i])).second)
      continue;
    auto loss = trainer.evaluate(batches[i].inputs, batches[i].target);
    if (!loss) {
      llvm::Error err = loss.takeError();
      // A lost rank stays one: the launcher looks for the rank that failed.
      if (err.isA<LostRankError>())
        return err;
      return makeError(
          "--eval-data '" + path + "' batch " + std::to_string(i) +
          " does not fit the model: " + llvm::toString(std::move(err)));
    }
  }
  return llvm::Error::success();
}

llvm::Error checkEvalLoss(int step, double loss) {
  if (std::isfinite(loss))
    return llvm::Error::success();
  return makeError("step " + std::to_string(step) +
                   ": the evaluation loss is " + formatNumber(loss));
}

llvm::Expected<std::unique_ptr<StepLog>> StepLog::open(llvm::StringRef path) {
  // Not a FIFO or a device: opening a FIFO would wait for a reader.
  if (llvm::Error err = checkOutputFile(path))
    return err;
  std::error_code ec;
  auto os =
      std::make_unique<llvm::raw_fd_ostream>(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return makeError("cannot write '" + path + "': " + ec.message());
  return std::unique_ptr<StepLog>(new StepLog(path.str(), std::move(os)));
}

/// `x` as JSON: a number, or null when it is not finite (JSON has no NaN
/// or infinity; llvm::json would print "nan", which no reader accepts).
static llvm::json::Value jsonNumber(double x) {
  if (std::isfinite(x))
    return x;
  return nullptr;
}

llvm::Error StepLog::write(const StepRecord &record) {
  llvm::json::Object line{{"step", record.step},
                          {"loss", jsonNumber(record.loss)},
                          {"lr", jsonNumber(record.lr)},
                          {"samples", record.samples},
                          {"seconds", jsonNumber(record.seconds)}};
  if (record.gradNorm)
    line["grad_norm"] = jsonNumber(*record.gradNorm);
  if (record.seconds > 0)
    line["samples_per_second"] =
        jsonNumber(double(record.samples) / record.seconds);
  return writeLine(std::move(line));
}

llvm::Error StepLog::writeEval(int step, double loss, double seconds) {
  return writeLine(llvm::json::Object{
      {"step", step}, {"eval_loss", jsonNumber(loss)}, {"seconds", seconds}});
}

llvm::Error StepLog::writeLine(llvm::json::Object line) {
  *os_ << llvm::json::Value(std::move(line)) << "\n";
  os_->flush();
  if (os_->has_error()) {
    std::string reason = os_->error().message();
    os_->clear_error();
    return makeError("cannot write '" + path_ + "': " + reason);
  }
  return llvm::Error::success();
}

} // namespace ppc
