//===- runtime/train/LrSchedule.cpp - Learning-rate schedules -------------===//
//
// This file implements LrSchedule (see LrSchedule.h): the checks of its
// fields and the learning rate of a step.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/LrSchedule.h"

#include "lib/NumberRules.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ppc {

llvm::StringRef lrScheduleName(LrScheduleKind kind) {
  switch (kind) {
  case LrScheduleKind::Constant:
    return "constant";
  case LrScheduleKind::Linear:
    return "linear";
  case LrScheduleKind::Cosine:
    return "cosine";
  }
  return "";
}

std::optional<LrScheduleKind> parseLrScheduleName(llvm::StringRef name) {
  for (LrScheduleKind kind : kAllLrScheduleKinds)
    if (lrScheduleName(kind) == name)
      return kind;
  return std::nullopt;
}

llvm::Error LrSchedule::check(double lr) const {
  if (llvm::Error err = checkOption(
          "steps",
          IntegerRule{1, std::numeric_limits<int>::max()}.problem(steps)))
    return err;
  if (llvm::Error err = checkOption("warmupSteps", IntegerRule{0, steps, "",
                                                               "at most the "
                                                               "steps"}
                                                       .problem(warmupSteps)))
    return err;
  std::string problem = RealRule{0, false, lr, ""}.problem(minLr);
  if (!problem.empty())
    return checkOption("minLr", problem + " (at most the learning rate)");
  if (kind == LrScheduleKind::Constant && minLr != 0)
    return checkOption("minLr", formatNumber(minLr) +
                                    " applies to the linear and cosine "
                                    "schedules");
  return llvm::Error::success();
}

double LrSchedule::at(double lr, int step) const {
  if (step < warmupSteps)
    return lr * double(step + 1) / double(warmupSteps);
  if (kind == LrScheduleKind::Constant)
    return lr;
  // The decay's progress in 0..1; steps past the end stay at its end.
  double progress = std::min(1.0, double(step - warmupSteps) /
                                      double(std::max(1, steps - warmupSteps)));
  if (kind == LrScheduleKind::Linear)
    return lr - (lr - minLr) * progress;
  return minLr + (lr - minLr) * 0.5 * (1 + std::cos(M_PI * progress));
}

} // namespace ppc
