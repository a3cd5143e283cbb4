//===- runtime/ScheduleKind.h - The pipeline schedules by name --*- C++ -*-===//
//
// The schedule kinds a run can choose. Part of libppc_runtime's public API
// (RunOptions names one); the schedule generator reads it too, so it lives
// apart from the pipeline.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULEKIND_H
#define PPC_RUNTIME_SCHEDULEKIND_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace ppc {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1 };

/// "gpipe" / "1f1b".
llvm::StringRef scheduleName(ScheduleKind kind);
/// The kind named `name` ("gpipe", "1f1b"); nullopt for anything else.
std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULEKIND_H
