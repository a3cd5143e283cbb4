//===- tools/ppc/serve/Completion.cpp - One completion request ------------===//
//
// This file implements Completion.h: a request body read field by field
// with llvm::json, each field checked against its rule, and the rounds
// written and read as JSON.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/serve/Completion.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "lib/SafeRead.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <tuple>

namespace ppc::serve {

namespace {

/// The deepest nesting of arrays and objects a body or a round may have.
constexpr unsigned kMaxDepth = 16;

llvm::Error fieldError(llvm::StringRef field, llvm::StringRef must) {
  return makeError(llvm::formatv("'{0}' must be {1}", field, must).str());
}

/// An integer field within `rule`, when present.
llvm::Error readInteger(const llvm::json::Object &o, llvm::StringRef field,
                        const IntegerRule &rule, int64_t &value) {
  const llvm::json::Value *v = o.get(field);
  if (!v || v->kind() == llvm::json::Value::Null)
    return llvm::Error::success();
  llvm::Optional<int64_t> n = v->getAsInteger();
  if (!n || !rule.problem(*n).empty())
    return fieldError(field, rule.phrase());
  value = *n;
  return llvm::Error::success();
}

/// A number field within `rule`, when present.
llvm::Error readNumber(const llvm::json::Object &o, llvm::StringRef field,
                       const RealRule &rule, double &value) {
  const llvm::json::Value *v = o.get(field);
  if (!v || v->kind() == llvm::json::Value::Null)
    return llvm::Error::success();
  llvm::Optional<double> n = v->getAsNumber();
  if (!n || !rule.problem(*n).empty())
    return fieldError(field, rule.phrase());
  value = *n;
  return llvm::Error::success();
}

/// A token id within the vocabulary.
llvm::Expected<int64_t> readToken(const llvm::json::Value &v,
                                  llvm::StringRef field,
                                  std::optional<int64_t> vocab) {
  llvm::Optional<int64_t> id = v.getAsInteger();
  if (!id)
    return fieldError(field, "an array of token ids (integers) or an array "
                             "of such arrays");
  int64_t hi = vocab ? *vocab - 1 : INT64_MAX;
  if (*id < 0 || *id > hi)
    return makeError(
        vocab ? llvm::formatv("'{0}' has token id {1}, outside the "
                              "vocabulary 0..{2}",
                              field, *id, hi)
                    .str()
              : llvm::formatv("'{0}' has token id {1}, below 0", field, *id)
                    .str());
  return *id;
}

llvm::Error readPrompt(const llvm::json::Object &o, const RequestLimits &l,
                       CompletionRequest &r) {
  const llvm::json::Value *v = o.get("prompt");
  if (!v)
    return makeError("'prompt' is missing");
  const llvm::json::Array *outer = v->getAsArray();
  if (!outer || outer->empty())
    return fieldError("prompt", "a non-empty array of token ids or an array "
                                "of such arrays");
  bool nested = (*outer)[0].getAsArray() != nullptr;
  std::vector<const llvm::json::Array *> rows;
  if (nested)
    for (const llvm::json::Value &row : *outer)
      rows.push_back(row.getAsArray());
  else
    rows.push_back(outer);
  if (static_cast<int64_t>(rows.size()) > l.maxSequences)
    return makeError(llvm::formatv("'prompt' holds {0} sequences; at most {1}",
                                   rows.size(), l.maxSequences)
                         .str());
  for (const llvm::json::Array *row : rows) {
    if (!row || row->empty())
      return fieldError("prompt", "a non-empty array of token ids or an "
                                  "array of such arrays");
    if (l.positions && static_cast<int64_t>(row->size()) >= *l.positions)
      return makeError(llvm::formatv("the prompt's {0} tokens leave no room "
                                     "for a new one; the cache holds {1}",
                                     row->size(), *l.positions)
                           .str());
    std::vector<int64_t> ids;
    for (const llvm::json::Value &id : *row) {
      auto token = readToken(id, "prompt", l.vocab);
      if (!token)
        return token.takeError();
      ids.push_back(*token);
    }
    r.prompts.push_back(std::move(ids));
  }
  return llvm::Error::success();
}

} // namespace

int64_t CompletionRequest::promptTokens() const {
  int64_t n = 0;
  for (const std::vector<int64_t> &p : prompts)
    n += static_cast<int64_t>(p.size());
  return n;
}

llvm::Expected<CompletionRequest> parseCompletion(llvm::StringRef body,
                                                  const RequestLimits &l) {
  // Bounded: a body of nested brackets must not exhaust the stack of a
  // recursive parse (a request needs depth 3).
  auto json = parseJSONBounded(body, kMaxDepth, "the body");
  if (!json)
    return json.takeError();
  const llvm::json::Object *o = json->getAsObject();
  if (!o)
    return makeError("the body is not a JSON object");
  CompletionRequest r;
  r.maxTokens = l.defaultMaxTokens;
  r.sampling = l.sampling;
  if (llvm::Error err = readPrompt(*o, l, r))
    return err;
  if (llvm::Error err = readInteger(*o, "max_tokens",
                                    IntegerRule(1, l.maxTokens), r.maxTokens))
    return err;
  SamplingOptions &s = r.sampling;
  if (llvm::Error err =
          readNumber(*o, "temperature", temperatureRule(), s.temperature))
    return err;
  if (!temperatureProblem(s.temperature).empty())
    return fieldError("temperature", "0 or at least " +
                                         formatNumber(kMinTemperature) +
                                         " (1 over the largest float)");
  if (llvm::Error err = readNumber(*o, "top_p", topPRule(), s.topP))
    return err;
  if (llvm::Error err = readInteger(*o, "top_k", topKRule(), s.topK))
    return err;
  int64_t seed = static_cast<int64_t>(s.seed & INT64_MAX);
  if (llvm::Error err =
          readInteger(*o, "seed", IntegerRule(0, INT64_MAX), seed))
    return err;
  s.seed = static_cast<uint64_t>(seed);
  if (const llvm::json::Value *v = o->get("stop_token_ids");
      v && v->kind() != llvm::json::Value::Null) {
    const llvm::json::Array *ids = v->getAsArray();
    if (!ids)
      return fieldError("stop_token_ids", "an array of token ids");
    for (const llvm::json::Value &id : *ids) {
      auto token = readToken(id, "stop_token_ids", l.vocab);
      if (!token)
        return token.takeError();
      r.stopTokenIds.insert(*token);
    }
  }
  if (const llvm::json::Value *v = o->get("stream");
      v && v->kind() != llvm::json::Value::Null) {
    llvm::Optional<bool> stream = v->getAsBoolean();
    if (!stream)
      return fieldError("stream", "true or false");
    r.stream = *stream;
  }
  if (l.positions)
    for (const std::vector<int64_t> &p : r.prompts) {
      int64_t length = static_cast<int64_t>(p.size());
      if (length + r.maxTokens > *l.positions)
        return makeError(llvm::formatv("the prompt's {0} tokens and {1} new "
                                       "ones need {2} positions; the cache "
                                       "holds {3}",
                                       length, r.maxTokens,
                                       length + r.maxTokens, *l.positions)
                             .str());
    }
  return r;
}

std::vector<PlannedItem> planRound(
    const std::vector<std::pair<int64_t, const CompletionRequest *>> &requests,
    int64_t batch) {
  // (length, max_tokens, -1 for greedy rows or the request's number):
  // the rows of one item, in order.
  using Key = std::tuple<size_t, int64_t, int64_t>;
  std::map<Key, PlannedItem> items;
  for (const auto &[id, request] : requests)
    for (size_t row = 0; row < request->prompts.size(); ++row) {
      const std::vector<int64_t> &prompt = request->prompts[row];
      bool greedy = request->sampling.temperature == 0;
      PlannedItem &p =
          items[{prompt.size(), request->maxTokens, greedy ? -1 : id}];
      if (p.owners.empty()) {
        p.item.maxTokens = request->maxTokens;
        p.item.sampling = request->sampling;
      }
      p.item.prompt.push_back(prompt);
      p.owners.push_back({id, static_cast<int64_t>(row)});
    }
  std::vector<PlannedItem> out;
  for (auto &[key, p] : items) {
    while (static_cast<int64_t>(p.item.prompt.size()) % batch != 0)
      p.item.prompt.push_back(p.item.prompt.back());
    out.push_back(std::move(p));
  }
  return out;
}

std::string writeRound(const Round &round) {
  llvm::json::Array items;
  for (const RoundItem &item : round.items) {
    llvm::json::Array prompt;
    for (const std::vector<int64_t> &row : item.prompt)
      prompt.push_back(llvm::json::Array(row));
    const SamplingOptions &s = item.sampling;
    items.push_back(llvm::json::Object{
        {"prompt", std::move(prompt)},
        {"max_tokens", item.maxTokens},
        {"temperature", s.temperature},
        {"top_k", s.topK},
        {"top_p", s.topP},
        // As text: a seed may be above INT64_MAX.
        {"seed", std::to_string(s.seed)},
        {"eos_id", s.eosId},
    });
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::json::Value(
      llvm::json::Object{{"stop", round.stop}, {"items", std::move(items)}});
  return os.str();
}

llvm::Expected<Round> readRound(llvm::StringRef bytes) {
  auto bad = [](llvm::StringRef what) {
    return makeError("round: " + what.str());
  };
  auto json = parseJSONBounded(bytes, kMaxDepth, "round");
  if (!json)
    return json.takeError();
  const llvm::json::Object *o = json->getAsObject();
  llvm::Optional<bool> stop;
  if (o)
    stop = o->getBoolean("stop");
  const llvm::json::Array *items = o ? o->getArray("items") : nullptr;
  if (!stop || !items)
    return bad("expected {\"stop\": bool, \"items\": [...]}");
  Round round;
  round.stop = *stop;
  for (const llvm::json::Value &v : *items) {
    const llvm::json::Object *i = v.getAsObject();
    if (!i)
      return bad("an item is not an object");
    RoundItem item;
    SamplingOptions &s = item.sampling;
    llvm::Optional<int64_t> maxTokens = i->getInteger("max_tokens"),
                            topK = i->getInteger("top_k"),
                            eos = i->getInteger("eos_id");
    llvm::Optional<double> temperature = i->getNumber("temperature"),
                           topP = i->getNumber("top_p");
    llvm::Optional<llvm::StringRef> seed = i->getString("seed");
    const llvm::json::Array *prompt = i->getArray("prompt");
    if (!maxTokens || !topK || !eos || !temperature || !topP || !seed ||
        !prompt || prompt->empty() || seed->getAsInteger(10, s.seed))
      return bad("an item lacks a field or has one out of range");
    item.maxTokens = *maxTokens;
    s.temperature = *temperature;
    s.topK = *topK;
    s.topP = *topP;
    s.eosId = *eos;
    const llvm::json::Array *first = (*prompt)[0].getAsArray();
    for (const llvm::json::Value &r : *prompt) {
      const llvm::json::Array *row = r.getAsArray();
      if (!row || !first || row->size() != first->size())
        return bad("an item's prompt rows differ in length");
      std::vector<int64_t> ids;
      for (const llvm::json::Value &id : *row) {
        llvm::Optional<int64_t> n = id.getAsInteger();
        if (!n)
          return bad("an item's prompt holds a token that is not an integer");
        ids.push_back(*n);
      }
      item.prompt.push_back(std::move(ids));
    }
    round.items.push_back(std::move(item));
  }
  return round;
}

} // namespace ppc::serve
