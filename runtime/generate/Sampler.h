//===- runtime/generate/Sampler.h - Picks the next tokens -------*- C++ -*-===//
//
// The token sampler of decoding: from a step's logits, one token per
// sequence, greedy or sampled (temperature, top-k, top-p), with
// end-of-sequence handling.
//
// Sampling draws no random numbers from a generator: the uniform number of
// sequence row R at step S is a counter-based hash of (seed, R, S)
// (samplingUniform). A row's token therefore depends only on the seed, R,
// S and that row's logits: the same tokens whatever the number of
// microbatches, the number of stages, the placement, or how rows are
// grouped into calls.
//
// Sampling one row, in double precision:
//   1. z = logits / temperature; w = exp(z - max z) (softmax's weights,
//      left unnormalised: each step below compares sums of them).
//   2. top-k: keep the k largest z; ties at the k-th value keep the lower
//      token ids.
//   3. top-p: order the kept tokens by z descending (ties: lower id first)
//      and keep the shortest prefix whose weight reaches p times the kept
//      weight (at least one token).
//   4. Walk the kept tokens in ascending id order and pick the first whose
//      cumulative weight exceeds u times the kept weight (inverse CDF), u =
//      samplingUniform(seed, R, S); a token of weight 0 is never picked.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_GENERATE_SAMPLER_H
#define PPC_RUNTIME_GENERATE_SAMPLER_H

#include "lib/NumberRules.h"

#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace ppc {

struct SamplingOptions {
  /// 0: greedy (the first maximum, as torch.argmax: a NaN counts as the
  /// maximum); above 0: sample at this temperature.
  double temperature = 0;
  /// Sample among the k most likely tokens; 0: all.
  int64_t topK = 0;
  /// Sample among the most likely tokens whose probability reaches p, in
  /// (0, 1]; 1: all.
  double topP = 1.0;
  /// Any value; the same seed gives the same tokens.
  uint64_t seed = 0;
  /// The token that ends a sequence; -1: none.
  int64_t eosId = -1;
};

/// The rules of the numeric sampling options, which checkSamplingOptions
/// applies and the command line's flags can share: "a finite number of at
/// least 0", "an integer in 0..2147483647 (0: all)", "a number above 0 and
/// at most 1", "an integer in -1..2147483647 (-1: none)". With a
/// vocabulary of V tokens, eosIdRule's upper end is V - 1.
RealRule temperatureRule();
IntegerRule topKRule();
RealRule topPRule();
IntegerRule eosIdRule(std::optional<int64_t> vocab = std::nullopt);

/// The least temperature above 0: logits (float, at most FLT_MAX) divided
/// by a smaller one can overflow even a double's range, and sampling would
/// stop on infinite logits after the whole job had started.
constexpr double kMinTemperature = 1.0 / std::numeric_limits<float>::max();
/// "" when `temperature` keeps temperatureRule() and is 0 or at least
/// kMinTemperature; else temperatureRule()'s problem, or "1e-308 is not 0
/// or at least 2.938736052218037e-39 (1 over the largest float)".
std::string temperatureProblem(double temperature);

/// Checks `options`; with `vocab`, also that eosId is one of its tokens.
/// Errors, an OptionError (lib/Error.h) naming the field: "temperature -1
/// is not a finite number of at least 0" (temperatureProblem), "topK -1 is not
/// an integer in 0..2147483647 (0: all)", "topP 0 is not a number above 0 and
/// at most 1", "eosId 128 is not an integer in -1..127 (-1: none)".
llvm::Error checkSamplingOptions(const SamplingOptions &options,
                                 std::optional<int64_t> vocab = std::nullopt);

/// The uniform number in [0, 1) that sampling uses for sequence row `row`
/// at step `step` (splitmix64 of the three, chained).
double samplingUniform(uint64_t seed, int64_t row, int64_t step);

/// Picks one token per row of `logits` (floating point, [rows, V], or
/// [rows, T, V] whose last position T-1 is used; any device: the rows are
/// copied to the CPU once) under `options` (checked: checkSamplingOptions).
/// Row r is sequence row firstRow + r and `step` counts the caller's steps
/// (the index of the token being picked): both only feed samplingUniform.
///
/// `finished` is the caller's per-group end-of-sequence flags (bool [rows]
/// on the CPU), read and updated when options.eosId >= 0, else untouched:
/// undefined, it starts all false. A finished row gets eosId whatever its
/// logits; a row that picks eosId becomes finished.
///
/// Returns int64 [rows] on the CPU. Errors: "the logits are int64;
/// expected floating point", "the logits are float32[2,3,4,5]; expected
/// [rows, vocab] or [rows, length, vocab] with length and vocab at least
/// 1", "the finished flags are bool[3]; expected bool[2] on the CPU",
/// "eosId 128 is not an integer in -1..127 (-1: none)" (an OptionError);
/// when sampling, "the logits of row 5 at step 3 hold NaN" (or "hold
/// +inf", "are all -inf").
llvm::Expected<at::Tensor> pickTokens(const at::Tensor &logits,
                                      const SamplingOptions &options,
                                      int64_t firstRow, int64_t step,
                                      at::Tensor &finished);

} // namespace ppc

#endif // PPC_RUNTIME_GENERATE_SAMPLER_H
