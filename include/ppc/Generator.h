//===- ppc/Generator.h - Pipelined decoding from a C++ program --*- C++ -*-===//
//
// Part of libppc_runtime's public API (ppc/ppc.h): autoregressive decoding
// with a decoder that `ppc split` cut into stages, as `ppc generate` does
// (docs/generate.md). Each stage keeps its state (the key/value cache of
// its layers) on its rank, one copy per group of sequences; the groups are
// in flight together. Start the program on every rank (`ppc launch
// --nproc-per-node N -- my_program ...`, or torchrun); each rank constructs
// one Generator with the same manifest and options and makes the same
// calls. docs/library.md shows a complete program.
//
// Vocabulary: std types and LibTorch tensors in and out, errors thrown as
// ppc::api::Error (ppc/Error.h). No LLVM header is needed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PUBLIC_GENERATOR_H
#define PPC_PUBLIC_GENERATOR_H

#include "ppc/Error.h"
#include "ppc/Pipeline.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ppc {
class Generator;
} // namespace ppc

namespace ppc::api {

/// One new token of one row, as soon as it is picked (GenerateOptions::
/// onToken, on outputRank()).
struct PickedToken {
  /// The request (generate() and submit() number them from 0 in call
  /// order), the row in its prompt, the token's index among the row's new
  /// tokens, and the token.
  int64_t request = 0, row = 0, index = 0, token = 0;
  /// On the row's last token: "stop" (it is eosId) or "length" (the row
  /// reached its new tokens); else empty.
  std::string finishReason;
};

/// How one request's tokens are drawn (GenerateOptions' fields of the
/// same names).
struct Sampling {
  double temperature = 0;
  int64_t topK = 0;
  double topP = 1.0;
  uint64_t seed = 0;
};

/// How a decode runs; the fields mirror `ppc generate`'s flags.
struct GenerateOptions {
  /// The ranks' options (device, timeout, meta cache, threads, trace);
  /// run.microbatches and run.schedule are not used.
  RunOptions run;
  /// Groups of sequences generate() requires of a prompt (0: B / b, the
  /// prompt's rows over the program's static batch).
  int groups = 0;
  /// 0: greedy. Above 0: sample at this temperature among the topK most
  /// likely tokens (0: all) whose probabilities reach topP, drawn from
  /// `seed`: a sequence's tokens depend only on the seed, its row and its
  /// logits.
  double temperature = 0;
  int64_t topK = 0;
  double topP = 1.0;
  uint64_t seed = 0;
  /// The token that ends a sequence (the rest of its row is this token);
  /// -1: none.
  int64_t eosId = -1;
  /// The program inputs that take the token ids and the position.
  std::string tokenInput = "input_ids";
  std::string positionInput = "cache_position";
  /// Prompt tokens fed in one step (chunked prefill): 0 is the most the
  /// program takes (its token input's dynamic sequence dimension, or 1 for
  /// a program exported with one token a step), capped at the prompt's
  /// length.
  int64_t prefillChunk = 0;
  /// Groups of b sequences in flight at once (continuous batching): the
  /// groups of flush()'s prompts queue, and a group starts as soon as one
  /// leaves. 0: every group at once.
  int slots = 0;
  /// Called on outputRank() for each new token of a row as soon as it is
  /// picked, a row's tokens in order, on the thread that decodes; not
  /// after a row's last token, nor for a cancelled request.
  std::function<void(const PickedToken &)> onToken;
};

/// What one rank did in its last decode, as `ppc generate --stats` says.
struct GenerateStats {
  int rank = 0;
  std::string metaSource = "inferred";
  int64_t sequences = 0, groups = 0, promptTokens = 0, newTokens = 0;
  /// Prompt tokens fed per prefill step, and the slots used.
  int64_t prefillChunk = 1, slots = 1;
  /// On the last stage's rank: time to the first new token, a decode
  /// step's latency (between two picks of one group), the whole decode.
  double firstTokenMs = 0, stepMs = 0, totalMs = 0;
  double tokensPerSecond = 0;
};

class Generator {
public:
  /// Reads this rank's launch from the environment (as Pipeline does),
  /// loads the manifest and this rank's stages and meets the other ranks.
  /// Throws: Pipeline's errors; sampling options out of range ("topP 0 is
  /// not a number above 0 and at most 1"); a program without the named
  /// inputs or without state.
  explicit Generator(const std::string &manifestPath,
                     const GenerateOptions &options = {});
  ~Generator();
  Generator(Generator &&) noexcept;
  Generator &operator=(Generator &&) noexcept;

  /// This process's rank, and the rank whose calls return the tokens.
  int rank() const;
  int outputRank() const;

  /// Decodes `newTokens` tokens after each row of `prompt` (int64 [B, P],
  /// the same on every rank; B a multiple of the program's batch). Returns
  /// int64 [B, newTokens] on outputRank(), an undefined tensor elsewhere.
  /// Throws: a bad prompt ("expected int64 token ids, got float32"), a
  /// cache too short for P + newTokens, a stage's failure, a lost rank.
  at::Tensor generate(const at::Tensor &prompt, int64_t newTokens);

  /// Serving: every rank calls submit() and flush() in the same sequence;
  /// next() and cancel() are local. submit() queues a prompt (checked now),
  /// sampled as `sampling` says (default: the options'), and returns its
  /// request number; flush() decodes the queued ones together, their
  /// groups queued for the slots; next() returns the tokens of the oldest
  /// flushed prompt not returned yet (undefined off outputRank()), or
  /// nullopt. cancel() stops a request's rows at their next pick (onToken
  /// hears no more of them; with an eosId, their groups' later steps are
  /// skipped); it may be called from another thread during flush().
  /// `onToken`, when given, hears this request's tokens instead of
  /// GenerateOptions::onToken.
  int64_t submit(const at::Tensor &prompt, int64_t newTokens,
                 std::optional<Sampling> sampling = std::nullopt,
                 std::function<void(const PickedToken &)> onToken = {});
  void flush();
  std::optional<at::Tensor> next();
  void cancel(int64_t request);

  /// Writes the trace if one is recorded, then waits for every rank.
  void finish();
  GenerateStats stats() const;

private:
  std::unique_ptr<ppc::Generator> impl_;
};

} // namespace ppc::api

#endif // PPC_PUBLIC_GENERATOR_H
