//===- runtime/schedule/Plan.h - The schedule a job runs ------------------===//
//
// ppc run, ppc train and ppc schedule settle a job's schedule and placement
// the same way: a schedule named by kind, on its own placement
// (Schedules.def) or a given one; the one --schedule auto picks; or a
// schedule CSV, each stage on the rank of the row that runs it.
// planSchedule() is that one way; the callers only read the CSV file (at
// most kMaxScheduleCSVBytes) and name it in their own words.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_PLAN_H
#define PPC_RUNTIME_SCHEDULE_PLAN_H

#include "lib/Manifest.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleKind.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace ppc {

/// Where a job's schedule comes from: `csv` when given, else `auto` when
/// asked, else `kind`.
struct ScheduleRequest {
  /// The schedule by name, on the placement style `placement` (Placement.h),
  /// by default the kind's own.
  ScheduleKind kind = ScheduleKind::OneFOneB;
  std::string placement;
  /// A training schedule, or an inference one (ppc run). `auto` and a CSV
  /// give training schedules.
  bool training = true;
  int microbatches = 1;
  /// --schedule auto: chooseSchedule() with the manifest's stage costs,
  /// leaving out kinds that hold more than `maxActivations` microbatches'
  /// activations on a rank.
  bool autoSchedule = false;
  std::optional<int> maxActivations;
  /// A schedule CSV's text, and its name in messages (the file's path).
  std::optional<std::string> csv;
  std::string csvName;

  /// Errors: `auto` with a CSV ("schedule auto picks a schedule;
  /// scheduleCSVPath gives one: use one of them", options named by
  /// optionName()).
  llvm::Error check() const;
};

struct SchedulePlan {
  /// The schedule, simulated, on its placement (schedule.placement).
  Schedule schedule;
  /// With `auto`: what was picked and why (ScheduleChoice::explanation);
  /// otherwise empty.
  std::string note;
};

/// The schedule of `request` for `manifest` on `worldSize` ranks, simulated.
/// Errors: check()'s; from a CSV, placementFromCSV()'s and
/// trainingScheduleFromCSV()'s; with `auto`, chooseSchedule()'s; by name,
/// Placement::create()'s, buildSchedule()'s or buildTrainingSchedule()'s,
/// and simulateSchedule()'s.
llvm::Expected<SchedulePlan> planSchedule(const Manifest &manifest,
                                          int worldSize,
                                          const ScheduleRequest &request);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_PLAN_H
