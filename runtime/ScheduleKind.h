//===- runtime/ScheduleKind.h - The pipeline schedules by name --*- C++ -*-===//
//
// The schedule kinds a run can choose. Part of libppc_runtime's public API
// (RunOptions names one); the schedule generator reads it too, so it lives
// apart from the pipeline. Inference (ppc run) takes gpipe and 1f1b; training
// takes all four (docs/schedules.md).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULEKIND_H
#define PPC_RUNTIME_SCHEDULEKIND_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace ppc {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1 };

/// Every kind, in the order of the enum (for help texts and tests).
inline constexpr ScheduleKind kAllScheduleKinds[] = {
    ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
    ScheduleKind::ZeroBubbleH1};

/// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1".
llvm::StringRef scheduleName(ScheduleKind kind);
/// The kind named `name` (one of scheduleName's); nullopt for anything else.
std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULEKIND_H
