//===- tools/ppc/Commands.h - Subcommand registration -----------*- C++ -*-===//
//
// Each subcommand adds itself to the CLI11 app and returns the function that
// runs it once parsing succeeded. Runners return the process exit code, or
// an llvm::Error that main() prints as one "error: ..." line (exit code 2).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_COMMANDS_H
#define PPC_TOOLS_PPC_COMMANDS_H

#include "llvm/Support/Error.h"

#include <CLI/CLI.hpp>

#include <functional>

namespace ppc {

/// Exit code for errors (bad input, failed I/O, a lost peer). Exit code 1 is
/// reserved for "ran fine, but the answer is no" (ppc verify's mismatch).
constexpr int kErrorExitCode = 2;

using CommandRunner = std::function<llvm::Expected<int>()>;

struct Command {
  CLI::App *app;
  CommandRunner run;
};

#define PPC_COMMAND(fn) Command fn(CLI::App &parent);
#include "tools/ppc/Commands.def"

} // namespace ppc

#endif // PPC_TOOLS_PPC_COMMANDS_H
