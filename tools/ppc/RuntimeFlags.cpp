//===- tools/ppc/RuntimeFlags.cpp - Options ppc run and train share -------===//
//
// This file declares the shared options on a subcommand, and --schedule,
// (RuntimeFlags.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/RuntimeFlags.h"

#include "lib/Error.h"
#include "runtime/link/Link.h"
#include "runtime/platform/Duration.h"
#include "runtime/platform/Threads.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/WeightFlags.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <optional>

namespace ppc {

void RuntimeFlags::addTo(CLI::App &app) {
  app.add_option("--microbatches", microbatches,
                 "Microbatches per batch; the default, 1, runs the stages one "
                 "after another, without overlap: the stages of a pipeline "
                 "overlap with at least as many microbatches as stages")
      ->capture_default_str()
      ->transform(intInRange(1, kMaxMicrobatches))
      ->each([this](const std::string &) { microbatchesGiven = true; });
  app.add_option("--device", device, "cpu (Gloo) or cuda (NCCL)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option(
         "--link", link,
         "Which link carries CPU tensors between ranks: " + linkPolicyHelp() +
             ". Default: the PPC_LINK environment variable, else auto")
      ->capture_default_str()
      ->check(CLI::IsMember(linkPolicyNames()))
      ->each([this](const std::string &) { linkGiven = true; });
  app.add_option("--timeout", timeoutSeconds,
                 "Seconds to wait for another rank before giving up "
                 "(0.001 to 604800, 7 days)")
      ->capture_default_str()
      ->transform(durationOption(kMinTimeoutSeconds));
  app.add_option(
         "--meta-cache", metaCacheDir,
         "Directory of the meta cache (default: the manifest's directory)")
      ->check(pathOption());
  app.add_flag("--no-meta-cache", noMetaCache,
               "Neither read nor write the meta cache");
  app.add_option("--threads", threads,
                 "Intra-op threads per rank, at most 4 per core (default: "
                 "cores / LOCAL_WORLD_SIZE, fewer when other processes keep "
                 "cores busy as the rank starts)")
      ->transform(integerOption(threadsRule()));
  app.add_option("--trace", tracePath,
                 "Record every action of every rank and write a Chrome trace "
                 "(Perfetto, chrome://tracing; ppc trace summary|plot) to "
                 "this file from rank 0")
      ->check(pathOption());
  app.add_flag("--verbose", verbose,
               "Show LibTorch's own diagnostics (c10d, Gloo), hidden by "
               "default");
  app.add_flag("--print-schedule", printSchedule,
               "Print this rank's schedule ('schedule: rank=R ...' lines) "
               "before running");
  app.add_flag("--quiet", quiet,
               "Print only errors and the results asked for (loss lines, "
               "--stats): no notes, warnings, progress or closing line");
  app.add_flag("--progress", progress,
               "Print progress lines (done, rate, time left) even when stderr "
               "is not a terminal; on a terminal one line is redrawn in place");
  app.add_option("--stats-json", statsJsonPath,
                 "Write the run's statistics as JSON to this file, from the "
                 "rank that reports results (docs/runtime.md)")
      ->check(pathOption());
  addWeightFlags(app, weights);
}

std::string RuntimeFlags::microbatchesNote(int stages) const {
  if (microbatchesGiven || microbatches != 1 || stages < 2 || quiet)
    return "";
  return "note: --microbatches 1 (the default) runs the " +
         std::to_string(stages) + " stages one after another; --microbatches " +
         std::to_string(stages) + " or more overlaps them";
}

/// --link as given, else PPC_LINK, else auto. PPC_LINK is read only here,
/// by a command that runs ranks and only without --link (CLI11's envname
/// would check it for every subcommand, --link given or not).
static llvm::Expected<std::string> linkOf(const RuntimeFlags &flags) {
  const char *fromEnv = std::getenv("PPC_LINK");
  if (flags.linkGiven || !fromEnv || !*fromEnv)
    return flags.link;
  if (!linkPolicyNamed(fromEnv))
    return makeError(
        "PPC_LINK '" + printable(fromEnv) + "' is not a link: expected " +
        llvm::join(linkPolicyNames(), ", ") + " (--link overrides it)");
  return std::string(fromEnv);
}

llvm::Error RuntimeFlags::applyTo(RunOptions &options) const {
  auto chosenLink = linkOf(*this);
  if (!chosenLink)
    return chosenLink.takeError();
  options.microbatches = microbatches;
  options.device = device;
  options.link = *chosenLink;
  options.timeout =
      durationFromSeconds<std::chrono::milliseconds>(timeoutSeconds);
  options.metaCacheDir = metaCacheDir;
  options.useMetaCache = !noMetaCache;
  options.threads = threads;
  options.tracePath = tracePath;
  options.torchLogs = verbose;
  options.weights = weights;
  if (quiet)
    options.warnings = &llvm::nulls();
  return llvm::Error::success();
}

CLI::Validator scheduleValidator(bool inference, bool storeKind,
                                 bool allowAuto) {
  std::string list = allowAuto ? scheduleNames(inference, ", ") + " or auto"
                               : scheduleNames(inference);
  return CLI::Validator(
      [list, storeKind, allowAuto,
       inference](std::string &name) -> std::string {
        if (allowAuto && name == "auto")
          return "";
        std::optional<ScheduleKind> kind = parseScheduleName(name);
        if (!kind)
          return "must be " + list + " (got '" + printable(name) + "')";
        if (inference && !scheduleRunsInference(*kind))
          return "must be " + list + " (got '" + name +
                 "', a training schedule: ppc train runs it)";
        if (storeKind)
          name = std::to_string(static_cast<int>(*kind));
        return "";
      },
      scheduleNames(inference, "|") + (allowAuto ? "|auto" : ""));
}

std::string scheduleChoicesHelp(bool inference) {
  std::vector<ScheduleKind> kinds;
  for (ScheduleKind kind : kAllScheduleKinds)
    if (!inference || scheduleRunsInference(kind))
      kinds.push_back(kind);
  std::string out;
  for (size_t i = 0; i < kinds.size(); ++i)
    out += (i == 0                  ? ""
            : i + 1 == kinds.size() ? " or "
                                    : ", ") +
           scheduleName(kinds[i]).str() + " (" + scheduleHelp(kinds[i]).str() +
           ")";
  return out;
}

void addScheduleOption(CLI::App &app, ScheduleKind &kind, bool inference) {
  app.add_option("--schedule", kind,
                 "Pipeline schedule: " + scheduleChoicesHelp(inference))
      ->default_str(scheduleName(ScheduleKind::OneFOneB).str())
      ->transform(scheduleValidator(inference, /*storeKind=*/true));
}

} // namespace ppc
