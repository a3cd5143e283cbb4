//===- tools/ppc/OutputClaims.h - A command's outputs, claimed --*- C++ -*-===//
//
// The steps every command that writes files takes before any work, in one
// place: no output may land in a checkpoint the command reads
// (checkOutputsOutsideCheckpoints, runtime/train/Checkpoint.h), and each
// output is claimed against what the command reads and the other outputs
// (OutputGuard, lib/OutputGuard.h). `ppc run`, `ppc train` and `ppc
// generate` list their outputs and call claimOutputs().
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_OUTPUTCLAIMS_H
#define PPC_TOOLS_PPC_OUTPUTCLAIMS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <utility>

namespace ppc {

class OutputGuard;

/// One output of a command: the flag that names it, its path (empty: not
/// given, skipped unless `required`), and how OutputGuard claims it.
struct OutputClaim {
  enum class Kind {
    /// A file, replaced atomically (OutputGuard::claimFile).
    File,
    /// A directory the command creates or writes files into
    /// (claimDirectory).
    Directory,
    /// A directory replaced whole (claimReplacedDirectory: --save).
    ReplacedDirectory,
  };
  std::string option, path;
  Kind kind = Kind::File;
  /// Whether it may lie in the checkpoints the command reads
  /// (--checkpoint-dir writes its checkpoints beside them).
  bool intoCheckpoints = false;
  /// Claimed even when empty (OutputGuard refuses: "--output '' names no
  /// file").
  bool required = false;
};

/// Refuses, before any work, an output that would land in a checkpoint the
/// command reads: each (source, what) of `checkpoints` as
/// checkOutputsOutsideCheckpoints() takes them; then claims every output
/// that has a path, in order, with `guard`, which already keeps what the
/// command reads. Errors: the first refusal, as those functions word it.
llvm::Error
claimOutputs(OutputGuard &guard,
             llvm::ArrayRef<std::pair<std::string, std::string>> checkpoints,
             llvm::ArrayRef<OutputClaim> outputs);

} // namespace ppc

#endif // PPC_TOOLS_PPC_OUTPUTCLAIMS_H
