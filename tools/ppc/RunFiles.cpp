//===- tools/ppc/RunFiles.cpp - ppc run's files: batches in, outputs out -===//
//
// This file implements runPipelineFiles (see RunFiles.h) over the public
// Pipeline API: what `ppc run` means by its input and output paths (one
// batch, a list of batches, a directory of batch files; --repeat), the
// refusal of an --output that would replace what the run reads, and the
// input root's view of the input shared with every rank.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/RunFiles.h"

#include "lib/Error.h"
#include "lib/Manifest.h"
#include "lib/OutputGuard.h"
#include "lib/TensorIO.h"
#include "runtime/exec/Microbatch.h"
#include "runtime/platform/Duration.h"
#include "runtime/train/Checkpoint.h"
#include "tools/ppc/OutputClaims.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <optional>

namespace ppc {

namespace {
using Clock = SteadyClock;

/// Refuses outputs that would replace what the run reads or keeps (the
/// manifest, its stage files and model, meta caches, the input, the user
/// metadata, the other output) before any work: OutputGuard. A directory
/// input's output is a directory receiving files named after the input's,
/// so it must hold nothing kept. Every rank checks (before meeting the
/// others), so all fail alike and at once.
llvm::Error checkOutputPaths(const RunFilesRequest &request,
                             const RunOptions &options) {
  llvm::StringRef manifestPath = request.manifestPath;
  llvm::StringRef inputPath = request.inputPath;
  llvm::StringRef outputPath = request.outputPath;
  // A rank that does not read inputs may not see them (another host): the
  // output rank checks the form again once the input root has described
  // them.
  bool directory = llvm::sys::fs::is_directory(inputPath);
  if (llvm::sys::fs::exists(inputPath) && llvm::sys::fs::exists(outputPath) &&
      directory != llvm::sys::fs::is_directory(outputPath))
    return makeError("--output '" + outputPath + "' is " +
                     (directory ? "not a directory" : "a directory") +
                     "; the input '" + inputPath + "' is " +
                     (directory ? "one" : "not"));
  OutputGuard guard;
  keepManifestFiles(guard, manifestPath, metaCacheDirOf(options, manifestPath));
  if (directory) {
    guard.keep(inputPath, "the input directory");
    guard.keepMatching(
        inputPath, [](llvm::StringRef name) { return name.endswith(".pt"); },
        "an input file");
  } else {
    guard.keep(inputPath, "the input file");
  }
  guard.keep(options.inputMetaPath, "the --input-meta file");
  // A manifest inside a training checkpoint: no output lands in it.
  OutputClaim output{"--output", outputPath.str(),
                     directory ? OutputClaim::Kind::Directory
                               : OutputClaim::Kind::File};
  output.required = true;
  std::vector<OutputClaim> outputs = {output, {"--trace", options.tracePath}};
  for (const auto &[option, path] : request.extraOutputs)
    outputs.push_back({option, path});
  return claimOutputs(guard, {{manifestPath.str(), "the checkpoint"}}, outputs);
}

/// The samples of one batch's outputs: the rows of the first, or -1 when
/// it has no batch dimension.
int64_t samplesOf(const std::vector<c10::IValue> &outputs) {
  if (outputs.empty() || !outputs.front().isTensor() ||
      outputs.front().toTensor().dim() < 1)
    return -1;
  return outputs.front().toTensor().size(0);
}

/// The forms of a `ppc run` input (docs/runtime.md, "Many batches per
/// launch").
enum class InputForm { Single, List, Directory };

std::optional<InputForm> parseFormName(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<InputForm>>(name)
      .Case("single", InputForm::Single)
      .Case("list", InputForm::List)
      .Case("directory", InputForm::Directory)
      .Default(std::nullopt);
}

llvm::StringRef formName(InputForm form) {
  switch (form) {
  case InputForm::Single:
    return "single";
  case InputForm::List:
    return "list";
  case InputForm::Directory:
    return "directory";
  }
  return "single";
}

/// The input as one rank sees it: its form, its batches, --repeat, and a
/// directory's file names. The input root's is shared with every rank: the
/// output rank needs the form and the names, which it may not be able to
/// read itself, and every rank the number of runs.
struct BatchPlan {
  InputForm form = InputForm::Single;
  int64_t count = 1;
  int64_t repeat = 1;
  std::vector<std::string> names;

  /// "ppc-batches FORM COUNT REPEAT\n" then each name and a NUL (a file
  /// name holds no NUL; it may hold a newline).
  std::string encode() const {
    std::string out = llvm::formatv("ppc-batches {0} {1} {2}\n", formName(form),
                                    count, repeat)
                          .str();
    for (const std::string &name : names) {
      out += name;
      out.push_back('\0');
    }
    return out;
  }

  /// Parses what rank `root` shared, checking what a peer sent before using
  /// it: the output rank names files after `names`.
  static llvm::Expected<BatchPlan> decode(llvm::StringRef bytes, int root) {
    auto bad = [&](llvm::StringRef why) {
      return makeError(llvm::formatv("rank {0} shared a malformed description "
                                     "of the input ({1})",
                                     root, why)
                           .str());
    };
    auto [head, rest] = bytes.split('\n');
    llvm::SmallVector<llvm::StringRef, 4> words;
    head.split(words, ' ');
    BatchPlan plan;
    std::optional<InputForm> form =
        words.size() == 4 && words[0] == "ppc-batches" ? parseFormName(words[1])
                                                       : std::nullopt;
    if (!form || words[2].getAsInteger(10, plan.count) ||
        words[3].getAsInteger(10, plan.repeat))
      return bad("bad header");
    plan.form = *form;
    if (plan.count < 1 || plan.count > kMaxBatches ||
        (plan.form == InputForm::Single && plan.count != 1) ||
        plan.repeat < 1 || plan.repeat > kMaxRepeat)
      return bad("a count out of range");
    while (!rest.empty()) {
      size_t end = rest.find('\0');
      llvm::StringRef name = rest.take_front(end);
      if (end == llvm::StringRef::npos || name.contains('/') ||
          !name.endswith(".pt") ||
          static_cast<int64_t>(plan.names.size()) >= plan.count)
        return bad("a bad file name");
      plan.names.push_back(name.str());
      rest = rest.drop_front(end + 1);
    }
    if (static_cast<int64_t>(plan.names.size()) !=
        (plan.form == InputForm::Directory ? plan.count : 0))
      return bad("the file names do not match the count");
    return plan;
  }

  /// "a list of 3 batches", for messages.
  std::string describe() const {
    switch (form) {
    case InputForm::Single:
      return "one batch";
    case InputForm::List:
      return llvm::formatv("a list of {0} batch{1}", count,
                           count == 1 ? "" : "es");
    case InputForm::Directory:
      return llvm::formatv("a directory of {0} file{1}", count,
                           count == 1 ? "" : "s");
    }
    return "";
  }

  /// Why `other` (another rank's view of the input) differs, or "".
  std::string difference(const BatchPlan &other) const {
    if (form != other.form || count != other.count)
      return describe() + " vs " + other.describe();
    for (size_t b = 0; b < names.size(); ++b)
      if (names[b] != other.names[b])
        return llvm::formatv("file {0} is '{1}' vs '{2}'", b, names[b],
                             other.names[b]);
    return "";
  }

  /// How run errors name batch `b` of repetition `pass` when there are
  /// several: "batch 2 ('c.pt'), repeat 3 of 5"; "" when there is one.
  std::string label(int64_t b, int64_t pass) const {
    if (form == InputForm::Single && repeat == 1)
      return "";
    std::string out;
    if (form != InputForm::Single)
      out = llvm::formatv("batch {0}", b);
    if (form == InputForm::Directory)
      out += " ('" + names[b] + "')";
    if (repeat > 1)
      out += llvm::formatv("{0}repeat {1} of {2}", out.empty() ? "" : ", ",
                           pass + 1, repeat);
    return out;
  }
};

/// The input of a rank that reads model inputs: a single batch or a list
/// is read whole; a directory's files are read as their batches come, so
/// that only one batch is in memory at a time.
struct BatchInput {
  BatchPlan plan;
  std::string path;
  size_t modelInputs = 0;
  /// The model's input names: a file may give the inputs by name.
  std::vector<std::string> names;
  int microbatches = 1;
  /// Single and List: the batches.
  std::vector<std::vector<c10::IValue>> batches;

  /// Checks that `inputs` fit the model and --microbatches, so that a bad
  /// batch of a list fails before the first batch runs.
  llvm::Error check(const std::vector<c10::IValue> &inputs,
                    const llvm::Twine &what) const {
    auto split = splitMicrobatches(inputs, modelInputs, microbatches);
    if (!split)
      return withContext(split.takeError(), what);
    return llvm::Error::success();
  }

  llvm::Expected<std::vector<c10::IValue>> batch(int64_t b) const {
    if (plan.form != InputForm::Directory)
      return batches[b];
    llvm::SmallString<256> file(path);
    llvm::sys::path::append(file, plan.names[b]);
    auto loaded = loadTensors(file, names);
    if (!loaded)
      return loaded.takeError();
    if (llvm::Error err = check(*loaded, "input '" + file + "'"))
      return err;
    return loaded;
  }
};

/// The most bytes a directory's file names may take: they are shared with
/// every rank (Transport::broadcastBytes moves at most 64 MiB).
constexpr size_t kMaxNameBytes = 32 << 20;

/// The regular files (or links to them) of `dir` whose names end in .pt,
/// sorted bytewise. Errors: "cannot read input directory 'd': ...", "input
/// directory 'd' holds no .pt files", more than kMaxBatches of them or of
/// kMaxNameBytes in their names.
llvm::Expected<std::vector<std::string>>
listInputDirectory(llvm::StringRef dir) {
  std::vector<std::string> names;
  size_t bytes = 0;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    llvm::sys::fs::file_status status;
    if (!name.endswith(".pt") || llvm::sys::fs::status(it->path(), status) ||
        !llvm::sys::fs::is_regular_file(status))
      continue;
    bytes += name.size() + 1;
    if (static_cast<int64_t>(names.size()) == kMaxBatches ||
        bytes > kMaxNameBytes)
      return makeError(llvm::formatv("input directory '{0}' holds more than "
                                     "{1} .pt files or {2} MiB of their names",
                                     dir, kMaxBatches, kMaxNameBytes >> 20)
                           .str());
    names.push_back(name.str());
  }
  if (ec)
    return makeError("cannot read input directory '" + dir +
                     "': " + ec.message());
  if (names.empty())
    return makeError("input directory '" + dir + "' holds no .pt files");
  std::sort(names.begin(), names.end());
  return names;
}

/// Opens the input on a rank that reads model inputs.
llvm::Expected<BatchInput> openInput(llvm::StringRef path,
                                     const Pipeline &pipeline,
                                     const RunOptions &options,
                                     int64_t repeat) {
  BatchInput input;
  input.path = path.str();
  input.modelInputs = pipeline.inputCount();
  input.names = pipeline.inputNames();
  input.microbatches = options.microbatches;
  input.plan.repeat = repeat;
  if (llvm::sys::fs::is_directory(path)) {
    auto names = listInputDirectory(path);
    if (!names)
      return names.takeError();
    input.plan.form = InputForm::Directory;
    input.plan.names = std::move(*names);
    input.plan.count = static_cast<int64_t>(input.plan.names.size());
    return input;
  }
  auto loaded = loadInputBatches(path, input.names);
  if (!loaded)
    return loaded.takeError();
  input.batches = std::move(loaded->batches);
  input.plan.count = static_cast<int64_t>(input.batches.size());
  if (!loaded->isList)
    return input;
  input.plan.form = InputForm::List;
  if (input.plan.count > kMaxBatches)
    return makeError(llvm::formatv("input '{0}' holds {1} batches; the limit "
                                   "is {2}",
                                   path, input.plan.count, kMaxBatches)
                         .str());
  for (size_t b = 0; b < input.batches.size(); ++b)
    if (llvm::Error err =
            input.check(input.batches[b],
                        llvm::formatv("input '{0}' batch {1}", path, b).str()))
      return err;
  return input;
}

/// Gives every rank the input root's plan; an input rank that sees another
/// input fails.
llvm::Expected<BatchPlan> sharePlan(Pipeline &pipeline,
                                    const std::optional<BatchInput> &input) {
  std::string bytes = input ? input->plan.encode() : std::string();
  if (llvm::Error err = pipeline.shareFromInputRoot(bytes))
    return err;
  auto plan = BatchPlan::decode(bytes, pipeline.inputRoot());
  if (!plan)
    return plan.takeError();
  if (input) {
    std::string why = input->plan.difference(*plan);
    if (!why.empty())
      return makeError(llvm::formatv("the input on rank {0} differs from the "
                                     "input on rank {1} ({2})",
                                     pipeline.rank(), pipeline.inputRoot(), why)
                           .str());
  }
  return plan;
}

/// Folds one run's stats into the launch's.
void addRun(RunStats &total, const RunStats &run, bool first) {
  if (first) {
    total = run;
    return;
  }
  if (run.metaSource == MetaSource::Inferred)
    total.metaSource = MetaSource::Inferred;
  total.metaMessagesSent += run.metaMessagesSent;
  total.messagesSent += run.messagesSent;
  total.cacheWritten |= run.cacheWritten;
  total.batches += run.batches;
}
/// Step 1, before meeting the other ranks: --repeat is in range and no
/// output replaces what the run reads or keeps.
llvm::Error checkRequest(const RunFilesRequest &request,
                         const RunOptions &options) {
  if (request.repeat < 1 || request.repeat > kMaxRepeat)
    return makeError(llvm::formatv("--repeat {0} is not in 1..{1}",
                                   request.repeat, kMaxRepeat)
                         .str());
  return checkOutputPaths(request, options);
}

/// Step 2: the pipeline, its schedule printed if asked for.
llvm::Expected<std::unique_ptr<Pipeline>>
createPipeline(const RunFilesRequest &request, const LaunchEnv &env,
               const RunOptions &options) {
  auto created = Pipeline::create(request.manifestPath, env, options);
  if (!created)
    return created.takeError();
  if (request.schedule) {
    (*created)->printSchedule(*request.schedule);
    request.schedule->flush();
  }
  return created;
}

/// The input as this rank holds it (where it reads model inputs) and the
/// input root's plan of it.
struct SharedInput {
  std::optional<BatchInput> input;
  BatchPlan plan;
};

/// Step 3: opens the input where this rank reads model inputs, and agrees
/// with every rank on the input root's plan.
llvm::Expected<SharedInput> shareInput(Pipeline &pipeline,
                                       const RunFilesRequest &request,
                                       const RunOptions &options) {
  SharedInput shared;
  if (pipeline.needsInputs()) {
    auto opened =
        openInput(request.inputPath, pipeline, options, request.repeat);
    if (!opened)
      return opened.takeError();
    shared.input = std::move(*opened);
  }
  auto plan = sharePlan(pipeline, shared.input);
  if (!plan)
    return plan.takeError();
  shared.plan = std::move(*plan);
  return shared;
}

/// Step 4, on the output rank: the output has the input root's form (a
/// directory for a directory), and a directory output exists.
llvm::Error prepareOutput(const Pipeline &pipeline, const BatchPlan &plan,
                          llvm::StringRef outputPath) {
  bool directory = plan.form == InputForm::Directory;
  if (llvm::sys::fs::exists(outputPath) &&
      directory != llvm::sys::fs::is_directory(outputPath))
    return makeError("--output '" + outputPath + "' is " +
                     (directory ? "not a directory" : "a directory") +
                     "; the input on rank " +
                     llvm::Twine(pipeline.inputRoot()) + " is " +
                     (directory ? "one" : "not"));
  if (directory)
    if (std::error_code ec = llvm::sys::fs::create_directories(outputPath))
      return makeError("cannot create --output directory '" + outputPath +
                       "': " + ec.message());
  return llvm::Error::success();
}

/// Step 5: runs every batch of every repetition and hands out their
/// outputs: a directory's as files as they come, the others kept for
/// writeOutputs(). The batches flow as one stream of windows
/// (Pipeline::submit), run in the background; a window's outputs come
/// out, batch by batch in order, once it has run.
class BatchRunner {
public:
  BatchRunner(Pipeline &pipeline, const SharedInput &shared,
              llvm::StringRef outputPath, const RunDisplay &display,
              bool writes)
      : pipeline_(pipeline), input_(shared.input), plan_(shared.plan),
        outputPath_(outputPath), display_(display), writes_(writes),
        tuple_(pipeline.outputIsTuple()), start_(Clock::now()),
        progress_(llvm::errs(), writes ? display.progress : ProgressStyle::Off,
                  "batch", "batches", plan_.count * plan_.repeat, start_) {}

  /// Runs the batches; the stats then cover them all.
  llvm::Error run() {
    const int64_t batches = plan_.count * plan_.repeat;
    llvm::Error err = batches == 1 ? runOne() : runStream(batches);
    if (err)
      return err;
    total_.totalMs = msSince(start_);
    progress_.clear();
    return llvm::Error::success();
  }

  /// Step 6, on the output rank: writes the kept outputs of a single batch
  /// or a list.
  llvm::Error writeOutputs() const {
    if (plan_.form == InputForm::List)
      return saveTensorList(outputPath_, kept_, tuple_);
    if (plan_.form == InputForm::Single)
      return saveTensors(outputPath_, kept_.front(), tuple_);
    return llvm::Error::success();
  }

  RunSummary summary() const {
    RunSummary summary;
    summary.stats = total_;
    summary.wroteOutputs = writes_;
    if (writes_)
      summary.samples = progress_.meter().samples();
    return summary;
  }

private:
  /// The inputs of batch `b` (none on a rank that does not read them).
  llvm::Expected<std::vector<c10::IValue>> inputsOf(int64_t b) const {
    if (!input_)
      return std::vector<c10::IValue>();
    return input_->batch(b);
  }

  /// One batch: nothing to stream.
  llvm::Error runOne() {
    auto inputs = inputsOf(0);
    if (!inputs)
      return inputs.takeError();
    auto outputs = pipeline_.run(*inputs);
    if (!outputs) {
      std::string label = plan_.label(0, 0);
      return label.empty() ? outputs.takeError()
                           : withContext(outputs.takeError(), label);
    }
    afterWindow();
    return handOut(std::move(*outputs));
  }

  /// Submits every batch, then flushes; the windows run in the background
  /// meanwhile (submit() waits when two windows are in flight), and the
  /// outputs of those that have run are handed out after each call. After
  /// a failure, the outputs of the windows that completed before it are
  /// handed out first (a directory keeps their files).
  llvm::Error runStream(int64_t batches) {
    for (int64_t k = 0; k <= batches; ++k) {
      llvm::Error err = llvm::Error::success();
      if (k < batches) {
        int64_t pass = k / plan_.count, b = k % plan_.count;
        auto inputs = inputsOf(b);
        err = inputs
                  ? pipeline_.submit(std::move(*inputs), plan_.label(b, pass))
                  : inputs.takeError();
      } else {
        err = pipeline_.flush();
      }
      llvm::Error handed = handOutReady();
      if (err) {
        // The failure is the line to report; an output that could not be
        // written after it is its consequence.
        llvm::consumeError(std::move(handed));
        return err;
      }
      if (handed)
        return handed;
    }
    return llvm::Error::success();
  }

  /// Hands out the outputs of the batches whose window has run.
  llvm::Error handOutReady() {
    bool first = false;
    while (std::optional<std::vector<c10::IValue>> outputs =
               pipeline_.next(&first)) {
      if (first)
        afterWindow();
      if (llvm::Error err = handOut(std::move(*outputs)))
        return err;
    }
    return llvm::Error::success();
  }

  /// Counts a window's stats; after the first, rank 0 prints the
  /// microbatches note (only then, so that a failure stays one line).
  void afterWindow() {
    addRun(total_, pipeline_.stats(), !ranWindow_);
    if (!ranWindow_ && display_.microbatchesNote && pipeline_.rank() == 0) {
      std::string note = display_.microbatchesNote(pipeline_.stageCount());
      if (!note.empty())
        llvm::errs() << note << "\n";
    }
    ranWindow_ = true;
  }

  /// The next batch's outputs: progress, then on the output rank, in the
  /// last repetition, a directory's file or kept for writeOutputs().
  llvm::Error handOut(std::vector<c10::IValue> outputs) {
    int64_t pass = handed_ / plan_.count, b = handed_ % plan_.count;
    ++handed_;
    if (writes_)
      progress_.update(handed_, samplesOf(outputs));
    if (!writes_ || pass + 1 != plan_.repeat)
      return llvm::Error::success();
    if (plan_.form != InputForm::Directory) {
      kept_.push_back(std::move(outputs));
      return llvm::Error::success();
    }
    llvm::SmallString<256> file(outputPath_);
    llvm::sys::path::append(file, plan_.names[b]);
    return saveTensors(file, outputs, tuple_);
  }

  Pipeline &pipeline_;
  const std::optional<BatchInput> &input_;
  const BatchPlan &plan_;
  std::string outputPath_;
  const RunDisplay &display_;
  bool writes_;
  bool tuple_;
  Clock::time_point start_;
  Progress progress_;
  /// The last repetition's outputs, unless written as they come.
  std::vector<std::vector<c10::IValue>> kept_;
  RunStats total_;
  int64_t handed_ = 0;
  bool ranWindow_ = false;
};
} // namespace

llvm::Expected<RunSummary> runPipelineFiles(const RunFilesRequest &request,
                                            const LaunchEnv &env,
                                            const RunOptions &options,
                                            const RunDisplay &display) {
  if (llvm::Error err = checkRequest(request, options))
    return err;
  auto pipeline = createPipeline(request, env, options);
  if (!pipeline)
    return pipeline.takeError();
  auto shared = shareInput(**pipeline, request, options);
  if (!shared)
    return shared.takeError();
  bool writes = env.rank == (*pipeline)->outputRank();
  if (writes)
    if (llvm::Error err =
            prepareOutput(**pipeline, shared->plan, request.outputPath))
      return err;
  BatchRunner runner(**pipeline, *shared, request.outputPath, display, writes);
  if (llvm::Error err = runner.run())
    return err;
  if (writes)
    if (llvm::Error err = runner.writeOutputs())
      return err;
  if (llvm::Error err = (*pipeline)->finish())
    return err;
  return runner.summary();
}

} // namespace ppc
