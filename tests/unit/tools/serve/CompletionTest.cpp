//===- tests/unit/tools/serve/CompletionTest.cpp --------------------------===//
//
// `ppc serve`'s request bodies: OpenAI's fields read and checked, each bad
// body refused with its message; a round's rows planned into items of one
// length padded to the program's batch (greedy rows of many requests
// together, a sampled request's apart); and rounds that read back as
// written (and refuse what another process could garble).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/serve/Completion.h"

#include <gtest/gtest.h>

using namespace ppc;
using namespace ppc::serve;

namespace {

RequestLimits limits() {
  RequestLimits l;
  l.vocab = 128;
  l.positions = 32;
  l.sampling.eosId = 2;
  return l;
}

std::string error(llvm::StringRef body) {
  auto r = parseCompletion(body, limits());
  return r ? "" : llvm::toString(r.takeError());
}

TEST(CompletionTest, ReadsOpenAIFieldsAndKeepsTheServiceEos) {
  auto r = parseCompletion(
      R"({"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 7, "temperature": 0.5,
          "top_p": 0.9, "top_k": 5, "seed": 11, "stop_token_ids": [9, 10],
          "stream": true, "model": "whatever", "n": 1})",
      limits());
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->prompts, (std::vector<std::vector<int64_t>>{{1, 2, 3}, {4, 5}}));
  EXPECT_EQ(r->maxTokens, 7);
  EXPECT_EQ(r->sampling.temperature, 0.5);
  EXPECT_EQ(r->sampling.topP, 0.9);
  EXPECT_EQ(r->sampling.topK, 5);
  EXPECT_EQ(r->sampling.seed, 11u);
  EXPECT_EQ(r->sampling.eosId, 2);
  EXPECT_EQ(r->stopTokenIds, (std::set<int64_t>{9, 10}));
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->promptTokens(), 5);

  auto one = parseCompletion(R"({"prompt": [5, 6]})", limits());
  ASSERT_TRUE(static_cast<bool>(one)) << llvm::toString(one.takeError());
  EXPECT_EQ(one->prompts, (std::vector<std::vector<int64_t>>{{5, 6}}));
  EXPECT_EQ(one->maxTokens, 16);
  EXPECT_FALSE(one->stream);
}

TEST(CompletionTest, RefusesEachBadBodyWithItsMessage) {
  EXPECT_EQ(error("{"),
            "the body is not valid JSON: [1:1, byte=1]: Expected object key");
  EXPECT_EQ(error(std::string(100000, '[')),
            "the body nests deeper than 16 levels");
  EXPECT_EQ(error("[1]"), "the body is not a JSON object");
  EXPECT_EQ(error("{}"), "'prompt' is missing");
  EXPECT_EQ(error(R"({"prompt": "hello"})"),
            "'prompt' must be a non-empty array of token ids or an array of "
            "such arrays");
  EXPECT_EQ(error(R"({"prompt": [1, 500]})"),
            "'prompt' has token id 500, outside the vocabulary 0..127");
  EXPECT_EQ(error(R"({"prompt": [1, -1]})"),
            "'prompt' has token id -1, outside the vocabulary 0..127");
  EXPECT_EQ(error(R"({"prompt": [[1], []]})"),
            "'prompt' must be a non-empty array of token ids or an array of "
            "such arrays");
  EXPECT_EQ(error(R"({"prompt": [1, 2], "max_tokens": 31})"),
            "the prompt's 2 tokens and 31 new ones need 33 positions; the "
            "cache holds 32");
  EXPECT_EQ(error(R"({"prompt": [1], "max_tokens": 0})"),
            "'max_tokens' must be an integer in 1..65536");
  EXPECT_EQ(error(R"({"prompt": [1], "temperature": -1})"),
            "'temperature' must be a finite number of at least 0");
  EXPECT_EQ(error(R"({"prompt": [1], "temperature": 1e-40})"),
            "'temperature' must be 0 or at least 2.938736052218037e-39 (1 "
            "over the largest float)");
  EXPECT_EQ(error(R"({"prompt": [1], "top_p": 0})"),
            "'top_p' must be a number above 0 and at most 1");
  EXPECT_EQ(error(R"({"prompt": [1], "stream": "yes"})"),
            "'stream' must be true or false");
  EXPECT_EQ(error(R"({"prompt": [1], "stop_token_ids": [128]})"),
            "'stop_token_ids' has token id 128, outside the vocabulary 0..127");
}

TEST(CompletionTest, PlansGreedyRowsTogetherAndSampledRowsApart) {
  CompletionRequest a, b, c;
  a.prompts = {{1, 2}, {3}, {4, 5}};
  a.maxTokens = 3;
  b.prompts = {{6, 7}};
  b.maxTokens = 3;
  c.prompts = {{8, 9}, {10, 11}};
  c.maxTokens = 3;
  c.sampling.temperature = 0.5;
  using Owners = std::vector<std::pair<int64_t, int64_t>>;
  std::vector<PlannedItem> items = planRound({{7, &a}, {8, &b}, {9, &c}}, 2);
  ASSERT_EQ(items.size(), 3u);
  // Length 1: a's row 1 alone, padded with itself.
  EXPECT_EQ(items[0].item.prompt,
            (std::vector<std::vector<int64_t>>{{3}, {3}}));
  EXPECT_EQ(items[0].owners, (Owners{{7, 1}}));
  // Length 2, greedy: a's rows 0 and 2 and b's row 0, padded to 4.
  EXPECT_EQ(items[1].item.prompt, (std::vector<std::vector<int64_t>>{
                                      {1, 2}, {4, 5}, {6, 7}, {6, 7}}));
  EXPECT_EQ(items[1].owners, (Owners{{7, 0}, {7, 2}, {8, 0}}));
  EXPECT_EQ(items[1].item.sampling.temperature, 0);
  // Length 2, sampled: c's rows on their own, its sampling with them.
  EXPECT_EQ(items[2].owners, (Owners{{9, 0}, {9, 1}}));
  EXPECT_EQ(items[2].item.sampling.temperature, 0.5);
  for (const PlannedItem &p : items)
    EXPECT_EQ(p.item.maxTokens, 3);
  // Another max_tokens is another item.
  b.maxTokens = 4;
  EXPECT_EQ(planRound({{7, &a}, {8, &b}}, 2).size(), 3u);
}

TEST(CompletionTest, RoundsReadBackAndRefuseGarbledBytes) {
  CompletionRequest r;
  r.prompts = {{1, 2}, {3}};
  r.sampling.seed = UINT64_MAX;
  r.sampling.temperature = 0.7;
  Round round;
  for (PlannedItem &p : planRound({{4, &r}}, 1))
    round.items.push_back(p.item);
  auto back = readRound(writeRound(round));
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_FALSE(back->stop);
  ASSERT_EQ(back->items.size(), 2u);
  EXPECT_EQ(back->items[1].prompt, round.items[1].prompt);
  EXPECT_EQ(back->items[0].sampling.seed, UINT64_MAX);
  EXPECT_EQ(back->items[0].sampling.temperature, 0.7);

  auto stop = readRound(writeRound(Round{true, {}}));
  ASSERT_TRUE(static_cast<bool>(stop)) << llvm::toString(stop.takeError());
  EXPECT_TRUE(stop->stop);

  for (const char *garbled :
       {"", "[]", R"({"stop": false})",
        R"({"stop": false, "items": [{"max_tokens": 1}]})",
        R"({"stop": false, "items": [{"prompt": [[1, 2], [3]], "max_tokens": 1,
            "top_k": 0, "eos_id": -1, "temperature": 0, "top_p": 1,
            "seed": "0"}]})"}) {
    auto round = readRound(garbled);
    EXPECT_FALSE(static_cast<bool>(round)) << garbled;
    if (!round)
      llvm::consumeError(round.takeError());
  }
}

} // namespace
