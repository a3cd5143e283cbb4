//===- runtime/generate/Sampler.cpp - Picks the next tokens ---------------===//
//
// This file implements the token sampler (see Sampler.h): the checks of
// the sampling options and of the logits, greedy picking through
// at::argmax, and the per-row sampling of Sampler.h's four steps.
//
//===----------------------------------------------------------------------===//
#include "runtime/generate/Sampler.h"

#include "lib/Error.h"
#include "runtime/exec/TensorMeta.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace ppc {

namespace {

constexpr int64_t kMaxOptionInt = std::numeric_limits<int32_t>::max();

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// The rows of `logits` at its last position, on the CPU: float64 when
/// sampling (`exact`), else float32 or float64 (both argmax as the original
/// dtype does: the conversion is exact).
llvm::Expected<at::Tensor> lastRows(const at::Tensor &logits, bool exact) {
  if (!logits.defined() || !at::isFloatingType(logits.scalar_type()))
    return makeError(
        "the logits are " +
        (logits.defined() ? dtypeName(logits.scalar_type()) : "undefined") +
        "; expected floating point");
  int64_t dims = logits.dim();
  if ((dims != 2 && dims != 3) || logits.size(-1) < 1 ||
      (dims == 3 && logits.size(1) < 1))
    return makeError("the logits are " + TensorMeta::of(logits).str() +
                     "; expected [rows, vocab] or [rows, length, vocab] with "
                     "length and vocab at least 1");
  return torchCall("cannot read the logits", [&] {
    at::Tensor rows = dims == 3 ? logits.select(1, logits.size(1) - 1) : logits;
    at::ScalarType type =
        exact || logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    return rows.to(at::kCPU, type).contiguous();
  });
}

/// Checks the caller's flags (creating them, all false, when undefined).
llvm::Error prepareFinished(at::Tensor &finished, int64_t rows) {
  if (!finished.defined()) {
    finished = at::zeros({rows}, at::kBool);
    return llvm::Error::success();
  }
  if (finished.scalar_type() != at::kBool || finished.dim() != 1 ||
      finished.size(0) != rows || !finished.device().is_cpu())
    return makeError(llvm::formatv("the finished flags are {0}; expected "
                                   "bool[{1}] on the CPU",
                                   TensorMeta::of(finished).str(), rows)
                         .str());
  return llvm::Error::success();
}

/// Token ids ordered by z descending, ties by id ascending.
struct ByLogit {
  const std::vector<double> &z;
  bool operator()(int64_t a, int64_t b) const {
    return z[a] > z[b] || (z[a] == z[b] && a < b);
  }
};

/// Steps 2 and 3 of Sampler.h: the kept token ids, in no particular order;
/// empty when every token is kept.
std::vector<int64_t> keptTokens(const std::vector<double> &z,
                                const std::vector<double> &w,
                                const SamplingOptions &options) {
  int64_t vocab = int64_t(z.size());
  int64_t k = options.topK > 0 ? std::min(options.topK, vocab) : vocab;
  if (k == vocab && options.topP >= 1)
    return {};
  std::vector<int64_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), ByLogit{z});
  order.resize(k);
  if (options.topP >= 1)
    return order;
  double kept = 0;
  for (int64_t id : order)
    kept += w[id];
  double reached = 0;
  size_t prefix = 0;
  while (prefix < order.size() &&
         (prefix == 0 || reached < options.topP * kept))
    reached += w[order[prefix++]];
  order.resize(prefix);
  return order;
}

/// Step 4: the inverse CDF over `kept` (all tokens when empty) in
/// ascending id order.
int64_t inverseCdf(const std::vector<double> &w, std::vector<int64_t> kept,
                   double u) {
  if (kept.empty()) {
    kept.resize(w.size());
    std::iota(kept.begin(), kept.end(), 0);
  } else {
    std::sort(kept.begin(), kept.end());
  }
  double total = 0;
  for (int64_t id : kept)
    total += w[id];
  double target = u * total;
  double sum = 0;
  int64_t lastPositive = kept.front();
  for (int64_t id : kept) {
    if (w[id] <= 0)
      continue;
    sum += w[id];
    lastPositive = id;
    if (target < sum)
      return id;
  }
  // Rounding can leave u * total at the total itself.
  return lastPositive;
}

/// Samples one row of float64 logits (Sampler.h's steps 1 to 4).
llvm::Expected<int64_t> sampleRow(const double *logits, int64_t vocab,
                                  const SamplingOptions &options, int64_t row,
                                  int64_t step) {
  std::vector<double> z(logits, logits + vocab);
  double top = -std::numeric_limits<double>::infinity();
  for (double &x : z) {
    if (std::isnan(x))
      return makeError(llvm::formatv("the logits of row {0} at step {1} hold "
                                     "NaN",
                                     row, step)
                           .str());
    x /= options.temperature;
    top = std::max(top, x);
  }
  if (std::isinf(top))
    return makeError(llvm::formatv("the logits of row {0} at step {1} {2}", row,
                                   step, top > 0 ? "hold +inf" : "are all -inf")
                         .str());
  std::vector<double> w(vocab);
  for (int64_t id = 0; id < vocab; ++id)
    w[id] = std::exp(z[id] - top);
  return inverseCdf(w, keptTokens(z, w, options),
                    samplingUniform(options.seed, row, step));
}

/// One token per row of `rows` (float64 [rows, V] on the CPU).
llvm::Expected<at::Tensor> sampleRows(const at::Tensor &rows,
                                      const SamplingOptions &options,
                                      int64_t firstRow, int64_t step,
                                      const at::Tensor &finished) {
  int64_t count = rows.size(0), vocab = rows.size(1);
  at::Tensor tokens = at::empty({count}, at::kLong);
  int64_t *out = tokens.data_ptr<int64_t>();
  const double *data = rows.data_ptr<double>();
  for (int64_t r = 0; r < count; ++r) {
    // A finished row's logits are not read: they may be anything.
    if (finished.defined() && finished.accessor<bool, 1>()[r]) {
      out[r] = options.eosId;
      continue;
    }
    auto token =
        sampleRow(data + r * vocab, vocab, options, firstRow + r, step);
    if (!token)
      return token.takeError();
    out[r] = *token;
  }
  return tokens;
}

} // namespace

RealRule temperatureRule() { return RealRule::atLeast(0); }

IntegerRule topKRule() { return IntegerRule(0, kMaxOptionInt, "", "0: all"); }

RealRule topPRule() { return RealRule{0, true, 1, ""}; }

IntegerRule eosIdRule(std::optional<int64_t> vocab) {
  return IntegerRule(-1, vocab ? *vocab - 1 : kMaxOptionInt, "", "-1: none");
}

std::string temperatureProblem(double temperature) {
  if (std::string problem = temperatureRule().problem(temperature);
      !problem.empty())
    return problem;
  if (temperature > 0 && temperature < kMinTemperature)
    return formatNumber(temperature) + " is not 0 or at least " +
           formatNumber(kMinTemperature) + " (1 over the largest float)";
  return "";
}

llvm::Error checkSamplingOptions(const SamplingOptions &options,
                                 std::optional<int64_t> vocab) {
  if (llvm::Error err =
          checkOption("temperature", temperatureProblem(options.temperature)))
    return err;
  if (llvm::Error err = checkOption("topK", topKRule().problem(options.topK)))
    return err;
  if (llvm::Error err = checkOption("topP", topPRule().problem(options.topP)))
    return err;
  return checkOption("eosId", eosIdRule(vocab).problem(options.eosId));
}

double samplingUniform(uint64_t seed, int64_t row, int64_t step) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ uint64_t(row));
  h = splitmix64(h ^ uint64_t(step));
  // The top 53 bits: a double in [0, 1) with every value equally likely.
  return double(h >> 11) * 0x1.0p-53;
}

llvm::Expected<at::Tensor> pickTokens(const at::Tensor &logits,
                                      const SamplingOptions &options,
                                      int64_t firstRow, int64_t step,
                                      at::Tensor &finished) {
  bool greedy = options.temperature == 0;
  auto rows = lastRows(logits, !greedy);
  if (!rows)
    return rows.takeError();
  int64_t count = rows->size(0), vocab = rows->size(1);
  if (llvm::Error err = checkSamplingOptions(options, vocab))
    return err;
  bool eos = options.eosId >= 0;
  if (eos)
    if (llvm::Error err = prepareFinished(finished, count))
      return err;
  at::Tensor done = eos ? finished : at::Tensor();
  llvm::Expected<at::Tensor> tokens =
      greedy ? torchCall("cannot pick tokens",
                         [&] { return at::argmax(*rows, 1).to(at::kLong); })
             : sampleRows(*rows, options, firstRow, step, done);
  if (!tokens || !eos)
    return tokens;
  tokens->masked_fill_(finished, options.eosId);
  finished.logical_or_(tokens->eq(options.eosId));
  return tokens;
}

} // namespace ppc
