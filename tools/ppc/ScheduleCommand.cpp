//===- tools/ppc/ScheduleCommand.cpp - ppc schedule -----------------------===//
//
// CLI11 wiring for `ppc schedule`: builds (or reads from a CSV file) the
// training schedule of a chain of stages on a placement (loop, v, or the
// CSV's own), simulates it and prints its grid;
// optionally writes its compute actions as PyTorch pipelining's CSV. No
// model is needed: the chain stands for any model split into that many
// stages. All the work is in runtime/Schedule.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/SafeRead.h"
#include "runtime/Schedule.h"
#include "tools/ppc/RuntimeFlags.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>

namespace ppc {

namespace {
struct ScheduleOptions {
  std::string schedule, csvOut, csvIn;
  /// Empty: loop, or the CSV's own with --from-csv.
  std::string placement;
  int stages = 0, microbatches = 0, ranks = 0;
};

/// Large enough for any schedule worth printing, small enough that the
/// grid and the simulation stay instant.
constexpr int kMaxGridStages = 1024;
constexpr int kMaxGridMicrobatches = 1024;
/// A CSV of kMaxGridStages x kMaxGridMicrobatches actions of up to 10 bytes.
constexpr uint64_t kMaxCSVBytes = 64 * kMiB;

/// A chain of `n` stages: stage k's single Tensor output feeds stage k+1,
/// the last stage's is the model output.
Manifest chainManifest(int n) {
  Manifest m;
  m.modelInputs.push_back({"x", ValueKind::Tensor});
  for (int s = 0; s < n; ++s) {
    StageInfo info;
    info.index = s;
    info.file = "stage_" + std::to_string(s) + ".pt";
    StageInput in;
    in.name = "x";
    in.source =
        s == 0 ? ValueRef::fromModelInput(0) : ValueRef::fromStage(s - 1, 0);
    info.inputs.push_back(in);
    StageOutput out;
    out.name = "y";
    if (s + 1 < n)
      out.consumers.push_back(s + 1);
    info.outputs.push_back(out);
    m.stages.push_back(info);
  }
  m.modelOutputs.push_back(ValueRef::fromStage(n - 1, 0));
  return m;
}

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
} // namespace

static llvm::Expected<int> runSchedule(const ScheduleOptions &o) {
  int ranks = o.ranks ? o.ranks : o.stages;
  std::string style = o.placement.empty() ? "loop" : o.placement;
  if (o.csvIn.empty() && o.stages % ranks != 0)
    return makeError(llvm::formatv("--stages {0} is not a multiple of --ranks "
                                   "{1} ({2})",
                                   o.stages, ranks,
                                   style == "loop"
                                       ? llvm::formatv("stage k runs on rank "
                                                       "k mod {0}",
                                                       ranks)
                                             .str()
                                       : "placement " + style)
                         .str());
  if (o.schedule.empty() == o.csvIn.empty())
    return makeError("ppc schedule takes one of --schedule NAME and "
                     "--from-csv FILE");
  if (!o.csvIn.empty() && !o.placement.empty())
    return makeError("ppc schedule --from-csv places the stages as the file "
                     "does; it takes no --placement");
  Manifest manifest = chainManifest(o.stages);

  std::optional<Schedule> schedule;
  if (!o.csvIn.empty()) {
    auto text = readFileBounded(o.csvIn, kMaxCSVBytes, "schedule");
    if (!text)
      return text.takeError();
    llvm::StringRef csv = (*text)->getBuffer();
    auto placement = placementFromCSV(csv, o.stages, ranks, o.csvIn);
    if (!placement)
      return placement.takeError();
    auto read = trainingScheduleFromCSV(manifest, *placement, csv,
                                        o.microbatches, o.csvIn);
    if (!read)
      return read.takeError();
    schedule = std::move(*read);
  } else {
    auto placement = Placement::create(o.stages, ranks, style);
    if (!placement)
      return placement.takeError();
    // The validator accepted the name.
    ScheduleKind kind = *parseScheduleName(o.schedule);
    auto built =
        buildTrainingSchedule(manifest, *placement, kind, o.microbatches);
    if (!built)
      return built.takeError();
    if (llvm::Error err = simulateSchedule(*built))
      return err;
    schedule = std::move(*built);
  }

  if (!o.csvOut.empty()) {
    std::string csv = scheduleToCSV(*schedule);
    if (llvm::Error err =
            writeFileAtomically(o.csvOut, [&](llvm::raw_ostream &os) {
              os << csv;
              return llvm::Error::success();
            }))
      return err;
  }
  printGrid(*schedule, llvm::outs());
  llvm::outs().flush();
  return 0;
}

Command addScheduleCommand(CLI::App &parent) {
  auto o = std::make_shared<ScheduleOptions>();
  CLI::App *app = parent.add_subcommand(
      "schedule", "Build a training schedule, check it and print its grid");
  app->footer(
      "Builds the training schedule NAME for a chain of --stages stages "
      "(placed by --placement, by default stage k on rank k mod --ranks) and "
      "--microbatches microbatches, "
      "simulates it (no deadlock, every action after its inputs, every F "
      "and B, or I and W, exactly once) and prints one row per rank. A "
      "column is one time step of a unit-time run (F=1, B=2, I=1, W=1, "
      "communication free); a cell is the compute action STAGE{F|B|I|W}MB "
      "(0F1 = stage 0's forward of microbatch 1) or '.' when idle. The last "
      "line gives each stage's peak of microbatches whose activations are "
      "held (forward done, B or W not yet). --csv writes the compute actions "
      "as torch.distributed.pipelining's compute_only CSV (one row per "
      "rank); --from-csv reads such a file instead of building a schedule, "
      "each stage on the rank of the row that runs it. "
      "See docs/schedules.md.");
  app->add_option("--schedule", o->schedule,
                  scheduleChoicesHelp(/*inference=*/false))
      ->type_name("NAME")
      ->check(scheduleValidator(/*inference=*/false, /*storeKind=*/false));
  std::vector<std::string> styles;
  for (llvm::StringRef name : placementStyleNames())
    styles.push_back(name.str());
  app->add_option("--placement", o->placement,
                  "Which rank runs which stage (default loop): " +
                      placementChoicesHelp())
      ->type_name("STYLE")
      ->check(CLI::IsMember(styles));
  app->add_option("--stages", o->stages, "Number of pipeline stages")
      ->required()
      ->check(CLI::Range(1, kMaxGridStages));
  app->add_option("--microbatches", o->microbatches, "Microbatches per batch")
      ->required()
      ->check(CLI::Range(1, kMaxGridMicrobatches));
  app->add_option("--ranks", o->ranks,
                  "Ranks (default: one per stage); --stages must be a "
                  "multiple of it")
      ->check(CLI::Range(1, kMaxGridStages));
  app->add_option("--csv", o->csvOut,
                  "Write the compute actions to FILE (PyTorch's compute_only "
                  "CSV layout)")
      ->type_name("FILE");
  app->add_option("--from-csv", o->csvIn,
                  "Read the compute actions from FILE (PyTorch's compute_only "
                  "CSV layout) instead of building them (no --schedule)")
      ->type_name("FILE");
  return {app, [o] { return runSchedule(*o); }};
}

} // namespace ppc
