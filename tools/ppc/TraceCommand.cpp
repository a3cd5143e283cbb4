//===- tools/ppc/TraceCommand.cpp - ppc trace -----------------------------===//
//
// `ppc trace summary FILE` and `ppc trace plot FILE -o OUT.svg`: CLI11
// wiring over the reader, summary and timeline in tools/ppc/TraceReader.h,
// TraceRange.h, TraceSummary.h and TracePlot.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"
#include "tools/ppc/OptionChecks.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/OutputGuard.h"
#include "tools/ppc/TracePlot.h"
#include "tools/ppc/TraceRange.h"
#include "tools/ppc/TraceReader.h"
#include "tools/ppc/TraceSummary.h"

#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>
#include <string>

namespace ppc {

namespace {
struct TraceArgs {
  std::string summaryPath;
  int skipSteps = 0;
  std::string plotPath;
  std::string outputPath;
  std::string from, to;
  int width = kDefaultPlotWidth;
  CLI::App *summary = nullptr;
  CLI::App *plot = nullptr;
};

/// A --from or --to value: parseTimePoint's syntax.
CLI::Validator timePointOption() {
  return CLI::Validator(
      [](std::string &text) -> std::string {
        auto point = parseTimePoint(text);
        return point ? "" : llvm::toString(point.takeError());
      },
      "TIME");
}

constexpr const char *kTimeHelp =
    ": a time in milliseconds from the trace's first event (120ms, 2.5ms), "
    "or step:N / batch:N (N from 1; ppc train traces have steps, ppc run "
    "traces batches)";
} // namespace

static llvm::Expected<int> runSummary(const TraceArgs &args) {
  auto timeline = readTraceFile(args.summaryPath);
  if (!timeline)
    return timeline.takeError();
  auto kept = skipFirstSteps(*timeline, args.skipSteps);
  if (!kept)
    return makeError("--skip-steps " + std::to_string(args.skipSteps) + ": " +
                     llvm::toString(kept.takeError()));
  printTraceSummary(summarizeTrace(*kept), llvm::outs());
  return 0;
}

static std::optional<TimePoint> timePoint(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  auto point = parseTimePoint(text);
  if (!point) { // checked by timePointOption already
    llvm::consumeError(point.takeError());
    return std::nullopt;
  }
  return *point;
}

static llvm::Expected<int> runPlot(const TraceArgs &args) {
  OutputGuard guard;
  guard.keep(args.plotPath, "the trace");
  if (llvm::Error err = guard.claimFile("--output", args.outputPath))
    return err;
  auto timeline = readTraceFile(args.plotPath);
  if (!timeline)
    return timeline.takeError();
  PlotOptions options;
  options.width = args.width;
  if (!args.from.empty() || !args.to.empty()) {
    auto range =
        resolveTimeRange(*timeline, timePoint(args.from), timePoint(args.to),
                         "--from " + args.from, "--to " + args.to);
    if (!range)
      return range.takeError();
    options.range = *range;
  }
  if (llvm::Error err =
          writeFileAtomically(args.outputPath, [&](llvm::raw_ostream &os) {
            renderTimelineSVG(*timeline, os, options);
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
                 "and event counts, each stage's time in F, B, I, W, sends "
                 "and receives, and the slowest stage");
  args->summary->add_option("trace", args->summaryPath, "The trace file (JSON)")
      ->required()
      ->check(pathOption());
  args->summary
      ->add_option("--skip-steps", args->skipSteps,
                   "Leave out each rank's first K steps (ppc train) or "
                   "batches (ppc run): the warm-up")
      ->check(intInRange(0))
      ->capture_default_str();
  args->plot = app->add_subcommand(
      "plot", "Draw the trace as an SVG timeline: one row per rank, one box "
              "per compute action, a dashed line at each step or batch");
  args->plot->add_option("trace", args->plotPath, "The trace file (JSON)")
      ->required()
      ->check(pathOption());
  args->plot
      ->add_option("-o,--output", args->outputPath,
                   "The SVG file to write (atomically)")
      ->required()
      ->check(pathOption());
  args->plot
      ->add_option("--from", args->from,
                   std::string("Draw from this point on") + kTimeHelp)
      ->check(timePointOption());
  args->plot
      ->add_option("--to", args->to,
                   std::string("Draw up to this point (the end of a step "
                               "or batch)") +
                       kTimeHelp)
      ->check(timePointOption());
  args->plot
      ->add_option("--width", args->width, "The width of the SVG in pixels")
      ->check(intInRange(kMinPlotWidth, kMaxPlotWidth))
      ->capture_default_str();
  return {app, [args]() -> llvm::Expected<int> {
            if (args->plot->parsed())
              return runPlot(*args);
            return runSummary(*args);
          }};
}

} // namespace ppc
