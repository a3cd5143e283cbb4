//===- runtime/schedule/Build.h - Generating a schedule by kind -----------===//
//
// Generation: a schedule kind's generator (Generators.h) gives every rank's
// compute order, and addCommunication (Lowering.h) puts the messages around
// it, for inference and training alike.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_BUILD_H
#define PPC_RUNTIME_SCHEDULE_BUILD_H

#include "lib/Manifest.h"
#include "runtime/schedule/Placement.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleKind.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace ppc {

/// Builds the inference schedule of `kind` for all ranks. Errors: those of
/// boundaryEdges(), microbatches < 1, a kind not marked for inference in
/// Schedules.def (the message lists those that are), and the generator's.
llvm::Expected<Schedule> buildSchedule(const Manifest &manifest,
                                       const Placement &placement,
                                       ScheduleKind kind, int microbatches);

/// Builds the training schedule of `kind` for all ranks (Generators.h); run
/// simulateSchedule() on it before use. Errors: those of boundaryEdges(),
/// microbatches < 1, a placement whose stage count is not the manifest's,
/// and the generator's: interleaved-1f1b refuses fewer than 2 stages per
/// rank and any placement but loop.
llvm::Expected<Schedule> buildTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               ScheduleKind kind,
                                               int microbatches);

/// buildTrainingSchedule() on the placement `style` (Placement.h), by
/// default the kind's own (Schedules.def), then simulateSchedule(): what
/// `ppc schedule` and chooseSchedule() run. Errors: Placement::create's and
/// those two's.
llvm::Expected<Schedule>
buildSimulatedTrainingSchedule(const Manifest &manifest, ScheduleKind kind,
                               int worldSize, int microbatches,
                               llvm::StringRef style = "");

/// A training schedule without actions: placement, microbatches and the
/// edges between stages, every rank's list empty; what the generators and
/// the CSV reader fill. Errors: microbatches out of range, a placement whose
/// stage count is not the manifest's, and boundaryEdges()'s.
llvm::Expected<Schedule> emptyTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               int microbatches);

/// The evaluation schedule of `training` (a training schedule): every
/// rank's F, SEND_F and RECV_F in their order there, no backward, on the same
/// placement, edges and channels; Schedule::evaluation set, training not.
/// Forward messages depend on forwards alone, so dropping the backward keeps
/// every rank's receives matched and in order; run simulateSchedule() on it
/// all the same.
Schedule evaluationSchedule(const Schedule &training);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_BUILD_H
