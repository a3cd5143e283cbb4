//===- fuzz/fuzz_completion.cpp - Fuzz ppc serve's request reader ---------===//
//
// Feeds bytes to parseCompletion, which reads `ppc serve`'s HTTP bodies (from
// anyone who reaches the port), and to readRound, which reads the rounds a
// rank gets from the serving rank. Beyond crashes it checks that:
//   1. an error is one line;
//   2. an accepted request keeps its limits: 1..64 sequences, each non-empty,
//      every id in the vocabulary, prompt plus max_tokens within the cache,
//      the service's end token unchanged;
//   3. its plan covers every row once, in items padded to the batch, and the
//      round of those items reads back as written.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "tools/ppc/serve/Completion.h"

#include <set>
#include <string>

using namespace ppc;
using namespace ppc::serve;

namespace {
constexpr int64_t kVocab = 128, kPositions = 64, kBatch = 3;

void checkOneLine(llvm::Error err) {
  std::string text = llvm::toString(std::move(err));
  if (text.empty() || text.find('\n') != std::string::npos)
    fuzz::fail("an error that is not one line: " + text);
}

void checkAccepted(const CompletionRequest &r, const RequestLimits &l) {
  if (r.prompts.empty() ||
      static_cast<int64_t>(r.prompts.size()) > l.maxSequences)
    fuzz::fail("accepted " + llvm::Twine(r.prompts.size()) + " sequences");
  if (r.sampling.eosId != l.sampling.eosId)
    fuzz::fail("a request changed the end token");
  for (const std::vector<int64_t> &p : r.prompts) {
    if (p.empty() || static_cast<int64_t>(p.size()) + r.maxTokens > kPositions)
      fuzz::fail("accepted a prompt of " + llvm::Twine(p.size()) +
                 " tokens and " + llvm::Twine(r.maxTokens) + " new ones");
    for (int64_t id : p)
      if (id < 0 || id >= kVocab)
        fuzz::fail("accepted token id " + llvm::Twine(id));
  }
  for (int64_t id : r.stopTokenIds)
    if (id < 0 || id >= kVocab)
      fuzz::fail("accepted stop token id " + llvm::Twine(id));
}

void checkPlan(const CompletionRequest &r) {
  std::vector<PlannedItem> items = planRound({{5, &r}}, kBatch);
  std::set<int64_t> rows;
  Round round;
  for (const PlannedItem &p : items) {
    if (p.item.prompt.empty() || p.item.prompt.size() % kBatch != 0 ||
        p.owners.empty() || p.owners.size() > p.item.prompt.size())
      fuzz::fail("an item of " + llvm::Twine(p.item.prompt.size()) +
                 " rows for " + llvm::Twine(p.owners.size()) + " owners");
    for (size_t i = 0; i < p.owners.size(); ++i) {
      auto [request, row] = p.owners[i];
      if (request != 5 || !rows.insert(row).second ||
          p.item.prompt[i] != r.prompts[row])
        fuzz::fail("row " + llvm::Twine(row) + " planned wrong");
    }
    round.items.push_back(p.item);
  }
  if (rows.size() != r.prompts.size())
    fuzz::fail("the plan lost a row");
  auto back = readRound(writeRound(round));
  if (!back)
    fuzz::fail("a written round does not read back: " +
               llvm::toString(back.takeError()));
  if (back->items.size() != round.items.size())
    fuzz::fail("a round read back with another item count");
  for (size_t i = 0; i < round.items.size(); ++i)
    if (back->items[i].prompt != round.items[i].prompt ||
        back->items[i].maxTokens != round.items[i].maxTokens ||
        back->items[i].sampling.seed != round.items[i].sampling.seed)
      fuzz::fail("a round read back different");
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  RequestLimits limits;
  limits.vocab = kVocab;
  limits.positions = kPositions;
  limits.sampling.eosId = 2;
  auto request = parseCompletion(bytes, limits);
  if (!request) {
    checkOneLine(request.takeError());
  } else {
    checkAccepted(*request, limits);
    checkPlan(*request);
  }
  auto round = readRound(bytes);
  if (!round)
    checkOneLine(round.takeError());
  return 0;
}
