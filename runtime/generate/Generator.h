//===- runtime/generate/Generator.h - Pipelined decoding --------*- C++ -*-===//
//
// The decoding front end: a rank context (runtime/exec/RankContext.h) whose
// job is autoregressive decoding over a program with state (its stages'
// buffers written in place: a transformer's key/value cache). A prompt of
// B rows runs as G = B / b groups of the program's static batch b; each
// group owns one slot of every stage's state, kept on the stage's rank and
// never sent. The decode schedule (runtime/schedule/Decode.h) feeds the
// prompt one token a step, then the picked tokens, which the last stage's
// rank picks (runtime/generate/Sampler.h) and returns to the ranks that
// read the token input. Boundary metadata is settled as for `ppc run`
// (inferred from the first step, cached, reused).
//
// Internal to libppc_runtime; the installed API is include/ppc/Generator.h.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_GENERATE_GENERATOR_H
#define PPC_RUNTIME_GENERATE_GENERATOR_H

#include "runtime/exec/RunOptions.h"
#include "runtime/generate/Sampler.h"
#include "runtime/link/LaunchEnv.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace ppc {

/// Tokens picked so far in a generate() call, on the collector's rank.
struct GenerateProgress {
  int64_t tokens = 0, total = 0;
  double elapsedMs = 0;
};

/// Why a row's token was its last.
enum class FinishReason {
  None,
  /// It is the end-of-sequence token (SamplingOptions::eosId).
  Stop,
  /// The row reached its request's new tokens.
  Length,
};
/// "stop", "length"; "" for None.
llvm::StringRef finishReasonName(FinishReason reason);

/// One new token of one row, as soon as it is picked (on the collector's
/// rank: GenerateOptions::onToken).
struct PickedToken {
  /// The request (Generator::generate() and submit() number them from 0 in
  /// call order), the row in its prompt, the token's index among the row's
  /// new tokens, and the token.
  int64_t request = 0, row = 0, index = 0, token = 0;
  /// Set on the row's last token.
  FinishReason finish = FinishReason::None;
};

struct GenerateOptions {
  /// The rank options (timeout, link, meta cache, threads, trace, ...).
  /// run.microbatches is not used: the groups follow from the prompt.
  RunOptions run;
  /// Groups of sequences generate()'s prompt must make (0: whatever B / b
  /// is; flush() runs whatever its prompts make).
  int groups = 0;
  SamplingOptions sampling;
  /// The model inputs that carry the token ids and the position.
  std::string tokenInput = "input_ids";
  std::string positionInput = "cache_position";
  /// Prompt tokens fed in one step (chunked prefill): 0 is the most the
  /// program takes (prefillLimit()), capped at the prompt's length; the
  /// prompt goes in as ceil(P / C) chunks, the last one shorter when C does
  /// not divide P. A program whose token input has a static sequence
  /// dimension takes one token a step.
  int64_t prefillChunk = 0;
  /// K: groups in flight at once (continuous batching). The groups of a
  /// call wait in a queue; each of K slots (one copy of every stage's
  /// state) runs them one after another, so that a group starts as soon as
  /// its slot's previous one has picked its last token. 0: every group at
  /// once.
  int slots = 0;
  /// Called on the collector's rank after each pick.
  std::function<void(const GenerateProgress &)> progress;
  /// Called on the collector's rank for each new token of a row as soon as
  /// its group's step picked it, a row's tokens in order; never for a row
  /// after its last token (a row that picked the end token, whose later
  /// tokens are the end token again, or a cancelled request's rows). It
  /// runs on the decoding thread: a slow callback slows the decode.
  std::function<void(const PickedToken &)> onToken;
};

/// What one generate() call took, on this rank.
struct GenerateStats {
  int rank = 0;
  MetaSource metaSource = MetaSource::Inferred;
  bool cacheWritten = false;
  int64_t messagesSent = 0;
  std::string link;
  /// The decode: sequences, groups, prompt length and new tokens (the
  /// longest, when prompts differ), and the prompt tokens fed per prefill
  /// step.
  int64_t sequences = 0, groups = 0, promptTokens = 0, newTokens = 0;
  int64_t prefillChunk = 1;
  /// Slots (groups in flight at once) and the new tokens of every row.
  int64_t slots = 1, generatedTokens = 0;
  /// On the collector's rank: from the end of the start-up agreement until
  /// the first new token of the first group, the mean time between two
  /// picks of one group (a decode step's latency), and the whole call.
  double firstTokenMs = 0, stepMs = 0, totalMs = 0;
  /// This rank's time in its stages' forwards of prompt chunks and of
  /// decode steps, and the bubble: the share of the run (from its first
  /// step to its last) in neither.
  double prefillMs = 0, decodeMs = 0, bubble = 0;
  /// This rank's forwards not run because their group's rows had all
  /// picked the end-of-sequence token (--eos-id).
  int64_t skippedForwards = 0;
  /// Checkpoint bytes this rank's stages read (--weights), when given.
  bool weightsGiven = false;
  uint64_t weightBytes = 0;
  /// New tokens per second of the whole call.
  double tokensPerSecond() const;
  /// "stats: rank=0 meta=inferred sequences=8 groups=4 slots=4
  /// prompt_tokens=5 prefill_chunk=5 new_tokens=6 first_token_ms=.. step_ms=..
  /// total_ms=.. tokens_per_s=.. prefill_ms=.. decode_ms=.. bubble=..
  /// skipped_forwards=.. messages_sent=.. cache_written=1 link=shm", then "
  /// weight_bytes=N" with
  /// --weights, and the process's memory as RunStats::line() gives it
  /// (" peak_rss_mb=.. rss_anon_mb=..")
  std::string line() const;
  /// The same fields as one JSON object (--stats-json), with "command":
  /// "generate".
  llvm::json::Value json() const;
};

class Generator {
public:
  /// Creates this rank's part of a decode job over the manifest at
  /// `manifestPath` (RankContext::create's steps). Errors: RankContext's;
  /// sampling options out of range (checkSamplingOptions); a program
  /// without the named inputs, with inputs besides them, or without state;
  /// negative slots or prefillChunk, a prefillChunk above what the
  /// program takes (prefillLimit()).
  static llvm::Expected<std::unique_ptr<Generator>>
  create(llvm::StringRef manifestPath, const LaunchEnv &env,
         GenerateOptions options);
  ~Generator();

  /// Decodes `newTokens` tokens after each row of `prompt` (int64 [B, P],
  /// the same on every rank). Returns the new tokens, int64 [B, newTokens],
  /// on the collector's rank (outputRank()) and an undefined tensor
  /// elsewhere. Errors, before any work: checkPrompt's and checkTokenRange's
  /// (against the program's batch and vocabulary), newTokens < 1, P +
  /// newTokens beyond the program's cache ("the prompt's 30 tokens and 10
  /// new ones need 40 positions; the program's cache holds 32"), a prompt
  /// of another number of groups than GenerateOptions::groups asks for;
  /// then execute()'s (a lost rank is named).
  llvm::Expected<at::Tensor> generate(const at::Tensor &prompt,
                                      int64_t newTokens);

  /// Serving many prompts: every rank calls submit() and flush() in the
  /// same sequence; next() and cancel() are local.
  ///
  /// Queues `prompt` (as generate() takes it) for `newTokens` tokens,
  /// sampled with `sampling` (default: GenerateOptions::sampling), and
  /// returns its request number (PickedToken::request); the checks run now.
  /// `onToken`, when given, hears this request's tokens instead of
  /// GenerateOptions::onToken (on the collector's rank, as that one).
  /// Errors: generate()'s checks; sampling options out of range
  /// (checkSamplingOptions, against the program's vocabulary), or an eosId
  /// other than GenerateOptions::sampling's ("a request's eosId 3 differs
  /// from the generator's 2": the ranks skip the steps of ended groups by
  /// that one token), before anything is queued.
  llvm::Expected<int64_t>
  submit(const at::Tensor &prompt, int64_t newTokens,
         std::optional<SamplingOptions> sampling = std::nullopt,
         std::function<void(const PickedToken &)> onToken = {});
  /// Decodes the queued prompts together: their groups, whatever their
  /// prompt lengths and newTokens, queue in order for GenerateOptions::slots
  /// slots, so that a group starts as soon as a slot frees and the
  /// pipeline never drains. A row's sampled tokens depend on its row in
  /// its own prompt. Errors: generate()'s; the queue is then dropped.
  llvm::Error flush();
  /// The new tokens of the oldest flushed prompt not returned yet (int64
  /// [rows, newTokens] on the collector's rank, undefined elsewhere), or
  /// nullopt when none is ready.
  std::optional<at::Tensor> next();
  /// Hands outputRank()'s `bytes` to every rank (at most 64 MiB), which
  /// get them in `bytes`: a service that takes requests on one rank tells
  /// the others what to submit. Every rank calls it in the same sequence
  /// with its submit() and flush() calls. Errors: a lost rank (named), a
  /// rank that waited the timeout for them.
  llvm::Error share(std::string &bytes);
  /// Stops the rows of request `request` (submitted or being decoded) at
  /// their next pick: onToken hears of them no more, their tokens from
  /// there on are the end token (0 without one), and, with an end token,
  /// the rest of their groups' steps are skipped on every rank. Safe to call
  /// from another thread while flush() runs; it acts on the collector's
  /// rank, where the picks are. A request already finished is left alone.
  void cancel(int64_t request);

  int rank() const;
  int outputRank() const;
  /// The program's static batch (rows per group), vocabulary and cache
  /// positions (prompt plus new tokens at most this), when the manifest
  /// records them.
  std::optional<int64_t> batchSize() const;
  /// The program's stages.
  int stageCount() const;
  std::optional<int64_t> vocabSize() const;
  std::optional<int64_t> cachePositions() const;
  /// The most prompt tokens one step may feed: 1 unless the token input's
  /// sequence dimension and the position input's length are dynamic, then
  /// the least of their recorded maxima and the cache's positions
  /// (INT64_MAX when none is recorded).
  int64_t prefillLimit() const;
  /// GenerateOptions::sampling, what a request gets unless it says.
  const SamplingOptions &samplingOptions() const;
  const GenerateStats &stats() const;
  /// Prints this rank's actions of the last call's schedule (before any
  /// call, of a one-token decode).
  void printSchedule(llvm::raw_ostream &os) const;
  /// RankContext::finish(): the trace, then a barrier.
  llvm::Error finish();

private:
  struct Impl;
  explicit Generator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  struct Queued {
    at::Tensor prompt;
    int64_t newTokens;
    int64_t id;
    SamplingOptions sampling;
    std::function<void(const PickedToken &)> onToken;
  };
  std::vector<Queued> queue_;
  std::deque<at::Tensor> ready_;
};

} // namespace ppc

#endif // PPC_RUNTIME_GENERATE_GENERATOR_H
