//===- tools/ppc/RuntimeFlags.h - Options ppc run and train share -*- C++
//-*-===//
//
// How a rank runs, as opposed to what it runs: microbatches, device,
// timeout, meta cache, threads, trace, logging. `ppc run` and `ppc train`
// declare them once, here, and copy them into RunOptions the same way.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_RUNTIMEFLAGS_H
#define PPC_TOOLS_PPC_RUNTIMEFLAGS_H

#include "runtime/Pipeline.h"

#include <CLI/CLI.hpp>

#include <string>

namespace ppc {

struct RuntimeFlags {
  int microbatches = 1;
  std::string device = "cpu";
  double timeoutSeconds = 60;
  std::string metaCacheDir;
  bool noMetaCache = false;
  int threads = 0;
  std::string tracePath;
  bool verbose = false;
  bool printSchedule = false;

  /// Adds --microbatches, --device, --timeout, --meta-cache,
  /// --no-meta-cache, --threads, --trace, --verbose and --print-schedule to
  /// `app`.
  void addTo(CLI::App &app);
  /// Copies them into `options`; the schedule and user metadata are each
  /// command's own.
  void applyTo(RunOptions &options) const;
};

} // namespace ppc

#endif // PPC_TOOLS_PPC_RUNTIMEFLAGS_H
