//===- runtime/generate/Generator.cpp - Pipelined decoding ----------------===//
//
// This file implements Generator (see Generator.h): the program's limits
// read from the manifest, the state slots of this rank's stages, the decode
// microbatches (the prompt's tokens, placeholders for the picked ones, the
// positions), and the collector's picks.
//
//===----------------------------------------------------------------------===//
#include "runtime/generate/Generator.h"
#include "runtime/platform/Duration.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/exec/RankContext.h"
#include "runtime/generate/Prompt.h"
#include "runtime/platform/MemoryMeter.h"
#include "runtime/schedule/Decode.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <map>

namespace ppc {

namespace {
using Clock = SteadyClock;

/// The index of the model input named `name`. Errors: none has it.
llvm::Expected<int> inputNamed(const Manifest &manifest,
                               const std::string &name, llvm::StringRef flag) {
  std::vector<std::string> names;
  for (size_t i = 0; i < manifest.modelInputs.size(); ++i) {
    if (manifest.modelInputs[i].name == name)
      return static_cast<int>(i);
    names.push_back(manifest.modelInputs[i].name);
  }
  return makeError(llvm::formatv("the program has no input named '{0}' (its "
                                 "inputs: {1}); name it with {2}",
                                 name, llvm::join(names, ", "), flag)
                       .str());
}

/// What a decode needs of the program, from its manifest.
struct ProgramLimits {
  /// The static batch (rows of the token input), the vocabulary (the last
  /// dimension of the logits) and the cache's positions, where recorded.
  std::optional<int64_t> batch, vocab, positions;
};

ProgramLimits limitsOf(const Manifest &manifest, int tokenInput) {
  ProgramLimits limits;
  const ModelInput &tokens = manifest.modelInputs[tokenInput];
  if (!tokens.shape.empty() && tokens.shape[0] > 0)
    limits.batch = tokens.shape[0];
  if (!manifest.modelOutputs.empty() &&
      !manifest.modelOutputs[0].isModelInput()) {
    const StageOutput &logits = manifest.output(manifest.modelOutputs[0]);
    if (!logits.shape.empty() && logits.shape.back() > 0)
      limits.vocab = logits.shape.back();
  }
  for (const StageInfo &s : manifest.stages)
    for (const StateTensor &t : s.state)
      if (t.indexDim >= 0)
        limits.positions =
            std::min(limits.positions.value_or(INT64_MAX), t.shape[t.indexDim]);
  return limits;
}

} // namespace

double GenerateStats::tokensPerSecond() const {
  return totalMs > 0 ? sequences * newTokens / (totalMs / 1000) : 0;
}

std::string GenerateStats::line() const {
  return llvm::formatv("stats: rank={0} meta={1} sequences={2} groups={3} "
                       "prompt_tokens={4} new_tokens={5} first_token_ms={6:f3} "
                       "step_ms={7:f3} total_ms={8:f3} tokens_per_s={9:f1} "
                       "messages_sent={10} cache_written={11} link={12}",
                       rank, metaSourceName(metaSource), sequences, groups,
                       promptTokens, newTokens, firstTokenMs, stepMs, totalMs,
                       tokensPerSecond(), messagesSent, cacheWritten ? 1 : 0,
                       link.empty() ? "none" : link)
             .str() +
         (weightsGiven ? " weight_bytes=" + std::to_string(weightBytes)
                       : std::string()) +
         memoryStatsText();
}

llvm::json::Value GenerateStats::json() const {
  return llvm::json::Object{
      {"command", "generate"},
      {"rank", rank},
      {"meta", metaSourceName(metaSource)},
      {"sequences", sequences},
      {"groups", groups},
      {"prompt_tokens", promptTokens},
      {"new_tokens", newTokens},
      {"first_token_ms", firstTokenMs},
      {"step_ms", stepMs},
      {"total_ms", totalMs},
      {"tokens_per_second", tokensPerSecond()},
      {"messages_sent", messagesSent},
      {"cache_written", cacheWritten},
      {"link", link},
      {"weight_bytes", weightsGiven ? llvm::json::Value(weightBytes)
                                    : llvm::json::Value(nullptr)},
      {"peak_rss_bytes", peakResidentBytes()},
  };
}

struct Generator::Impl {
  std::unique_ptr<RankContext> ctx;
  GenerateOptions options;
  GenerateStats stats;
  int tokenInput = 0, positionInput = 0;
  ProgramLimits limits;
  /// The last call's schedule (printSchedule).
  std::optional<Schedule> last;
  /// Per stage of this rank with state: its state's names, their initial
  /// values, and one copy per group (slots[g][i]), allocated for the most
  /// groups a call has had and reset at the start of every call.
  struct StageState {
    std::vector<std::string> names;
    std::vector<at::Tensor> initial;
    std::vector<std::vector<at::Tensor>> slots;
  };
  std::map<int, StageState> state;

  /// The decode of one call, on the collector's rank.
  struct Decode {
    int groups = 1;
    int64_t batch = 1, promptSteps = 1, newTokens = 1;
    at::Tensor out;
    std::vector<at::Tensor> finished;
    std::vector<std::vector<Clock::time_point>> picks;
    int64_t picked = 0;
    Clock::time_point start;
  };

  llvm::Error captureState();
  llvm::Error resetSlots(int groups);
  llvm::Error bindSlot(int stage, int group);
  /// The checks before any work; returns the static batch. `groups`:
  /// also that the prompt makes GenerateOptions::groups groups.
  llvm::Expected<int64_t> checkCall(const at::Tensor &prompt, int64_t newTokens,
                                    bool groups);
  std::vector<std::vector<c10::IValue>> microbatches(const at::Tensor &prompt,
                                                     const Decode &d) const;
  llvm::Expected<at::Tensor> pick(Decode &d, int m,
                                  std::vector<c10::IValue> outputs);
  void finishStats(const Decode &d);
};

llvm::Error Generator::Impl::captureState() {
  for (auto &entry : ctx->stages()) {
    Stage &stage = entry.second;
    const StageInfo &info = ctx->manifest().stages[entry.first];
    if (info.state.empty())
      continue;
    StageState &s = state[entry.first];
    for (const StateTensor &t : info.state) {
      auto initial = torchCall("cannot read state '" + t.name + "'", [&] {
        return stage.executable().tensorAt(t.name).clone();
      });
      if (!initial)
        return initial.takeError();
      s.names.push_back(t.name);
      s.initial.push_back(std::move(*initial));
    }
  }
  return llvm::Error::success();
}

llvm::Error Generator::Impl::resetSlots(int groups) {
  return torchCall("cannot allocate the state of every group", [&] {
    for (auto &[index, s] : state) {
      while (static_cast<int>(s.slots.size()) < groups) {
        std::vector<at::Tensor> slot;
        for (const at::Tensor &t : s.initial)
          slot.push_back(at::empty_like(t));
        s.slots.push_back(std::move(slot));
      }
      for (int g = 0; g < groups; ++g)
        for (size_t i = 0; i < s.initial.size(); ++i)
          s.slots[g][i].copy_(s.initial[i]);
    }
  });
}

llvm::Error Generator::Impl::bindSlot(int stage, int group) {
  auto it = state.find(stage);
  if (it == state.end())
    return llvm::Error::success();
  StageState &s = it->second;
  return torchCall("cannot bind the state of group " + std::to_string(group),
                   [&] {
                     StageExecutable &e = ctx->stages().at(stage).executable();
                     for (size_t i = 0; i < s.names.size(); ++i)
                       e.setBuffer(s.names[i], s.slots[group][i]);
                   });
}

llvm::Expected<int64_t> Generator::Impl::checkCall(const at::Tensor &prompt,
                                                   int64_t newTokens,
                                                   bool groups) {
  if (llvm::Error err = checkOption(
          "maxNewTokens", IntegerRule{1, kMaxMicrobatches}.problem(newTokens)))
    return err;
  int64_t batch = limits.batch.value_or(1);
  if (!limits.batch && options.groups > 0 && prompt.defined() &&
      prompt.dim() == 2 && prompt.size(0) % options.groups == 0)
    batch = std::max<int64_t>(1, prompt.size(0) / options.groups);
  if (llvm::Error err = checkPrompt(prompt, batch))
    return withContext(std::move(err), "--prompt");
  if (limits.vocab)
    if (llvm::Error err = checkTokenRange(prompt, *limits.vocab))
      return withContext(std::move(err), "--prompt");
  int64_t made = prompt.size(0) / batch, length = prompt.size(1);
  if (groups && options.groups > 0 && made != options.groups)
    return makeError(
        llvm::formatv("--microbatches {0} asks for {0} groups, but the "
                      "prompt's {1} rows make {2} of the program's batch {3}",
                      options.groups, prompt.size(0), made, batch)
            .str());
  if (limits.positions && length + newTokens > *limits.positions)
    return makeError(llvm::formatv("the prompt's {0} tokens and {1} new ones "
                                   "need {2} positions; the program's cache "
                                   "holds {3}",
                                   length, newTokens, length + newTokens,
                                   *limits.positions)
                         .str());
  return batch;
}

std::vector<std::vector<c10::IValue>>
Generator::Impl::microbatches(const at::Tensor &prompt, const Decode &d) const {
  std::vector<std::vector<c10::IValue>> out;
  int64_t steps = d.promptSteps + d.newTokens - 1;
  at::Tensor placeholder = at::zeros({d.batch, 1}, at::kLong);
  for (int64_t s = 0; s < steps; ++s)
    for (int g = 0; g < d.groups; ++g) {
      std::vector<c10::IValue> inputs(ctx->manifest().modelInputs.size());
      inputs[tokenInput] =
          s < d.promptSteps
              ? prompt.narrow(0, g * d.batch, d.batch).narrow(1, s, 1).clone()
              : placeholder.clone();
      inputs[positionInput] = at::full({1}, s, at::kLong);
      out.push_back(std::move(inputs));
    }
  return out;
}

llvm::Expected<at::Tensor>
Generator::Impl::pick(Decode &d, int m, std::vector<c10::IValue> outputs) {
  int g = m % d.groups;
  int64_t token = m / d.groups - (d.promptSteps - 1);
  if (outputs.empty() || !outputs[0].isTensor())
    return makeError("the program's first output is not a tensor of logits");
  auto tokens = pickTokens(outputs[0].toTensor(), options.sampling, g * d.batch,
                           token, d.finished[g]);
  if (!tokens)
    return tokens.takeError();
  if (llvm::Error err = torchCall("cannot keep the picked tokens", [&] {
        d.out.narrow(0, g * d.batch, d.batch).select(1, token).copy_(*tokens);
      }))
    return err;
  d.picks[g].push_back(Clock::now());
  d.picked += d.batch;
  if (options.progress)
    options.progress({d.picked, d.out.numel(), msSince(d.start)});
  return *tokens;
}

void Generator::Impl::finishStats(const Decode &d) {
  std::optional<double> first;
  double steps = 0, stepMs = 0;
  for (const std::vector<Clock::time_point> &times : d.picks) {
    if (times.empty())
      continue;
    first = std::min(first.value_or(INFINITY),
                     toMilliseconds(times.front() - d.start));
    stepMs += toMilliseconds(times.back() - times.front());
    steps += static_cast<double>(times.size() - 1);
  }
  stats.firstTokenMs = first.value_or(0);
  stats.stepMs = steps > 0 ? stepMs / steps : 0;
}

Generator::Generator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generator::~Generator() = default;

llvm::Expected<std::unique_ptr<Generator>>
Generator::create(llvm::StringRef manifestPath, const LaunchEnv &env,
                  GenerateOptions options) {
  if (llvm::Error err = checkSamplingOptions(options.sampling))
    return err;
  auto impl = std::make_unique<Impl>();
  auto planner = [&](const Manifest &manifest,
                     int worldSize) -> llvm::Expected<JobPlan> {
    auto tokens = inputNamed(manifest, options.tokenInput, "--token-input");
    if (!tokens)
      return tokens.takeError();
    auto position =
        inputNamed(manifest, options.positionInput, "--position-input");
    if (!position)
      return position.takeError();
    if (manifest.modelInputs.size() != 2 || *tokens == *position)
      return makeError(llvm::formatv("the program takes {0} inputs; ppc "
                                     "generate feeds two, the token ids "
                                     "and the position",
                                     manifest.modelInputs.size())
                           .str());
    if (llvm::none_of(manifest.stages,
                      [](const StageInfo &s) { return !s.state.empty(); }))
      return makeError("the program has no state (no buffer it writes in "
                       "place): ppc generate needs a program that keeps its "
                       "cache, exported as docs/generate.md shows");
    impl->tokenInput = *tokens;
    impl->positionInput = *position;
    auto placement =
        Placement::create(static_cast<int>(manifest.stages.size()), worldSize);
    if (!placement)
      return placement.takeError();
    auto schedule =
        buildDecodeSchedule(manifest, *placement, {1, 1, 1, *tokens});
    if (!schedule)
      return schedule.takeError();
    return JobPlan{std::move(*schedule), std::nullopt};
  };
  auto ctx = RankContext::create(manifestPath, env, options.run, planner);
  if (!ctx)
    return ctx.takeError();
  impl->ctx = std::move(*ctx);
  impl->options = std::move(options);
  impl->stats.rank = env.rank;
  impl->limits = limitsOf(impl->ctx->manifest(), impl->tokenInput);
  if (llvm::Error err = impl->captureState())
    return err;
  return std::unique_ptr<Generator>(new Generator(std::move(impl)));
}

llvm::Expected<at::Tensor> Generator::generate(const at::Tensor &prompt,
                                               int64_t newTokens) {
  return decode(prompt, newTokens, /*checkGroups=*/true);
}

llvm::Expected<at::Tensor> Generator::decode(const at::Tensor &prompt,
                                             int64_t newTokens,
                                             bool checkGroups) {
  Impl &impl = *impl_;
  Clock::time_point start = Clock::now();
  at::NoGradGuard noGrad;
  auto batch = impl.checkCall(prompt, newTokens, checkGroups);
  if (!batch)
    return batch.takeError();
  Impl::Decode d;
  d.batch = *batch;
  d.groups = static_cast<int>(prompt.size(0) / d.batch);
  d.promptSteps = prompt.size(1);
  d.newTokens = newTokens;
  DecodeShape shape{d.groups, static_cast<int>(d.promptSteps),
                    static_cast<int>(newTokens), impl.tokenInput};
  auto schedule =
      buildDecodeSchedule(impl.ctx->manifest(), impl.ctx->placement(), shape);
  if (!schedule)
    return schedule.takeError();
  if (llvm::Error err = impl.resetSlots(d.groups))
    return err;
  RankContext &ctx = *impl.ctx;
  bool collects = ctx.rank() == ctx.placement().outputRank();
  if (collects) {
    d.out =
        at::full({prompt.size(0), newTokens},
                 std::max<int64_t>(impl.options.sampling.eosId, 0), at::kLong);
    d.finished.resize(d.groups);
  }
  // The rank that picks times its picks; every other rank times its first
  // stage's forwards on picked tokens (a decode step reaching it), so that
  // each rank's first_token_ms and step_ms say something.
  d.picks.resize(d.groups);
  const int firstStage =
      ctx.stages().empty() ? -1 : ctx.stages().begin()->first;
  ExecutorStep step;
  step.beforeForward = [&](int stage, int m) {
    if (!collects && stage == firstStage && m / d.groups >= d.promptSteps)
      d.picks[m % d.groups].push_back(Clock::now());
    return impl.bindSlot(stage, m % d.groups);
  };
  step.pick = [&](int m, std::vector<c10::IValue> outputs) {
    return impl.pick(d, m, std::move(outputs));
  };
  Transport &transport = ctx.transport();
  int64_t sentBefore = transport.messagesSent();
  ctx.meta().clearCacheWritten();
  std::vector<std::vector<c10::IValue>> inputs;
  if (ctx.meta().readsInputs())
    inputs = impl.microbatches(prompt, d);
  impl.last = *schedule;
  if (llvm::Error err =
          ctx.prepareSchedule(std::move(inputs), std::move(*schedule), step))
    return err;
  d.start = Clock::now();
  auto done = ctx.execute(step);
  if (!done)
    return done.takeError();
  ctx.finishStep();
  GenerateStats &stats = impl.stats;
  stats.metaSource = ctx.meta().source();
  stats.cacheWritten = ctx.meta().cacheWritten();
  stats.weightsGiven = ctx.options().weights.given();
  stats.weightBytes = ctx.weightBytesRead();
  stats.messagesSent = transport.messagesSent() - sentBefore;
  stats.link = transport.linksUsed();
  stats.sequences = prompt.size(0);
  stats.groups = d.groups;
  stats.promptTokens = d.promptSteps;
  stats.newTokens = newTokens;
  impl.finishStats(d);
  stats.totalMs = msSince(start);
  return d.out;
}

llvm::Error Generator::submit(const at::Tensor &prompt, int64_t newTokens) {
  auto checked = impl_->checkCall(prompt, newTokens, /*groups=*/false);
  if (!checked)
    return checked.takeError();
  queue_.push_back({prompt, newTokens});
  return llvm::Error::success();
}

llvm::Error Generator::flush() {
  std::vector<Queued> queue = std::move(queue_);
  queue_.clear();
  for (size_t first = 0; first < queue.size();) {
    size_t end = first + 1;
    auto same = [&](const Queued &q) {
      return q.newTokens == queue[first].newTokens &&
             q.prompt.size(1) == queue[first].prompt.size(1);
    };
    while (end < queue.size() && same(queue[end]))
      ++end;
    std::vector<at::Tensor> prompts;
    for (size_t i = first; i < end; ++i)
      prompts.push_back(queue[i].prompt);
    auto tokens = decode(at::cat(prompts), queue[first].newTokens,
                         /*checkGroups=*/false);
    if (!tokens)
      return tokens.takeError();
    int64_t row = 0;
    for (size_t i = first; i < end; ++i) {
      int64_t rows = queue[i].prompt.size(0);
      ready_.push_back(tokens->defined() ? tokens->narrow(0, row, rows)
                                         : at::Tensor());
      row += rows;
    }
    first = end;
  }
  return llvm::Error::success();
}

std::optional<at::Tensor> Generator::next() {
  if (ready_.empty())
    return std::nullopt;
  at::Tensor out = std::move(ready_.front());
  ready_.pop_front();
  return out;
}

int Generator::rank() const { return impl_->ctx->rank(); }
int Generator::outputRank() const {
  return impl_->ctx->placement().outputRank();
}
std::optional<int64_t> Generator::batchSize() const {
  return impl_->limits.batch;
}
const GenerateStats &Generator::stats() const { return impl_->stats; }
void Generator::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->last ? *impl_->last : impl_->ctx->schedule(),
                     impl_->ctx->rank(), os);
}
llvm::Error Generator::finish() { return impl_->ctx->finish(); }

} // namespace ppc
