//===- runtime/schedule/Plan.cpp - The schedule a job runs ----------------===//
//
// This file implements planSchedule, the one way a command settles its
// schedule and placement (see Plan.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Plan.h"

#include "lib/Error.h"
#include "lib/OptionName.h"
#include "runtime/schedule/AutoSchedule.h"
#include "runtime/schedule/Build.h"
#include "runtime/schedule/Placement.h"
#include "runtime/schedule/ScheduleCSV.h"
#include "runtime/schedule/ScheduleStats.h"
#include "runtime/schedule/Simulate.h"

namespace ppc {

llvm::Error ScheduleRequest::check() const {
  if (autoSchedule && csv)
    return makeError(optionName(Option::Schedule) + " auto picks a schedule; " +
                     optionName(Option::ScheduleCSV) +
                     " gives one: use one of them");
  return llvm::Error::success();
}

namespace {
/// A schedule CSV places each stage on the rank whose row runs it.
llvm::Expected<Schedule> scheduleFromCSV(const Manifest &manifest,
                                         int worldSize,
                                         const ScheduleRequest &request) {
  int numStages = static_cast<int>(manifest.stages.size());
  auto placement =
      placementFromCSV(*request.csv, numStages, worldSize, request.csvName);
  if (!placement)
    return placement.takeError();
  return trainingScheduleFromCSV(manifest, *placement, *request.csv,
                                 request.microbatches, request.csvName);
}

/// A named schedule on its placement, simulated.
llvm::Expected<Schedule> namedSchedule(const Manifest &manifest, int worldSize,
                                       const ScheduleRequest &request) {
  if (request.training)
    return buildSimulatedTrainingSchedule(manifest, request.kind, worldSize,
                                          request.microbatches,
                                          request.placement);
  llvm::StringRef style = request.placement.empty()
                              ? schedulePlacement(request.kind)
                              : llvm::StringRef(request.placement);
  auto placement = Placement::create(static_cast<int>(manifest.stages.size()),
                                     worldSize, style);
  if (!placement)
    return placement.takeError();
  auto schedule =
      buildSchedule(manifest, *placement, request.kind, request.microbatches);
  if (!schedule)
    return schedule.takeError();
  if (llvm::Error err = simulateSchedule(*schedule))
    return err;
  return schedule;
}
} // namespace

llvm::Expected<SchedulePlan> planSchedule(const Manifest &manifest,
                                          int worldSize,
                                          const ScheduleRequest &request) {
  if (llvm::Error err = request.check())
    return err;
  if (request.autoSchedule) {
    auto choice = chooseSchedule(
        manifest, worldSize, request.microbatches, manifestStageCosts(manifest),
        manifestCostsSource(manifest), request.maxActivations,
        manifestCostUnit(manifest));
    if (!choice)
      return choice.takeError();
    return SchedulePlan{std::move(choice->schedule),
                        std::move(choice->explanation)};
  }
  auto schedule = request.csv ? scheduleFromCSV(manifest, worldSize, request)
                              : namedSchedule(manifest, worldSize, request);
  if (!schedule)
    return schedule.takeError();
  return SchedulePlan{std::move(*schedule), ""};
}

} // namespace ppc
