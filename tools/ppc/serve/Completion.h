//===- tools/ppc/serve/Completion.h - One completion request ----*- C++ -*-===//
//
// `ppc serve`'s request body, OpenAI's completions fields where they apply
// (docs/serve.md), read from untrusted JSON and checked before anything
// is queued; and the rounds in which the serving rank hands the requests
// it took to every rank of the job.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_SERVE_COMPLETION_H
#define PPC_TOOLS_PPC_SERVE_COMPLETION_H

#include "runtime/generate/Sampler.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ppc::serve {

/// POST /v1/completions's body.
struct CompletionRequest {
  /// Token ids: one sequence or several (`prompt` as [ids] or [[ids], ...]).
  std::vector<std::vector<int64_t>> prompts;
  int64_t maxTokens = 16;
  SamplingOptions sampling;
  /// Tokens that end a sequence besides the service's --eos-id.
  std::set<int64_t> stopTokenIds;
  bool stream = false;
  /// The prompt tokens of all sequences.
  int64_t promptTokens() const;
};

/// The limits a request is checked against.
struct RequestLimits {
  /// The program's vocabulary (ids in 0..vocab-1), when recorded.
  std::optional<int64_t> vocab;
  /// The cache's positions: prompt plus max_tokens at most this, when
  /// recorded.
  std::optional<int64_t> positions;
  /// The most sequences and new tokens one request may ask for.
  int64_t maxSequences = 64, maxTokens = 65536;
  /// Defaults of the fields a request leaves out (sampling.eosId: the
  /// service's end token, which a request cannot change).
  SamplingOptions sampling;
  int64_t defaultMaxTokens = 16;
};

/// Reads and checks a body; fields it does not know are ignored (OpenAI's
/// clients send many). Errors, the message of a 400 reply: "the body is
/// not valid JSON: ...", "the body nests deeper than 16 levels", "the body is
/// not a JSON object", "'prompt' is missing",
/// "'prompt' must be an array of token ids or an array of such arrays",
/// "'prompt' has token id 500, outside the vocabulary 0..127", "the
/// prompt's 30 tokens and 10 new ones need 40 positions; the cache holds
/// 32", "'max_tokens' must be an integer in 1..65536", "'temperature' must
/// be ...", "'stream' must be true or false".
llvm::Expected<CompletionRequest> parseCompletion(llvm::StringRef body,
                                                  const RequestLimits &limits);

/// What every rank submits for one part of a round: rows of one prompt
/// length, padded to a multiple of the program's batch by repeating the
/// last row.
struct RoundItem {
  std::vector<std::vector<int64_t>> prompt;
  int64_t maxTokens = 1;
  SamplingOptions sampling;
};

/// What the serving rank hands every rank: the items to decode now, or
/// the end of the service.
struct Round {
  bool stop = false;
  std::vector<RoundItem> items;
};

/// One item as the serving rank plans it: the item, and per real row (the
/// padding has none) the request and that request's row it carries.
struct PlannedItem {
  RoundItem item;
  std::vector<std::pair<int64_t, int64_t>> owners;
};

/// The items of `requests` (each with its number in the service), their
/// rows grouped by prompt length in order. Greedy rows of one length and
/// max_tokens share items whatever their request, so that sequences from
/// many clients fill the program's batch together; a sampled request's
/// rows of one length are an item of their own, so that a row's draws
/// depend on its place among them (not on other requests).
std::vector<PlannedItem> planRound(
    const std::vector<std::pair<int64_t, const CompletionRequest *>> &requests,
    int64_t batch);

/// A round as bytes, and back. readRound checks everything (the bytes come
/// from another process): "round: ..." errors.
std::string writeRound(const Round &round);
llvm::Expected<Round> readRound(llvm::StringRef bytes);

} // namespace ppc::serve

#endif // PPC_TOOLS_PPC_SERVE_COMPLETION_H
