//===- tools/ppc/DecodeFlags.cpp - The flags of a decode ------------------===//
//
// This file implements DecodeFlags: its CLI11 table, and what it copies
// into GenerateOptions and the ranks' agreement.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/DecodeFlags.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "tools/ppc/OptionChecks.h"

#include <cstdlib>

namespace ppc {

namespace {
/// --temperature: 0, or a finite number of at least kMinTemperature
/// (temperatureProblem), the value named as given.
CLI::Validator temperatureOption() {
  CLI::Validator number = numberOption(temperatureRule());
  return CLI::Validator(
      [number](std::string &text) -> std::string {
        std::string given = text;
        if (std::string problem = number(text); !problem.empty())
          return problem;
        if (!temperatureProblem(std::strtod(text.c_str(), nullptr)).empty())
          return printable(given) + " is not 0 or at least " +
                 formatNumber(kMinTemperature) + " (1 over the largest float)";
        return "";
      },
      "0 or >=" + formatNumber(kMinTemperature));
}

void addSamplingOptions(CLI::App &app, SamplingOptions &s) {
  app.add_option("--temperature", s.temperature,
                 "Sample at this temperature (0, the default: greedy, the "
                 "most likely token)")
      ->capture_default_str()
      ->transform(temperatureOption());
  app.add_option("--top-k", s.topK,
                 "Sample among the K most likely tokens (0: all)")
      ->capture_default_str();
  app.add_option("--top-p", s.topP,
                 "Sample among the most likely tokens whose probabilities add "
                 "up to P, in (0, 1]")
      ->capture_default_str();
  app.add_option("--seed", s.seed,
                 "Seed of sampling: a sequence's tokens depend only on the "
                 "seed, its row and its logits, whatever the groups, the "
                 "stages or the ranks")
      ->capture_default_str()
      ->transform(seedOption());
  app.add_option("--eos-id", s.eosId,
                 "The token that ends a sequence: the rest of its row is this "
                 "token, and a group whose rows all ended takes no more "
                 "steps (-1: none)")
      ->capture_default_str();
}
} // namespace

void DecodeFlags::addTo(CLI::App &app) {
  app.add_option("--prefill-chunk", prefillChunk,
                 "C: prompt tokens fed in one step. A program exported with "
                 "a dynamic sequence dimension takes the prompt in chunks "
                 "of C (default: as many as it takes, the whole prompt "
                 "where it fits); one exported for one token a step takes "
                 "C = 1")
      ->default_str("the most the program takes")
      ->transform(intInRange(1, kMaxMicrobatches));
  app.add_option("--slots", slots,
                 "K: groups of b sequences in flight at once (continuous "
                 "batching). The prompts' groups queue; a group starts as "
                 "soon as one of the K leaves, so prompts of any lengths and "
                 "new tokens keep the stages busy without draining. "
                 "Each slot holds one copy of the program's state")
      ->default_str("every group at once")
      ->transform(intInRange(1, kMaxMicrobatches));
  addSamplingOptions(app, sampling);
  app.add_option("--token-input", tokenInput,
                 "The program input that takes the token ids")
      ->capture_default_str();
  app.add_option("--position-input", positionInput,
                 "The program input that takes the position in the cache")
      ->capture_default_str();
}

void DecodeFlags::applyTo(GenerateOptions &options) const {
  options.sampling = sampling;
  options.tokenInput = tokenInput;
  options.positionInput = positionInput;
  options.prefillChunk = prefillChunk;
  options.slots = slots;
  Agreement &record = options.run.agreement;
  record.set("--prefill-chunk", std::to_string(prefillChunk));
  record.set("--slots", std::to_string(slots));
  record.setNumber("--temperature", sampling.temperature);
  record.set("--top-k", std::to_string(sampling.topK));
  record.setNumber("--top-p", sampling.topP);
  record.set("--seed", std::to_string(sampling.seed));
  record.set("--eos-id", std::to_string(sampling.eosId));
  record.set("--token-input", tokenInput);
  record.set("--position-input", positionInput);
}

} // namespace ppc
