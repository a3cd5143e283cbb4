//===- tools/ppc/TrainLog.cpp - ppc train's plan and step log -------------===//
//
// This file implements --dry-run's plan, the numbers of a step line, the
// --log-file and the evaluation over a set (see TrainLog.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TrainLog.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"

#include "llvm/Support/FileSystem.h"

#include <cmath>
#include <cstdio>

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
  int64_t rows = 0;
  for (const TrainingBatch &batch : batches) {
    auto loss = trainer.evaluate(batch.inputs, batch.target);
    if (!loss)
      return loss.takeError();
    if (trainer.rank() == trainer.lossRank()) {
      sum += *loss * double(batch.target.size(0));
      rows += batch.target.size(0);
    }
  }
  return rows > 0 ? sum / double(rows) : std::nan("");
}

llvm::Expected<std::unique_ptr<StepLog>> StepLog::open(llvm::StringRef path) {
  std::error_code ec;
  auto os =
      std::make_unique<llvm::raw_fd_ostream>(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return makeError("cannot write '" + path + "': " + ec.message());
  return std::unique_ptr<StepLog>(new StepLog(path.str(), std::move(os)));
}

llvm::Error StepLog::write(const StepRecord &record) {
  llvm::json::Object line{{"step", record.step},
                          {"loss", record.loss},
                          {"lr", record.lr},
                          {"samples", record.samples},
                          {"seconds", record.seconds}};
  if (record.gradNorm)
    line["grad_norm"] = *record.gradNorm;
  if (record.seconds > 0)
    line["samples_per_second"] = double(record.samples) / record.seconds;
  return writeLine(std::move(line));
}

llvm::Error StepLog::writeEval(int step, double loss) {
  return writeLine(llvm::json::Object{{"step", step}, {"eval_loss", loss}});
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
