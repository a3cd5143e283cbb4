//===- runtime/schedule/Build.cpp - Generating a schedule by kind ---------===//
//
// This file implements generation: the kind's generator, then the
// communication lowering (see Build.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Build.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/Generators.h"
#include "runtime/schedule/Lowering.h"
#include "runtime/schedule/Simulate.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace ppc {

namespace {
/// Schedules.def's generators, in the order of ScheduleKind.
constexpr OrderGenerator kGenerators[] = {
#define SCHEDULE(Enum, Name, Inference, Placement, Help, Gen) Gen,
#include "runtime/schedule/Schedules.def"
};

/// Fills schedule.ranks (edges, placement and kind set) with the actions of
/// its kind: the generator's compute orders and their communication.
llvm::Error generate(Schedule &schedule) {
  EdgeIndex index(schedule);
  auto orders =
      kGenerators[static_cast<size_t>(schedule.kind)](schedule, index);
  if (!orders)
    return orders.takeError();
  schedule.ranks.assign(schedule.placement.worldSize(), {});
  addCommunication(schedule, index, *orders);
  return llvm::Error::success();
}
} // namespace

/// A training schedule without actions: placement, microbatches and the
/// edges between stages.
llvm::Expected<Schedule> emptyTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               int microbatches) {
  if (llvm::Error err =
          checkOption("microbatches",
                      IntegerRule{1, kMaxMicrobatches}.problem(microbatches)))
    return err;
  if (static_cast<size_t>(placement.numStages()) != manifest.stages.size())
    return makeError(llvm::formatv("the placement has {0} stages but the "
                                   "manifest {1}",
                                   placement.numStages(),
                                   manifest.stages.size())
                         .str());
  auto edges = boundaryEdges(manifest);
  if (!edges)
    return edges.takeError();
  Schedule schedule;
  schedule.training = true;
  schedule.microbatches = microbatches;
  schedule.placement = placement;
  for (Edge &e : *edges)
    if (!e.collector)
      schedule.edges.push_back(std::move(e));
  schedule.ranks.resize(placement.worldSize());
  return schedule;
}

llvm::Expected<Schedule> buildSchedule(const Manifest &manifest,
                                       const Placement &placement,
                                       ScheduleKind kind, int microbatches) {
  if (llvm::Error err =
          checkOption("microbatches",
                      IntegerRule{1, kMaxMicrobatches}.problem(microbatches)))
    return err;
  if (!scheduleRunsInference(kind))
    return makeError(llvm::formatv("schedule {0} is for training (ppc train); "
                                   "ppc run takes {1}",
                                   scheduleName(kind),
                                   scheduleNames(/*inferenceOnly=*/true))
                         .str());
  auto edges = boundaryEdges(manifest);
  if (!edges)
    return edges.takeError();
  Schedule schedule;
  schedule.kind = kind;
  schedule.microbatches = microbatches;
  schedule.placement = placement;
  schedule.edges = std::move(*edges);
  if (llvm::Error err = generate(schedule))
    return err;
  return schedule;
}

llvm::Expected<Schedule> buildTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               ScheduleKind kind,
                                               int microbatches) {
  auto schedule = emptyTrainingSchedule(manifest, placement, microbatches);
  if (!schedule)
    return schedule.takeError();
  schedule->kind = kind;
  if (llvm::Error err = generate(*schedule))
    return err;
  return schedule;
}

llvm::Expected<Schedule>
buildSimulatedTrainingSchedule(const Manifest &manifest, ScheduleKind kind,
                               int worldSize, int microbatches,
                               llvm::StringRef style) {
  auto placement =
      Placement::create(static_cast<int>(manifest.stages.size()), worldSize,
                        style.empty() ? schedulePlacement(kind) : style);
  if (!placement)
    return placement.takeError();
  auto schedule =
      buildTrainingSchedule(manifest, *placement, kind, microbatches);
  if (!schedule)
    return schedule.takeError();
  if (llvm::Error err = simulateSchedule(*schedule))
    return err;
  return schedule;
}

Schedule evaluationSchedule(const Schedule &training) {
  Schedule out = training;
  out.training = false;
  out.evaluation = true;
  for (std::vector<Action> &actions : out.ranks)
    llvm::erase_if(actions, [](const Action &a) {
      return a.kind != ActionKind::Forward && a.kind != ActionKind::SendF &&
             a.kind != ActionKind::RecvF;
    });
  return out;
}

} // namespace ppc
