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
#include "lib/OptionName.h"
#include "runtime/exec/RankContext.h"
#include "runtime/generate/Prompt.h"
#include "runtime/link/Collectives.h"
#include "runtime/platform/MemoryMeter.h"
#include "runtime/schedule/Decode.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

namespace ppc {

namespace {
using Clock = SteadyClock;

/// The indices of the token and position inputs. Errors: every problem
/// with the program's inputs in one message, so that a program that
/// cannot decode says so at once rather than one missing input a run:
/// "the program has no input named 'tokens' (--token-input) (its inputs:
/// input_ids, cache_position)", "the program takes 3 inputs; ppc generate
/// feeds two, the token ids and the position (its inputs: a, b, c)".
llvm::Expected<std::pair<int, int>>
decodeInputs(const Manifest &manifest, const GenerateOptions &options) {
  std::vector<std::string> names, missing;
  int tokens = -1, position = -1;
  for (size_t i = 0; i < manifest.modelInputs.size(); ++i) {
    const std::string &name = manifest.modelInputs[i].name;
    names.push_back(name);
    if (name == options.tokenInput)
      tokens = static_cast<int>(i);
    if (name == options.positionInput)
      position = static_cast<int>(i);
  }
  if (tokens < 0)
    missing.push_back("'" + options.tokenInput + "' (" +
                      optionName(Option::TokenInput) + ")");
  if (position < 0)
    missing.push_back("'" + options.positionInput + "' (" +
                      optionName(Option::PositionInput) + ")");
  std::vector<std::string> problems;
  if (!missing.empty())
    problems.push_back(
        llvm::formatv("has no input named {0}", llvm::join(missing, " or "))
            .str());
  if (names.size() != 2 || (tokens >= 0 && tokens == position))
    problems.push_back(llvm::formatv("takes {0} input{1}; ppc generate feeds "
                                     "two, the token ids and the position",
                                     names.size(), names.size() == 1 ? "" : "s")
                           .str());
  if (!problems.empty())
    return makeError("the program " + llvm::join(problems, ", and ") +
                     " (its inputs: " + llvm::join(names, ", ") + ")");
  return std::make_pair(tokens, position);
}

/// "[2, 1]": a recorded shape, a dynamic dimension as "?".
std::string shapeText(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return "no recorded shape";
  std::vector<std::string> dims;
  for (int64_t d : shape)
    dims.push_back(d < 0 ? "?" : std::to_string(d));
  return "[" + llvm::join(dims, ", ") + "]";
}

/// What a decode needs of the program, from its manifest.
struct ProgramLimits {
  /// The static batch (rows of the token input), the vocabulary (the last
  /// dimension of the logits) and the cache's positions, where recorded.
  std::optional<int64_t> batch, vocab, positions;
  /// The most prompt tokens one step takes (Generator::prefillLimit()).
  int64_t prefill = 1;
};

/// The largest size dimension `d` of `in` admits: -1 when it is static
/// (its size is in `shape`), INT64_MAX when it is dynamic without a bound.
int64_t dynamicLimit(const ModelInput &in, size_t d) {
  if (d >= in.shape.size() || in.shape[d] != -1)
    return -1;
  return d < in.maxShape.size() && in.maxShape[d] > 0 ? in.maxShape[d]
                                                      : INT64_MAX;
}

ProgramLimits limitsOf(const Manifest &manifest, int tokenInput,
                       int positionInput) {
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
  // Chunks need [b, S] token ids and S positions, S dynamic in both.
  const ModelInput &positions = manifest.modelInputs[positionInput];
  int64_t length = dynamicLimit(tokens, 1), at = dynamicLimit(positions, 0);
  if (tokens.shape.size() == 2 && positions.shape.size() == 1 && length > 0 &&
      at > 0)
    limits.prefill =
        std::min({length, at, limits.positions.value_or(INT64_MAX)});
  return limits;
}

} // namespace

llvm::StringRef finishReasonName(FinishReason reason) {
  switch (reason) {
  case FinishReason::Stop:
    return "stop";
  case FinishReason::Length:
    return "length";
  case FinishReason::None:
    break;
  }
  return "";
}

double GenerateStats::tokensPerSecond() const {
  return totalMs > 0 ? generatedTokens / (totalMs / 1000) : 0;
}

std::string GenerateStats::line() const {
  return llvm::formatv("stats: rank={0} meta={1} sequences={2} groups={3} "
                       "slots={4} prompt_tokens={5} prefill_chunk={6} "
                       "new_tokens={7} first_token_ms={8:f3} step_ms={9:f3} "
                       "total_ms={10:f3} tokens_per_s={11:f1} "
                       "prefill_ms={12:f3} decode_ms={13:f3} bubble={14:f3} "
                       "skipped_forwards={15} messages_sent={16} "
                       "cache_written={17} link={18}",
                       rank, metaSourceName(metaSource), sequences, groups,
                       slots, promptTokens, prefillChunk, newTokens,
                       firstTokenMs, stepMs, totalMs, tokensPerSecond(),
                       prefillMs, decodeMs, bubble, skippedForwards,
                       messagesSent, cacheWritten ? 1 : 0,
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
      {"slots", slots},
      {"prompt_tokens", promptTokens},
      {"prefill_chunk", prefillChunk},
      {"new_tokens", newTokens},
      {"first_token_ms", firstTokenMs},
      {"step_ms", stepMs},
      {"total_ms", totalMs},
      {"tokens_per_second", tokensPerSecond()},
      {"prefill_ms", prefillMs},
      {"decode_ms", decodeMs},
      {"bubble", bubble},
      {"skipped_forwards", skippedForwards},
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
  /// values, and one copy per slot (slots[k][i]), allocated for the most
  /// slots a call has had; a slot is reset to the initial values before
  /// each group's first step on the stage.
  struct StageState {
    std::vector<std::string> names;
    std::vector<at::Tensor> initial;
    std::vector<std::vector<at::Tensor>> slots;
  };
  std::map<int, StageState> state;

  /// One prompt of a call, its new tokens, request number and sampling.
  struct Request {
    at::Tensor prompt;
    int64_t newTokens = 1;
    int64_t id = 0;
    SamplingOptions sampling;
    /// Its own token callback, else GenerateOptions::onToken.
    std::function<void(const PickedToken &)> onToken;
  };
  /// The next request number (PickedToken::request).
  int64_t nextRequest = 0;
  /// Requests cancel() stopped (any thread).
  std::mutex cancelMutex;
  std::set<int64_t> cancelled;
  bool isCancelled(int64_t id) {
    std::lock_guard<std::mutex> lock(cancelMutex);
    return cancelled.count(id) > 0;
  }
  /// One group of a call: b rows of one request.
  struct Group {
    int request = 0;
    /// The group's first row in its request (the sampler's row numbers).
    int64_t firstRow = 0;
    /// Its prompt rows [b, P], prompt tokens fed per prefill step (its
    /// prompt steps are in the schedule, TokenReturn::Group) and new tokens.
    at::Tensor prompt;
    int64_t chunk = 1, newTokens = 1;
    /// On the collector's rank: its rows of the request's tokens, and the
    /// sampler's finished flags.
    at::Tensor out, finished;
    /// Its picks' times (on other ranks: its decode steps reaching the
    /// rank's first stage).
    std::vector<Clock::time_point> picks;
    /// On the collector's rank: its request was cancelled (cancel()) and
    /// its rows stopped.
    bool cancelled = false;
  };
  /// The decode of one call.
  struct Decode {
    int64_t batch = 1;
    const std::vector<Request> *requests = nullptr;
    std::vector<Group> groups;
    /// Per request, on the collector's rank: int64 [B, N].
    std::vector<at::Tensor> outs;
    /// The schedule's groups and microbatches (last->tokens).
    const TokenReturn *tokens = nullptr;
    int64_t picked = 0, total = 0;
    Clock::time_point start;
  };

  llvm::Error captureState();
  /// Errors: options.slots or prefillChunk negative, prefillChunk above
  /// limits.prefill.
  llvm::Error checkOptions() const;
  /// Allocates `slots` slots of every stage's state.
  llvm::Error allocateSlots(int slots);
  /// Binds microbatch m's slot to `stage`'s buffers, reset first when m
  /// is its group's first step.
  llvm::Error bindSlot(int stage, int m, const TokenReturn &tokens);
  /// The checks before any work; returns the static batch. `groups`:
  /// also that the prompt makes GenerateOptions::groups groups.
  llvm::Expected<int64_t> checkCall(const at::Tensor &prompt, int64_t newTokens,
                                    bool groups);
  /// The call's groups, in request order. Errors: checkCall's.
  llvm::Expected<Decode> plan(const std::vector<Request> &requests,
                              bool checkGroups);
  std::vector<std::vector<c10::IValue>> microbatches(const Decode &d) const;
  llvm::Expected<at::Tensor> pick(Decode &d, int m,
                                  std::vector<c10::IValue> outputs);
  /// Tells r.onToken, else options.onToken, of group g's new tokens (int64
  /// [b] on the CPU,
  /// its rows' token `index`), but for the rows `ended` (bool [b]) before
  /// this pick.
  void tellTokens(const Request &r, const Group &g, int64_t index,
                  const at::Tensor &tokens, const at::Tensor &ended) const;
  /// The stats of a finished call but its time, messages and forwards'
  /// shares (decode() has them).
  void finishStats(const std::vector<Request> &requests, const Decode &d);
  /// Decodes `requests`: their groups queue for options.slots slots.
  llvm::Expected<std::vector<at::Tensor>>
  decode(const std::vector<Request> &requests, bool checkGroups);
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

llvm::Error Generator::Impl::checkOptions() const {
  if (options.slots < 0)
    return makeError(llvm::formatv("slots {0}: expected 0 (every group at "
                                   "once) or more",
                                   options.slots)
                         .str());
  int64_t chunk = options.prefillChunk;
  if (chunk < 0)
    return makeError(
        llvm::formatv("prefillChunk {0}: expected 0 (the most the program "
                      "takes) or more",
                      chunk)
            .str());
  if (chunk <= limits.prefill)
    return llvm::Error::success();
  const Manifest &m = ctx->manifest();
  if (limits.prefill == 1)
    return makeError(
        llvm::formatv("a prefill chunk of {0} tokens needs a program whose "
                      "'{1}' and '{2}' have a dynamic sequence dimension; "
                      "this one takes {3} and {4}, one token a step (export "
                      "it with dynamic_shapes, docs/generate.md)",
                      chunk, m.modelInputs[tokenInput].name,
                      m.modelInputs[positionInput].name,
                      shapeText(m.modelInputs[tokenInput].shape),
                      shapeText(m.modelInputs[positionInput].shape))
            .str());
  return makeError(llvm::formatv("a prefill chunk of {0} tokens is more than "
                                 "the program takes in one step ({1})",
                                 chunk, limits.prefill)
                       .str());
}

llvm::Error Generator::Impl::allocateSlots(int slots) {
  return torchCall("cannot allocate the state of every slot", [&] {
    for (auto &[index, s] : state)
      while (static_cast<int>(s.slots.size()) < slots) {
        std::vector<at::Tensor> slot;
        for (const at::Tensor &t : s.initial)
          slot.push_back(at::empty_like(t));
        s.slots.push_back(std::move(slot));
      }
  });
}

llvm::Error Generator::Impl::bindSlot(int stage, int m,
                                      const TokenReturn &tokens) {
  auto it = state.find(stage);
  if (it == state.end())
    return llvm::Error::success();
  StageState &s = it->second;
  int slot = tokens.slotOf(m);
  bool first = tokens.stepOf(m) == 0;
  return torchCall("cannot bind the state of slot " + std::to_string(slot),
                   [&] {
                     StageExecutable &e = ctx->stages().at(stage).executable();
                     for (size_t i = 0; i < s.names.size(); ++i) {
                       if (first)
                         s.slots[slot][i].copy_(s.initial[i]);
                       e.setBuffer(s.names[i], s.slots[slot][i]);
                     }
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
    return withContext(std::move(err), optionName(Option::Prompt));
  if (limits.vocab)
    if (llvm::Error err = checkTokenRange(prompt, *limits.vocab))
      return withContext(std::move(err), optionName(Option::Prompt));
  int64_t made = prompt.size(0) / batch, length = prompt.size(1);
  if (groups && options.groups > 0 && made != options.groups)
    return makeError(
        llvm::formatv("{4} {0} asks for {0} groups, but the "
                      "prompt's {1} rows make {2} of the program's batch {3}",
                      options.groups, prompt.size(0), made, batch,
                      optionName(Option::Groups))
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

llvm::Expected<Generator::Impl::Decode>
Generator::Impl::plan(const std::vector<Request> &requests, bool checkGroups) {
  Decode d;
  d.requests = &requests;
  int64_t chunk =
      options.prefillChunk > 0 ? options.prefillChunk : limits.prefill;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request &r = requests[i];
    auto batch = checkCall(r.prompt, r.newTokens, checkGroups);
    if (!batch)
      return batch.takeError();
    d.batch = *batch;
    int64_t length = r.prompt.size(1);
    for (int64_t row = 0; row < r.prompt.size(0); row += d.batch) {
      Group g;
      g.request = static_cast<int>(i);
      g.firstRow = row;
      g.prompt = r.prompt.narrow(0, row, d.batch);
      g.chunk = std::min(chunk, length);
      g.newTokens = r.newTokens;
      d.total += d.batch * r.newTokens;
      d.groups.push_back(std::move(g));
    }
  }
  return d;
}

std::vector<std::vector<c10::IValue>>
Generator::Impl::microbatches(const Decode &d) const {
  std::vector<std::vector<c10::IValue>> out;
  at::Tensor placeholder = at::zeros({d.batch, 1}, at::kLong);
  // A group's step s < promptSteps feeds chunk s of its prompt at its
  // positions; step promptSteps + i feeds new token i (its placeholder is
  // replaced by the picked token) at position P + i.
  for (const auto &[group, s] : d.tokens->of) {
    const Group &g = d.groups[group];
    int promptSteps = d.tokens->groups[group].promptSteps;
    int64_t length = g.prompt.size(1);
    std::vector<c10::IValue> inputs(ctx->manifest().modelInputs.size());
    if (s < promptSteps) {
      int64_t begin = s * g.chunk, size = std::min(g.chunk, length - begin);
      inputs[tokenInput] = g.prompt.narrow(1, begin, size).clone();
      inputs[positionInput] = at::arange(begin, begin + size, at::kLong);
    } else {
      inputs[tokenInput] = placeholder.clone();
      inputs[positionInput] =
          at::full({1}, length + s - promptSteps, at::kLong);
    }
    out.push_back(std::move(inputs));
  }
  return out;
}

llvm::Expected<at::Tensor>
Generator::Impl::pick(Decode &d, int m, std::vector<c10::IValue> outputs) {
  Group &g = d.groups[d.tokens->groupOf(m)];
  int64_t token = d.tokens->stepOf(m) - (d.tokens->group(m).promptSteps - 1);
  if (outputs.empty() || !outputs[0].isTensor())
    return makeError("the program's first output is not a tensor of logits");
  const Request &r = (*d.requests)[g.request];
  // A cancelled request's rows end now: with an end token the sampler
  // gives it to them (and the ranks skip their group's later steps).
  if (!g.cancelled && isCancelled(r.id)) {
    g.cancelled = true;
    if (r.sampling.eosId >= 0)
      g.finished = at::ones({d.batch}, at::kBool);
  }
  // A group whose rows all ended: its steps were skipped (zero logits), the
  // sampler gives the end token, and no pick is timed.
  bool ended = g.finished.defined() && g.finished.all().item<bool>();
  // The rows that ended before this pick hear nothing of it.
  bool tell = (r.onToken || options.onToken) && !g.cancelled;
  at::Tensor endedBefore;
  if (tell)
    endedBefore = g.finished.defined() ? g.finished.clone()
                                       : at::zeros({d.batch}, at::kBool);
  auto tokens = pickTokens(outputs[0].toTensor(), r.sampling, g.firstRow, token,
                           g.finished);
  if (!tokens)
    return tokens.takeError();
  if (g.cancelled && r.sampling.eosId < 0)
    tokens->zero_();
  if (llvm::Error err = torchCall("cannot keep the picked tokens", [&] {
        g.out.select(1, token).copy_(*tokens);
      }))
    return err;
  if (!ended)
    g.picks.push_back(Clock::now());
  if (tell)
    tellTokens(r, g, token, *tokens, endedBefore);
  d.picked += d.batch;
  if (options.progress)
    options.progress({d.picked, d.total, msSince(d.start)});
  return *tokens;
}

void Generator::Impl::tellTokens(const Request &r, const Group &g,
                                 int64_t index, const at::Tensor &tokens,
                                 const at::Tensor &ended) const {
  const int64_t *picked = tokens.data_ptr<int64_t>();
  const bool *before = ended.data_ptr<bool>();
  for (int64_t row = 0; row < tokens.numel(); ++row) {
    if (before[row])
      continue;
    PickedToken t;
    t.request = r.id;
    t.row = g.firstRow + row;
    t.index = index;
    t.token = picked[row];
    if (r.sampling.eosId >= 0 && t.token == r.sampling.eosId)
      t.finish = FinishReason::Stop;
    else if (index + 1 == g.newTokens)
      t.finish = FinishReason::Length;
    (r.onToken ? r.onToken : options.onToken)(t);
  }
}

void Generator::Impl::finishStats(const std::vector<Request> &requests,
                                  const Decode &d) {
  stats.metaSource = ctx->meta().source();
  stats.cacheWritten = ctx->meta().cacheWritten();
  stats.weightsGiven = ctx->options().weights.given();
  stats.weightBytes = ctx->weightBytesRead();
  stats.link = ctx->transport().linksUsed();
  stats.sequences = stats.promptTokens = stats.newTokens = 0;
  for (const Request &r : requests) {
    stats.sequences += r.prompt.size(0);
    stats.promptTokens = std::max(stats.promptTokens, r.prompt.size(1));
    stats.newTokens = std::max(stats.newTokens, r.newTokens);
  }
  stats.prefillChunk = 1;
  for (const Group &g : d.groups)
    stats.prefillChunk = std::max(stats.prefillChunk, g.chunk);
  stats.groups = static_cast<int64_t>(d.groups.size());
  stats.slots = d.tokens->slots;
  stats.generatedTokens = d.total;
  std::optional<double> first;
  double steps = 0, stepMs = 0;
  for (const Group &g : d.groups) {
    const std::vector<Clock::time_point> &times = g.picks;
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
    // A program without a cache is no decoder, whatever its inputs: that
    // first, then every problem with the inputs at once.
    if (llvm::none_of(manifest.stages,
                      [](const StageInfo &s) { return !s.state.empty(); }))
      return makeError("the program has no state (no buffer it writes in "
                       "place): ppc generate needs a program that keeps its "
                       "cache, exported as docs/generate.md shows");
    auto inputs = decodeInputs(manifest, options);
    if (!inputs)
      return inputs.takeError();
    auto [tokens, position] = *inputs;
    impl->tokenInput = tokens;
    impl->positionInput = position;
    auto placement =
        Placement::create(static_cast<int>(manifest.stages.size()), worldSize);
    if (!placement)
      return placement.takeError();
    auto schedule = buildDecodeSchedule(manifest, *placement,
                                        DecodeShape::uniform(1, 1, 1, tokens));
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
  impl->limits =
      limitsOf(impl->ctx->manifest(), impl->tokenInput, impl->positionInput);
  if (llvm::Error err = impl->checkOptions())
    return err;
  if (llvm::Error err = impl->captureState())
    return err;
  return std::unique_ptr<Generator>(new Generator(std::move(impl)));
}

llvm::Expected<at::Tensor> Generator::generate(const at::Tensor &prompt,
                                               int64_t newTokens) {
  auto tokens = impl_->decode(
      {{prompt, newTokens, impl_->nextRequest++, impl_->options.sampling, {}}},
      /*checkGroups=*/true);
  if (!tokens)
    return tokens.takeError();
  return tokens->empty() ? at::Tensor() : tokens->front();
}

llvm::Expected<std::vector<at::Tensor>>
Generator::Impl::decode(const std::vector<Request> &requests,
                        bool checkGroups) {
  Clock::time_point start = Clock::now();
  at::NoGradGuard noGrad;
  // A cancel() of these requests means nothing once the call is over.
  auto forgetCancels = llvm::make_scope_exit([&] {
    std::lock_guard<std::mutex> lock(cancelMutex);
    for (const Request &r : requests)
      cancelled.erase(r.id);
  });
  auto planned = plan(requests, checkGroups);
  if (!planned)
    return planned.takeError();
  Decode &d = *planned;
  DecodeShape shape;
  for (const Group &g : d.groups)
    shape.groups.push_back(
        {static_cast<int>((g.prompt.size(1) + g.chunk - 1) / g.chunk),
         static_cast<int>(g.newTokens)});
  shape.slots = options.slots;
  shape.tokenInput = tokenInput;
  auto schedule = buildDecodeSchedule(ctx->manifest(), ctx->placement(), shape);
  if (!schedule)
    return schedule.takeError();
  last = *schedule;
  d.tokens = &*last->tokens;
  if (llvm::Error err = allocateSlots(d.tokens->slots))
    return err;
  bool collects = ctx->rank() == ctx->placement().outputRank();
  if (collects)
    if (llvm::Error err = torchCall("cannot allocate the new tokens", [&] {
          for (const Request &r : requests)
            d.outs.push_back(at::full(
                {r.prompt.size(0), r.newTokens},
                std::max<int64_t>(options.sampling.eosId, 0), at::kLong));
          for (Group &g : d.groups)
            g.out = d.outs[g.request].narrow(0, g.firstRow, d.batch);
        }))
      return err;
  // The rank that picks times its picks; every other rank times its first
  // stage's forwards on picked tokens (a decode step reaching it), so that
  // each rank's first_token_ms and step_ms say something.
  const int firstStage =
      ctx->stages().empty() ? -1 : ctx->stages().begin()->first;
  ExecutorStep step;
  step.tokenRows = d.batch;
  step.endToken = options.sampling.eosId;
  // Each forward's time, as prefill (a prompt chunk) or decode.
  Clock::time_point forwardStart;
  double prefillMs = 0, decodeMs = 0;
  step.beforeForward = [&](int stage, int m) {
    if (!collects && stage == firstStage && d.tokens->fed(m))
      d.groups[d.tokens->groupOf(m)].picks.push_back(Clock::now());
    llvm::Error err = bindSlot(stage, m, *d.tokens);
    forwardStart = Clock::now();
    return err;
  };
  step.afterForward = [&](int, int m) {
    double ms = toMilliseconds(Clock::now() - forwardStart);
    (d.tokens->fed(m) ? decodeMs : prefillMs) += ms;
  };
  step.pick = [&](int m, std::vector<c10::IValue> outputs) {
    return pick(d, m, std::move(outputs));
  };
  Transport &transport = ctx->transport();
  int64_t sentBefore = transport.messagesSent();
  ctx->meta().clearCacheWritten();
  std::vector<std::vector<c10::IValue>> inputs;
  if (ctx->meta().readsInputs())
    inputs = microbatches(d);
  if (llvm::Error err =
          ctx->prepareSchedule(std::move(inputs), std::move(*schedule), step))
    return err;
  d.start = Clock::now();
  auto done = ctx->execute(step);
  if (!done)
    return done.takeError();
  double runMs = msSince(d.start);
  ctx->finishStep();
  stats.prefillMs = prefillMs;
  stats.decodeMs = decodeMs;
  stats.bubble =
      runMs > 0 ? std::clamp(1 - (prefillMs + decodeMs) / runMs, 0.0, 1.0) : 0;
  stats.messagesSent = transport.messagesSent() - sentBefore;
  stats.skippedForwards = done->skippedForwards;
  finishStats(requests, d);
  stats.totalMs = msSince(start);
  if (!collects)
    return std::vector<at::Tensor>();
  return std::move(d.outs);
}

llvm::Expected<int64_t>
Generator::submit(const at::Tensor &prompt, int64_t newTokens,
                  std::optional<SamplingOptions> sampling,
                  std::function<void(const PickedToken &)> onToken) {
  auto checked = impl_->checkCall(prompt, newTokens, /*groups=*/false);
  if (!checked)
    return checked.takeError();
  const SamplingOptions &own = impl_->options.sampling;
  if (sampling) {
    if (llvm::Error err = checkSamplingOptions(*sampling, impl_->limits.vocab))
      return err;
    if (sampling->eosId != own.eosId)
      return makeError(llvm::formatv("a request's eosId {0} differs from the "
                                     "generator's {1}",
                                     sampling->eosId, own.eosId)
                           .str());
  }
  int64_t id = impl_->nextRequest++;
  queue_.push_back(
      {prompt, newTokens, id, sampling.value_or(own), std::move(onToken)});
  return id;
}

llvm::Error Generator::flush() {
  if (queue_.empty())
    return llvm::Error::success();
  std::vector<Impl::Request> requests;
  for (Queued &q : queue_)
    requests.push_back({std::move(q.prompt), q.newTokens, q.id, q.sampling,
                        std::move(q.onToken)});
  queue_.clear();
  auto tokens = impl_->decode(requests, /*checkGroups=*/false);
  if (!tokens)
    return tokens.takeError();
  for (size_t i = 0; i < requests.size(); ++i)
    ready_.push_back(tokens->empty() ? at::Tensor() : (*tokens)[i]);
  return llvm::Error::success();
}

std::optional<at::Tensor> Generator::next() {
  if (ready_.empty())
    return std::nullopt;
  at::Tensor out = std::move(ready_.front());
  ready_.pop_front();
  return out;
}

llvm::Error Generator::share(std::string &bytes) {
  return broadcastBytes(impl_->ctx->transport(), bytes, outputRank(),
                        "the requests of a round");
}

void Generator::cancel(int64_t request) {
  std::lock_guard<std::mutex> lock(impl_->cancelMutex);
  impl_->cancelled.insert(request);
}

int Generator::rank() const { return impl_->ctx->rank(); }
int Generator::outputRank() const {
  return impl_->ctx->placement().outputRank();
}
std::optional<int64_t> Generator::batchSize() const {
  return impl_->limits.batch;
}
int Generator::stageCount() const {
  return static_cast<int>(impl_->ctx->manifest().stages.size());
}
std::optional<int64_t> Generator::vocabSize() const {
  return impl_->limits.vocab;
}
std::optional<int64_t> Generator::cachePositions() const {
  return impl_->limits.positions;
}
int64_t Generator::prefillLimit() const { return impl_->limits.prefill; }
const SamplingOptions &Generator::samplingOptions() const {
  return impl_->options.sampling;
}
const GenerateStats &Generator::stats() const { return impl_->stats; }
void Generator::printSchedule(llvm::raw_ostream &os) const {
  ppc::printSchedule(impl_->last ? *impl_->last : impl_->ctx->schedule(),
                     impl_->ctx->rank(), os);
}
llvm::Error Generator::finish() { return impl_->ctx->finish(); }

} // namespace ppc
