//===- tools/ppc/TraceCommand.cpp - ppc trace -----------------------------===//
//
// `ppc trace summary FILE` and `ppc trace plot FILE -o OUT.svg`: CLI11
// wiring over the reader, summary and timeline in runtime/Trace.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"
#include "tools/ppc/OptionChecks.h"

#include "lib/FileUtil.h"
#include "lib/OutputGuard.h"
#include "runtime/Trace.h"

#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace ppc {

namespace {
struct TraceArgs {
  std::string summaryPath;
  std::string plotPath;
  std::string outputPath;
  CLI::App *summary = nullptr;
  CLI::App *plot = nullptr;
};
} // namespace

static llvm::Expected<int> runSummary(const TraceArgs &args) {
  auto timeline = readTraceFile(args.summaryPath);
  if (!timeline)
    return timeline.takeError();
  printTraceSummary(summarizeTrace(*timeline), llvm::outs());
  return 0;
}

static llvm::Expected<int> runPlot(const TraceArgs &args) {
  OutputGuard guard;
  guard.keep(args.plotPath, "the trace");
  if (llvm::Error err = guard.claimFile("--output", args.outputPath))
    return err;
  auto timeline = readTraceFile(args.plotPath);
  if (!timeline)
    return timeline.takeError();
  if (llvm::Error err =
          writeFileAtomically(args.outputPath, [&](llvm::raw_ostream &os) {
            renderTimelineSVG(*timeline, os);
            return llvm::Error::success();
          }))
    return err;
  llvm::outs() << "wrote " << args.outputPath << "\n";
  return 0;
}

Command addTraceCommand(CLI::App &parent) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App *app = parent.add_subcommand(
      "trace", "Summarize or draw a timeline trace written by 'ppc run "
               "--trace' (Chrome trace event JSON; Perfetto opens it too)");
  app->require_subcommand(1);
  args->summary = app->add_subcommand(
      "summary", "Print each rank's busy and waiting time, bubble fraction "
                 "and event counts, and the slowest stage");
  args->summary->add_option("trace", args->summaryPath, "The trace file (JSON)")
      ->required()
      ->check(pathOption());
  args->plot = app->add_subcommand(
      "plot", "Draw the trace as an SVG timeline: one row per rank, one box "
              "per compute action");
  args->plot->add_option("trace", args->plotPath, "The trace file (JSON)")
      ->required()
      ->check(pathOption());
  args->plot
      ->add_option("-o,--output", args->outputPath,
                   "The SVG file to write (atomically)")
      ->required()
      ->check(pathOption());
  return {app, [args]() -> llvm::Expected<int> {
            if (args->plot->parsed())
              return runPlot(*args);
            return runSummary(*args);
          }};
}

} // namespace ppc
