//===- tools/ppc/RuntimeFlags.h - Options run and train share --*- C++ -*-===//
//
// How a rank runs, as opposed to what it runs: microbatches, device,
// timeout, meta cache, threads, trace, logging, and what it prints besides
// results and errors (--quiet, --progress, --stats-json). `ppc run` and
// `ppc train` declare them once, here, and copy them into RunOptions the
// same way.
// The --schedule option of ppc run, ppc train and ppc schedule is made here
// too, from runtime/schedule/Schedules.def.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_RUNTIMEFLAGS_H
#define PPC_TOOLS_PPC_RUNTIMEFLAGS_H

#include "lib/WeightOptions.h"
#include "runtime/exec/RunOptions.h"

#include "llvm/Support/Error.h"

#include <CLI/CLI.hpp>

#include <string>

namespace ppc {

struct RuntimeFlags {
  int microbatches = 1;
  std::string device = "cpu";
  /// --link: one of linkPolicyNames() (default PPC_LINK, else auto).
  std::string link = "auto";
  double timeoutSeconds = 60;
  std::string metaCacheDir;
  bool noMetaCache = false;
  int threads = 0;
  std::string tracePath;
  bool verbose = false;
  bool printSchedule = false;
  /// Only errors and the results asked for: no notes, warnings, progress or
  /// closing lines.
  bool quiet = false;
  /// Progress lines even when stderr is not a terminal.
  bool progress = false;
  /// Where the reporting rank writes the run's statistics as JSON.
  std::string statsJsonPath;
  /// Whether --microbatches was given (its default does not pipeline).
  bool microbatchesGiven = false;
  /// Whether --link was given (PPC_LINK then plays no part).
  bool linkGiven = false;
  /// --weights and the options beside it (tools/ppc/WeightFlags.h).
  WeightOptions weights;

  /// Adds --microbatches, --device, --link, --timeout, --meta-cache,
  /// --no-meta-cache, --threads, --trace, --verbose, --print-schedule,
  /// --quiet, --progress, --stats-json and the --weights options to `app`.
  void addTo(CLI::App &app);
  /// Copies them into `options` (--quiet sends warnings nowhere); the
  /// schedule and user metadata are each command's own. The link is
  /// --link's when given, else PPC_LINK's, else auto. Errors: "PPC_LINK
  /// 'fast' is not a link: expected auto, gloo, shm (--link overrides
  /// it)".
  llvm::Error applyTo(RunOptions &options) const;
  /// The note for a run whose --microbatches was left at 1 on more than
  /// one stage, printed once by rank 0 after the first batch or step ("" when
  /// it does not apply).
  std::string microbatchesNote(int stages) const;
};

/// A check for --schedule: accepts the names of Schedules.def; the error for
/// any other lists every kind, or with `inference` those ppc run takes (a
/// training kind is refused too, naming ppc train). With `storeKind`
/// it turns the name into its ScheduleKind, as the number CLI11 then
/// stores. With `allowAuto` it also takes "auto" (ppc train).
CLI::Validator scheduleValidator(bool inference, bool storeKind,
                                 bool allowAuto = false);
/// "gpipe (all forwards, then all backwards), 1f1b (...) or ...": the
/// choices of --schedule with their Schedules.def help.
std::string scheduleChoicesHelp(bool inference);
/// Adds --schedule NAME (default 1f1b) to `app`, storing into `kind`.
void addScheduleOption(CLI::App &app, ScheduleKind &kind, bool inference);

} // namespace ppc

#endif // PPC_TOOLS_PPC_RUNTIMEFLAGS_H
