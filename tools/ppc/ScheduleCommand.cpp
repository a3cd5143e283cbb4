//===- tools/ppc/ScheduleCommand.cpp - ppc schedule -----------------------===//
//
// CLI11 wiring for `ppc schedule`: builds (or reads from a CSV file) the
// training schedule of a chain of stages on a placement (loop, v, or the
// CSV's own), simulates it and prints its grid;
// optionally writes its compute actions as PyTorch pipelining's CSV. No
// model is needed: the chain stands for any model split into that many
// stages. The work is in runtime/schedule/: Plan.h builds or reads the
// schedule, ScheduleStats.h measures it, Grid.h prints it and ScheduleCSV.h
// writes it.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/NumberRules.h"
#include "lib/OutputGuard.h"
#include "lib/SafeRead.h"
#include "runtime/schedule/Grid.h"
#include "runtime/schedule/Plan.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleCSV.h"
#include "runtime/schedule/ScheduleStats.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/RuntimeFlags.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

namespace ppc {

namespace {
struct ScheduleOptions {
  std::string schedule, csvOut, csvIn, manifest;
  std::string csvFormat = "compute_only";
  /// Empty: the schedule's own (Schedules.def), or the CSV's with --from-csv.
  std::string placement;
  std::vector<std::string> costs;
  int stages = 0, microbatches = 0, ranks = 0;
  bool compare = false;
};

/// Large enough for any schedule worth printing, small enough that the
/// grid and the simulation stay instant.
constexpr int kMaxGridStages = 1024;
constexpr int kMaxGridMicrobatches = 1024;

/// "loop (stage k on ...) or v (...)": the styles of Placement.cpp's
/// registry with their help.
std::string placementChoicesHelp() {
  std::vector<llvm::StringRef> names = placementStyleNames();
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0                  ? ""
            : i + 1 == names.size() ? " or "
                                    : ", ") +
           names[i].str() + " (" + placementStyleHelp(names[i]).str() + ")";
  return out;
}

/// The stage costs of --costs: one "F,I,W" for every stage, or one per
/// stage; with none, the manifest's predicted costs (F, and I = W = F, so a
/// whole backward is twice the forward) when it has them, else unit costs.
/// `described` receives how they were chosen, for the output.
llvm::Expected<std::vector<StageCost>>
stageCosts(const ScheduleOptions &o, const std::optional<Manifest> &manifest,
           int stages, std::string &described) {
  std::vector<StageCost> costs;
  if (o.costs.empty()) {
    if (manifest)
      costs = manifestStageCosts(*manifest);
    described = costs.empty()
                    ? "unit costs F=1 I=1 W=1"
                    : manifestCostsSource(*manifest) + ", in " +
                          manifestCostUnit(*manifest) + ", I = W = F per stage";
    return costs;
  }
  if (o.costs.size() != 1 && o.costs.size() != static_cast<size_t>(stages))
    return makeOptionError(
        "costs", llvm::formatv("takes one F,I,W for every stage or one per "
                               "stage ({0}); got {1}",
                               stages, o.costs.size())
                     .str());
  for (const std::string &text : o.costs) {
    llvm::SmallVector<llvm::StringRef, 3> parts;
    llvm::StringRef(text).split(parts, ',');
    if (parts.size() != 3)
      return makeOptionError(
          "costs", "'" + printable(text) +
                       "' is not F,I,W: three numbers in 0..1e+30 (forward, "
                       "input gradients, weight gradients)");
    double v[3];
    for (size_t i = 0; i < 3; ++i)
      if (std::string problem = RealRule::cost().parse(parts[i].trim(), v[i]);
          !problem.empty())
        return makeOptionError("costs",
                               "'" + printable(text) + "': " + problem);
    costs.push_back({v[0], v[1], v[2]});
  }
  if (costs.size() == 1)
    costs.assign(stages, costs[0]);
  described = "costs F,I,W = " + llvm::join(o.costs, " ");
  return costs;
}

/// `x` as printf's %g prints it: "33", "12.5".
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

std::string perRank(const std::vector<int> &values) {
  std::string out;
  for (size_t r = 0; r < values.size(); ++r)
    out += (r ? " rank" : "rank") + std::to_string(r) + "=" +
           std::to_string(values[r]);
  return out;
}

int sum(const std::vector<int> &values) {
  int total = 0;
  for (int v : values)
    total += v;
  return total;
}

/// --compare: one row per schedule kind, or why it does not apply.
void printComparison(const Manifest &manifest, const ScheduleOptions &o,
                     int stages, int ranks, const std::vector<StageCost> &costs,
                     llvm::StringRef described, llvm::raw_ostream &os) {
  ScheduleRequest request;
  request.placement = o.placement;
  request.microbatches = o.microbatches;
  os << llvm::formatv("{0} stages on {1} ranks, {2} microbatches, {3}\n",
                      stages, ranks, o.microbatches, described);
  os << llvm::formatv("{0,-17} {1,-9} {2,10} {3,7} {4,8} {5,9}\n", "schedule",
                      "placement", "makespan", "bubble", "peak act",
                      "messages");
  for (ScheduleKind kind : kAllScheduleKinds) {
    llvm::StringRef name = scheduleName(kind);
    request.kind = kind;
    auto plan = planSchedule(manifest, ranks, request);
    llvm::Expected<ScheduleStats> stats =
        plan ? scheduleStats(plan->schedule, costs)
             : llvm::Expected<ScheduleStats>(plan.takeError());
    if (!stats) {
      os << llvm::formatv("{0,-17} n/a: {1}\n", name,
                          llvm::toString(stats.takeError()));
      continue;
    }
    os << llvm::formatv("{0,-17} {1,-9} {2,10} {3,6:f1}% {4,8} {5,9}\n", name,
                        plan->schedule.placement.style(),
                        number(stats->makespan), 100 * stats->bubble,
                        *std::max_element(stats->peakActivations.begin(),
                                          stats->peakActivations.end()),
                        sum(stats->messages));
  }
}

/// Exactly one of --schedule, --from-csv and --compare; a CSV places the
/// stages itself.
llvm::Error checkSources(const ScheduleOptions &o) {
  if (int given = !o.schedule.empty() + !o.csvIn.empty() + o.compare;
      given != 1)
    return makeError("ppc schedule takes one of --schedule NAME, --from-csv "
                     "FILE and --compare");
  if (!o.csvIn.empty() && !o.placement.empty())
    return makeError("ppc schedule --from-csv places the stages as the file "
                     "does; it takes no --placement");
  return llvm::Error::success();
}

/// --csv may write neither the manifest's files nor the --from-csv file.
llvm::Error claimCSVOut(const ScheduleOptions &o) {
  if (o.csvOut.empty())
    return llvm::Error::success();
  OutputGuard guard;
  if (!o.manifest.empty())
    keepManifestFiles(guard, o.manifest);
  guard.keep(o.csvIn, "the --from-csv file");
  return guard.claimFile("--csv", o.csvOut);
}

/// --manifest, whose stage count --stages must match when given; none
/// without it, when --stages is needed.
llvm::Expected<std::optional<Manifest>>
loadManifestOption(const ScheduleOptions &o) {
  if (o.manifest.empty()) {
    if (o.stages == 0)
      return makeError("ppc schedule needs --stages N or --manifest FILE");
    return std::nullopt;
  }
  auto loaded = Manifest::load(o.manifest);
  if (!loaded)
    return loaded.takeError();
  int n = static_cast<int>(loaded->stages.size());
  if (o.stages != 0 && o.stages != n)
    return makeError(llvm::formatv("--stages {0} but manifest '{1}' has {2} "
                                   "stages",
                                   o.stages, o.manifest, n)
                         .str());
  return std::optional<Manifest>(std::move(*loaded));
}

/// --ranks, by default one per stage, or one per two stages for the
/// V-shaped schedules, which hold two. A built schedule needs the stages to
/// be a multiple of it.
llvm::Expected<int> rankCount(const ScheduleOptions &o, int stages,
                              std::optional<ScheduleKind> kind) {
  bool twoPerRank = kind && schedulePlacement(*kind) == "v" &&
                    o.placement.empty() && stages % 2 == 0;
  int ranks = o.ranks ? o.ranks : twoPerRank ? stages / 2 : stages;
  std::string style = !o.placement.empty() ? o.placement
                      : kind               ? schedulePlacement(*kind).str()
                                           : std::string("loop");
  if (o.csvIn.empty() && stages % ranks != 0)
    return makeError(llvm::formatv("--stages {0} is not a multiple of --ranks "
                                   "{1} ({2})",
                                   stages, ranks,
                                   style == "loop"
                                       ? llvm::formatv("stage k runs on rank "
                                                       "k mod {0}",
                                                       ranks)
                                             .str()
                                       : "placement " + style)
                         .str());
  return ranks;
}

/// What ppc schedule works on: the stages of --manifest or a chain of
/// --stages, the ranks, the schedule kind and the stage costs.
struct ScheduleJob {
  Manifest graph;
  int stages = 0, ranks = 0;
  std::optional<ScheduleKind> kind;
  std::vector<StageCost> costs;
  /// How the costs were chosen, for the output.
  std::string described;
};

llvm::Expected<ScheduleJob> prepareJob(const ScheduleOptions &o) {
  auto manifest = loadManifestOption(o);
  if (!manifest)
    return manifest.takeError();
  ScheduleJob job;
  job.stages =
      *manifest ? static_cast<int>((*manifest)->stages.size()) : o.stages;
  if (!o.schedule.empty())
    job.kind = parseScheduleName(o.schedule); // the validator accepted it
  auto ranks = rankCount(o, job.stages, job.kind);
  if (!ranks)
    return ranks.takeError();
  job.ranks = *ranks;
  job.graph = *manifest ? **manifest : Manifest::chain(job.stages);
  auto costs = stageCosts(o, *manifest, job.stages, job.described);
  if (!costs)
    return costs.takeError();
  job.costs = std::move(*costs);
  return job;
}

/// The schedule --schedule names, or the one --from-csv reads, simulated.
llvm::Expected<Schedule> makeSchedule(const ScheduleOptions &o,
                                      const ScheduleJob &job) {
  ScheduleRequest request;
  request.placement = o.placement;
  request.microbatches = o.microbatches;
  if (job.kind)
    request.kind = *job.kind;
  if (!o.csvIn.empty()) {
    auto text = readFileBounded(o.csvIn, kMaxScheduleCSVBytes, "schedule");
    if (!text)
      return text.takeError();
    request.csv = (*text)->getBuffer().str();
    request.csvName = o.csvIn;
  }
  auto plan = planSchedule(job.graph, job.ranks, request);
  if (!plan)
    return plan.takeError();
  return std::move(plan->schedule);
}

/// --csv: the schedule in the layout of --csv-format.
llvm::Error writeCSVOut(const ScheduleOptions &o, const Schedule &schedule) {
  if (o.csvOut.empty())
    return llvm::Error::success();
  std::string csv = scheduleToCSV(schedule, o.csvFormat == "compute_comms"
                                                ? CSVLayout::ComputeComms
                                                : CSVLayout::ComputeOnly);
  return writeFileAtomically(o.csvOut, [&](llvm::raw_ostream &os) {
    os << csv;
    return llvm::Error::success();
  });
}

/// The grid, then the bubble under the job's costs, and each rank's peak
/// activations and messages.
void printReport(const Schedule &schedule, const ScheduleStats &stats,
                 llvm::StringRef described, llvm::raw_ostream &os) {
  printGrid(schedule, os);
  os << llvm::formatv("bubble: {0:f1}% (makespan {1}, {2})\n",
                      100 * stats.bubble, number(stats.makespan), described);
  os << "peak activations per rank: " << perRank(stats.peakActivations) << "\n";
  os << "messages per step: " << perRank(stats.messages) << "\n";
  os.flush();
}
} // namespace

static llvm::Expected<int> runSchedule(const ScheduleOptions &o) {
  if (llvm::Error err = checkSources(o))
    return err;
  if (llvm::Error err = claimCSVOut(o))
    return err;
  auto job = prepareJob(o);
  if (!job)
    return job.takeError();
  if (o.compare) {
    printComparison(job->graph, o, job->stages, job->ranks, job->costs,
                    job->described, llvm::outs());
    llvm::outs().flush();
    return 0;
  }
  auto schedule = makeSchedule(o, *job);
  if (!schedule)
    return schedule.takeError();
  auto stats = scheduleStats(*schedule, job->costs);
  if (!stats)
    return stats.takeError();
  if (llvm::Error err = writeCSVOut(o, *schedule))
    return err;
  printReport(*schedule, *stats, job->described, llvm::outs());
  return 0;
}

Command addScheduleCommand(CLI::App &parent) {
  auto o = std::make_shared<ScheduleOptions>();
  CLI::App *app = parent.add_subcommand(
      "schedule", "Build a training schedule, check it and print its grid");
  app->footer(
      "Builds the training schedule NAME for a chain of --stages stages (or "
      "the stages and edges of --manifest) on the schedule's placement (loop, "
      "or v for zbv and dualpipev; --placement overrides it) and "
      "--microbatches microbatches, "
      "simulates it (no deadlock, every action after its inputs, every F "
      "and B, or I and W, exactly once) and prints one row per rank. A "
      "column is one time step of a unit-time run (F=1, B=2, I=1, W=1, "
      "communication free); a cell is the compute action STAGE{F|B|I|W}MB "
      "(0F1 = stage 0's forward of microbatch 1) or '.' when idle. Then: "
      "each stage's peak of microbatches whose activations are held "
      "(forward done, B or W not yet); the bubble (idle share of all ranks' "
      "time) of the same run with --costs; each rank's peak activations and "
      "messages sent per step. --compare prints one row per schedule "
      "instead. --csv writes the actions as torch.distributed.pipelining's "
      "CSV (--csv-format compute_only or compute_comms, one row per rank); "
      "--from-csv reads either layout instead of building a schedule, each "
      "stage on the rank of the row that runs it. See docs/schedules.md.");
  app->add_option("--schedule", o->schedule,
                  scheduleChoicesHelp(/*inference=*/false))
      ->type_name("NAME")
      ->check(scheduleValidator(/*inference=*/false, /*storeKind=*/false));
  app->add_flag("--compare", o->compare,
                "Simulate every schedule and print one row each: makespan, "
                "bubble, peak activations (most on a rank), messages");
  std::vector<std::string> styles;
  for (llvm::StringRef name : placementStyleNames())
    styles.push_back(name.str());
  app->add_option("--placement", o->placement,
                  "Which rank runs which stage (default: the schedule's): " +
                      placementChoicesHelp())
      ->type_name("STYLE")
      ->check(CLI::IsMember(styles));
  app->add_option("--stages", o->stages,
                  "Number of pipeline stages (default: the manifest's)")
      ->transform(intInRange(1, kMaxGridStages));
  app->add_option("--microbatches", o->microbatches, "Microbatches per batch")
      ->required()
      ->transform(intInRange(1, kMaxGridMicrobatches));
  app->add_option("--ranks", o->ranks,
                  "Ranks (default: one per stage, one per two stages for zbv "
                  "and dualpipev); --stages must be a multiple of it")
      ->transform(intInRange(1, kMaxGridStages));
  app->add_option("--manifest", o->manifest,
                  "Schedule the stages and edges of this manifest (skip "
                  "connections included), with its predicted stage costs")
      ->type_name("FILE")
      ->check(pathOption());
  app->add_option("--costs", o->costs,
                  "F,I,W: how long a stage's forward, input gradients and "
                  "weight gradients take (a whole backward B is I+W); one for "
                  "every stage or one per stage (default 1,1,1)")
      ->type_name("F,I,W ...")
      ->expected(1, kMaxGridStages);
  app->add_option("--csv", o->csvOut,
                  "Write the schedule to FILE as PyTorch's CSV")
      ->type_name("FILE")
      ->check(pathOption());
  app->add_option("--csv-format", o->csvFormat,
                  "The layout --csv writes: compute_only (compute actions) or "
                  "compute_comms (with SEND/RECV and WAIT_SEND)")
      ->check(CLI::IsMember({"compute_only", "compute_comms"}))
      ->default_str("compute_only");
  app->add_option("--from-csv", o->csvIn,
                  "Read the schedule from FILE (PyTorch's compute_only or "
                  "compute_comms CSV) instead of building it (no --schedule)")
      ->type_name("FILE")
      ->check(pathOption());
  return {app, [o] { return runSchedule(*o); }};
}

} // namespace ppc
