//===- runtime/PublicApi.cpp - libppc_runtime's public API ----------------===//
//
// This file implements the installed headers include/ppc/*.h as a thin
// facade over the internal API the CLI uses (runtime/run/Pipeline.h,
// runtime/train/Trainer.h, runtime/train/TrainData.h, lib/TensorIO.h): option
// names parsed into their kinds, llvm::Error turned into ppc::api::Error with
// the same message, StringRef into std::string. Nothing here decides anything
// the internal API does not.
//
//===----------------------------------------------------------------------===//
#include "ppc/ppc.h"

#include "lib/Error.h"
#include "lib/TensorIO.h"
#include "runtime/exec/LossKind.h"
#include "runtime/generate/Generator.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/platform/MemoryMeter.h"
#include "runtime/run/Pipeline.h"
#include "runtime/schedule/ScheduleKind.h"
#include "runtime/train/OptimizerKind.h"
#include "runtime/train/TrainData.h"
#include "runtime/train/Trainer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <type_traits>

namespace ppc::api {

namespace {
/// Throws `err`'s message (which is one line) as an Error.
[[noreturn]] void raise(llvm::Error err) {
  throw Error(llvm::toString(std::move(err)));
}

void check(llvm::Error err) {
  if (err)
    raise(std::move(err));
}

template <typename T> T take(llvm::Expected<T> value) {
  if (!value)
    raise(value.takeError());
  return std::move(*value);
}

[[noreturn]] void raiseNotOneOf(const std::string &name, const char *field,
                                const std::string &choices) {
  raise(makeOptionError(field, "'" + printable(name) + "' is not " + choices));
}

/// The kind of `all` that `nameOf` calls `name`; else an OptionError on
/// `field` listing their names, as the command line's validators do.
template <typename Kind, size_t N>
Kind kindOf(const std::string &name, const Kind (&all)[N],
            llvm::StringRef (*nameOf)(Kind), const char *field) {
  std::string choices;
  for (size_t i = 0; i < N; ++i) {
    if (nameOf(all[i]) == name)
      return all[i];
    choices += (i == 0       ? ""
                : i + 1 == N ? " or "
                             : ", ") +
               nameOf(all[i]).str();
  }
  raiseNotOneOf(name, field, choices);
}

ppc::RunOptions internalOptions(const RunOptions &o, bool inference) {
  ppc::RunOptions out;
  out.microbatches = o.microbatches;
  std::optional<ScheduleKind> schedule = parseScheduleName(o.schedule);
  if (!schedule || (inference && !scheduleRunsInference(*schedule)))
    raiseNotOneOf(o.schedule, "schedule", scheduleNames(inference));
  out.schedule = *schedule;
  out.device = o.device;
  out.timeout = o.timeout;
  out.useMetaCache = o.useMetaCache;
  out.metaCacheDir = o.metaCacheDir;
  out.inputMetaPath = o.inputMetaPath;
  out.threads = o.threads;
  out.torchLogs = o.torchLogs;
  out.tracePath = o.tracePath;
  out.streamMicrobatches = o.streamMicrobatches;
  out.weights.path = o.weights;
  if (!o.weightsPrefix.empty())
    out.weights.prefix = o.weightsPrefix;
  return out;
}

MetaSource metaSourceOf(const std::string &name) {
  for (MetaSource source :
       {MetaSource::Inferred, MetaSource::Cache, MetaSource::User})
    if (metaSourceName(source) == name)
      return source;
  return MetaSource::Inferred;
}

/// What `printSchedule` of an internal Pipeline or Trainer prints.
template <typename Internal> std::string scheduleOf(const Internal &internal) {
  std::string text;
  llvm::raw_string_ostream os(text);
  internal.printSchedule(os);
  return os.str();
}

ppc::LaunchEnv launchFromEnvironment() {
  return take(ppc::LaunchEnv::fromEnvironment());
}
} // namespace

// Pipeline -----------------------------------------------------------------

std::string RunStats::line() const {
  ppc::RunStats s;
  s.rank = rank;
  s.metaSource = metaSourceOf(metaSource);
  s.metaMessagesSent = metaMessagesSent;
  s.messagesSent = messagesSent;
  s.firstOutputMs = firstOutputMs;
  s.totalMs = totalMs;
  s.cacheWritten = cacheWritten;
  return s.line();
}

Pipeline::Pipeline(const std::string &manifestPath, const RunOptions &options)
    : impl_(take(ppc::Pipeline::create(manifestPath, launchFromEnvironment(),
                                       internalOptions(options, true)))) {}
Pipeline::~Pipeline() = default;
Pipeline::Pipeline(Pipeline &&) noexcept = default;
Pipeline &Pipeline::operator=(Pipeline &&) noexcept = default;

bool Pipeline::needsInputs() const { return impl_->needsInputs(); }
size_t Pipeline::inputCount() const { return impl_->inputCount(); }
std::vector<std::string> Pipeline::inputNames() const {
  return impl_->inputNames();
}
int Pipeline::rank() const { return impl_->rank(); }
int Pipeline::outputRank() const { return impl_->outputRank(); }
bool Pipeline::outputIsTuple() const { return impl_->outputIsTuple(); }

std::vector<c10::IValue> Pipeline::run(const std::vector<c10::IValue> &inputs) {
  return take(impl_->run(inputs));
}

std::vector<c10::IValue>
Pipeline::run(const std::map<std::string, c10::IValue> &inputsByName) {
  std::vector<std::string> names = inputNames();
  for (const auto &[name, value] : inputsByName)
    if (!llvm::is_contained(names, name))
      throw Error("the model takes no input named '" + printable(name) +
                  "' (its inputs: " + llvm::join(names, ", ") + ")");
  std::vector<c10::IValue> inputs;
  for (const std::string &name : names) {
    auto it = inputsByName.find(name);
    if (it == inputsByName.end())
      throw Error("no value for model input '" + name + "'");
    inputs.push_back(it->second);
  }
  return run(inputs);
}

void Pipeline::submit(const std::vector<c10::IValue> &inputs) {
  check(impl_->submit(inputs));
}
void Pipeline::flush() { check(impl_->flush()); }
std::optional<std::vector<c10::IValue>> Pipeline::next() {
  return impl_->next();
}
int Pipeline::windowBatches() const { return impl_->windowBatches(); }
int Pipeline::queuedBatches() const { return impl_->queuedBatches(); }

void Pipeline::finish() { check(impl_->finish()); }

RunStats Pipeline::stats() const {
  const ppc::RunStats &s = impl_->stats();
  RunStats out;
  out.rank = s.rank;
  out.metaSource = metaSourceName(s.metaSource).str();
  out.metaMessagesSent = s.metaMessagesSent;
  out.messagesSent = s.messagesSent;
  out.firstOutputMs = s.firstOutputMs;
  out.totalMs = s.totalMs;
  out.cacheWritten = s.cacheWritten;
  return out;
}

std::string Pipeline::schedule() const { return scheduleOf(*impl_); }

// Generator ----------------------------------------------------------------

namespace {
/// The runtime's token callback that calls `onToken` (none without one).
std::function<void(const ppc::PickedToken &)>
publicTokens(std::function<void(const PickedToken &)> onToken) {
  if (!onToken)
    return {};
  return [onToken = std::move(onToken)](const ppc::PickedToken &t) {
    onToken(
        {t.request, t.row, t.index, t.token, finishReasonName(t.finish).str()});
  };
}

ppc::GenerateOptions internalOptions(const GenerateOptions &o) {
  ppc::GenerateOptions out;
  out.run = internalOptions(o.run, true);
  out.groups = o.groups;
  out.sampling = {o.temperature, o.topK, o.topP, o.seed, o.eosId};
  out.tokenInput = o.tokenInput;
  out.positionInput = o.positionInput;
  out.prefillChunk = o.prefillChunk;
  out.slots = o.slots;
  out.onToken = publicTokens(o.onToken);
  return out;
}
} // namespace

Generator::Generator(const std::string &manifestPath,
                     const GenerateOptions &options)
    : impl_(take(ppc::Generator::create(manifestPath, launchFromEnvironment(),
                                        internalOptions(options)))) {}
Generator::~Generator() = default;
Generator::Generator(Generator &&) noexcept = default;
Generator &Generator::operator=(Generator &&) noexcept = default;

int Generator::rank() const { return impl_->rank(); }
int Generator::outputRank() const { return impl_->outputRank(); }
at::Tensor Generator::generate(const at::Tensor &prompt, int64_t newTokens) {
  return take(impl_->generate(prompt, newTokens));
}
int64_t Generator::submit(const at::Tensor &prompt, int64_t newTokens,
                          std::optional<Sampling> sampling,
                          std::function<void(const PickedToken &)> onToken) {
  std::optional<ppc::SamplingOptions> own;
  if (sampling) {
    own = impl_->samplingOptions();
    own->temperature = sampling->temperature;
    own->topK = sampling->topK;
    own->topP = sampling->topP;
    own->seed = sampling->seed;
  }
  return take(
      impl_->submit(prompt, newTokens, own, publicTokens(std::move(onToken))));
}
void Generator::flush() { check(impl_->flush()); }
std::optional<at::Tensor> Generator::next() { return impl_->next(); }
void Generator::cancel(int64_t request) { impl_->cancel(request); }
void Generator::finish() { check(impl_->finish()); }

GenerateStats Generator::stats() const {
  const ppc::GenerateStats &s = impl_->stats();
  GenerateStats out;
  out.rank = s.rank;
  out.metaSource = metaSourceName(s.metaSource).str();
  out.sequences = s.sequences;
  out.groups = s.groups;
  out.promptTokens = s.promptTokens;
  out.prefillChunk = s.prefillChunk;
  out.slots = s.slots;
  out.newTokens = s.newTokens;
  out.firstTokenMs = s.firstTokenMs;
  out.stepMs = s.stepMs;
  out.totalMs = s.totalMs;
  out.tokensPerSecond = s.tokensPerSecond();
  return out;
}

// Trainer ------------------------------------------------------------------

namespace {
ppc::TrainOptions internalOptions(const TrainOptions &o) {
  ppc::TrainOptions out;
  out.run = internalOptions(o.run, false);
  out.loss = kindOf(o.loss, kAllLossKinds, lossName, "loss");
  out.optimizer =
      kindOf(o.optimizer, kAllOptimizerKinds, optimizerName, "optimizer");
  // Clipping and learning-rate schedules
  out.lrSchedule.kind =
      kindOf(o.lrSchedule, kAllLrScheduleKinds, lrScheduleName, "lr schedule");
  out.lrSchedule.warmupSteps = o.warmupSteps;
  out.lrSchedule.minLr = o.minLr;
  out.lrSchedule.steps = o.steps;
  out.run.precision =
      kindOf(o.precision, kAllPrecisions, precisionName, "precision");
  // The fields of the same name and type.
#define PPC_TRAIN_OPTION(NAME)                                                 \
  static_assert(std::is_same_v<decltype(out.NAME), decltype(o.NAME)>);         \
  out.NAME = o.NAME;
#define PPC_TRAIN_API_OPTION(NAME) PPC_TRAIN_OPTION(NAME)
#include "runtime/train/TrainOptions.def"
  if (o.measureMemory)
    MemoryMeter::install();
  return out;
}
} // namespace

std::string TrainStats::line() const {
  ppc::TrainStats s;
  s.rank = rank;
  s.step = step;
  s.metaSource = metaSourceOf(metaSource);
  s.metaMessagesSent = metaMessagesSent;
  s.messagesSent = messagesSent;
  s.stepMs = stepMs;
  s.peakActivations = peakActivations;
  s.cacheWritten = cacheWritten;
  s.replica = replica;
  s.allReduceMs = allReduceMs;
  s.peakBytes = peakBytes;
  return s.line();
}

Trainer::Trainer(const std::string &manifestPath, const TrainOptions &options)
    : impl_(take(ppc::Trainer::create(manifestPath, launchFromEnvironment(),
                                      internalOptions(options)))) {}
Trainer::~Trainer() = default;
Trainer::Trainer(Trainer &&) noexcept = default;
Trainer &Trainer::operator=(Trainer &&) noexcept = default;

bool Trainer::needsInputs() const { return impl_->needsInputs(); }
bool Trainer::needsTargets() const { return impl_->needsTargets(); }
int Trainer::lossRank() const { return impl_->lossRank(); }
int Trainer::rank() const { return impl_->rank(); }
int Trainer::replica() const { return impl_->replica(); }
int Trainer::replicas() const { return impl_->replicas(); }
size_t Trainer::modelInputCount() const { return impl_->modelInputCount(); }
std::vector<std::string> Trainer::modelInputNames() const {
  return impl_->modelInputNames();
}

double Trainer::step(const std::vector<c10::IValue> &inputs,
                     const at::Tensor &target) {
  return take(impl_->step(inputs, target));
}

double Trainer::evaluate(const std::vector<c10::IValue> &inputs,
                         const at::Tensor &target) {
  return take(impl_->evaluate(inputs, target));
}

std::vector<std::pair<std::string, at::Tensor>>
Trainer::namedParameters() const {
  return impl_->namedParameters();
}

void Trainer::saveGradients(const std::string &path) const {
  check(impl_->saveGradients(path));
}
void Trainer::save(const std::string &dir) { check(impl_->save(dir)); }
// Checkpoints
void Trainer::saveCheckpoint(const std::string &dir, int keep) {
  check(impl_->saveCheckpoint(dir, keep));
}
std::string Trainer::resume(const std::string &dir) {
  return take(impl_->resume(dir));
}
int Trainer::stepsDone() const { return impl_->stepsDone(); }
void Trainer::finish() { check(impl_->finish()); }

TrainStats Trainer::stats() const {
  const ppc::TrainStats &s = impl_->stats();
  TrainStats out;
  out.rank = s.rank;
  out.step = s.step;
  out.metaSource = metaSourceName(s.metaSource).str();
  out.metaMessagesSent = s.metaMessagesSent;
  out.messagesSent = s.messagesSent;
  out.stepMs = s.stepMs;
  out.peakActivations = s.peakActivations;
  out.cacheWritten = s.cacheWritten;
  out.replica = s.replica;
  out.allReduceMs = s.allReduceMs;
  out.peakBytes = s.peakBytes;
  return out;
}

StepRecord Trainer::lastStep() const {
  const ppc::StepRecord &s = impl_->lastStep();
  StepRecord out;
  out.step = s.step;
  out.loss = s.loss;
  out.lr = s.lr;
  out.gradNorm = s.gradNorm;
  out.samples = s.samples;
  out.seconds = s.seconds;
  out.peakBytes = s.peakBytes;
  return out;
}

std::string Trainer::schedule() const { return scheduleOf(*impl_); }

std::string Trainer::scheduleNote() const { return impl_->scheduleNote(); }

// IO -----------------------------------------------------------------------

std::vector<c10::IValue> loadInputs(const std::string &path) {
  return take(loadTensors(path));
}

std::vector<c10::IValue> loadInputs(const std::string &path,
                                    const std::vector<std::string> &names) {
  return take(loadTensors(path, names));
}

void saveOutputs(const std::string &path,
                 const std::vector<c10::IValue> &outputs, bool asTuple) {
  if (!asTuple && outputs.size() != 1)
    throw Error("cannot save " + std::to_string(outputs.size()) +
                " outputs to '" + printable(path) +
                "' as one value; save them as a tuple");
  check(saveTensors(path, outputs, asTuple));
}

static std::vector<TrainingBatch>
publicBatches(std::vector<ppc::TrainingBatch> batches) {
  std::vector<TrainingBatch> out(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    out[i].inputs = std::move(batches[i].inputs);
    out[i].target = std::move(batches[i].target);
  }
  return out;
}

std::vector<TrainingBatch> loadTrainingData(const std::string &path,
                                            size_t modelInputs) {
  return publicBatches(take(ppc::loadTrainingData(path, modelInputs)));
}

std::vector<TrainingBatch>
loadTrainingData(const std::string &path,
                 const std::vector<std::string> &inputNames) {
  return publicBatches(
      take(ppc::loadTrainingData(path, inputNames.size(), inputNames)));
}

} // namespace ppc::api
