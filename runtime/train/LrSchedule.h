//===- runtime/train/LrSchedule.h - Learning-rate schedules -----*- C++ -*-===//
//
// The learning rate of each training step as a pure function of the global
// step, so that nothing but the step number needs saving to resume (a
// checkpoint restores the step; the schedule follows). Part of
// libppc_runtime's API (TrainOptions holds one); docs/training.md gives the
// formulas.
//
// With base learning rate B, minimum M, warm-up W and S steps in all, step
// s = 0 .. S-1 (0-based) learns at:
//   s < W:    B * (s + 1) / W                                  (any kind)
//   constant: B
//   linear:   B - (B - M) * (s - W) / (S - W)
//   cosine:   M + (B - M) * (1 + cos(pi * (s - W) / (S - W))) / 2
// Steps past S - 1 keep the rate of s = S (linear and cosine: M).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_LRSCHEDULE_H
#define PPC_RUNTIME_TRAIN_LRSCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace ppc {

enum class LrScheduleKind { Constant, Linear, Cosine };

/// Every kind, in `--lr-schedule`'s order of its help text.
inline constexpr LrScheduleKind kAllLrScheduleKinds[] = {
    LrScheduleKind::Constant, LrScheduleKind::Linear, LrScheduleKind::Cosine};

/// "constant" / "linear" / "cosine".
llvm::StringRef lrScheduleName(LrScheduleKind kind);
/// The kind named `name`; nullopt for anything else.
std::optional<LrScheduleKind> parseLrScheduleName(llvm::StringRef name);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  /// Steps of linear warm-up from B / W to B (0: none).
  int warmupSteps = 0;
  /// Where linear and cosine end (M above).
  double minLr = 0;
  /// S above: the steps the schedule spans (the run's --steps).
  int steps = 1;

  /// Checks the schedule against base learning rate `lr`. Errors, each an
  /// OptionError naming its field: "steps 0 is not an integer in
  /// 1..2147483647"; "warmupSteps 30 is not an integer in 0..20 (at most
  /// the steps)"; "minLr 0.5 is not a number in 0..0.1 (at most the
  /// learning rate)"; "minLr 0.05 applies to the linear and cosine
  /// schedules" (a constant one with a minimum).
  llvm::Error check(double lr) const;

  /// The learning rate of 0-based step `step` (>= 0) with base `lr`.
  double at(double lr, int step) const;
};

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_LRSCHEDULE_H
