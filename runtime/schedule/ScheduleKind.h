//===- runtime/schedule/ScheduleKind.h - The pipeline schedules by name ---===//
//
// The schedule kinds a run can choose, one per line of Schedules.def. Part
// of libppc_runtime's public API (RunOptions names one); the schedule
// generator reads it too, so it lives apart from the pipeline. Inference
// (ppc run) takes the kinds marked for it; training takes all of them
// (docs/schedules.md).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_SCHEDULEKIND_H
#define PPC_RUNTIME_SCHEDULE_SCHEDULEKIND_H

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace ppc {

/// The most microbatches a run may ask for: bounds the schedule, which is
/// built before the batch size is known (every schedule builder checks it).
constexpr int kMaxMicrobatches = 65536;

enum class ScheduleKind {
#define SCHEDULE(Enum, Name, Inference, Placement, Help, Generator) Enum,
#include "runtime/schedule/Schedules.def"
};

/// Every kind, in the order of Schedules.def (for help texts and tests).
inline constexpr ScheduleKind kAllScheduleKinds[] = {
#define SCHEDULE(Enum, Name, Inference, Placement, Help, Generator)            \
  ScheduleKind::Enum,
#include "runtime/schedule/Schedules.def"
};

/// The kind's name on the command line: "gpipe", "1f1b", ...
llvm::StringRef scheduleName(ScheduleKind kind);
/// The kind's note for --help ("B split into I and W").
llvm::StringRef scheduleHelp(ScheduleKind kind);
/// Whether ppc run (inference) may use the kind; every kind trains.
bool scheduleRunsInference(ScheduleKind kind);
/// The placement style (Placement.h) the kind runs on when chosen by name:
/// "loop", or "v" for the V-shaped schedules.
llvm::StringRef schedulePlacement(ScheduleKind kind);
/// The kind named `name` (one of scheduleName's); nullopt for anything else.
std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name);
/// The names of every kind (or of the inference ones) as an English list,
/// "gpipe, 1f1b, interleaved-1f1b or zb-h1", or joined by `separator`
/// ("gpipe|1f1b|...") when one is given.
std::string scheduleNames(bool inferenceOnly, llvm::StringRef separator = "");

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_SCHEDULEKIND_H
