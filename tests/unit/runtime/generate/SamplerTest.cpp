//===- tests/unit/runtime/generate/SamplerTest.cpp ------------------------===//
//
// The token sampler: greedy picking, sampling's filters and frequencies,
// its independence from how rows are grouped, end of sequence, and the
// errors.
//
//===----------------------------------------------------------------------===//
#include "runtime/generate/Sampler.h"

#include "lib/Error.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace ppc;

namespace {
SamplingOptions sampling(double temperature, int64_t topK = 0,
                         double topP = 1.0, uint64_t seed = 0) {
  SamplingOptions o;
  o.temperature = temperature;
  o.topK = topK;
  o.topP = topP;
  o.seed = seed;
  return o;
}

at::Tensor pick(const at::Tensor &logits, const SamplingOptions &o,
                int64_t firstRow = 0, int64_t step = 0) {
  at::Tensor finished;
  auto tokens = pickTokens(logits, o, firstRow, step, finished);
  if (!tokens) {
    ADD_FAILURE() << llvm::toString(tokens.takeError());
    return at::Tensor();
  }
  EXPECT_EQ(tokens->scalar_type(), at::kLong);
  EXPECT_TRUE(tokens->device().is_cpu());
  return *tokens;
}

std::string pickError(const at::Tensor &logits, const SamplingOptions &o,
                      at::Tensor finished = at::Tensor()) {
  auto tokens = pickTokens(logits, o, 5, 3, finished);
  return tokens ? "" : llvm::toString(tokens.takeError());
}

std::string optionError(const SamplingOptions &o,
                        std::optional<int64_t> vocab = std::nullopt) {
  llvm::Error err = checkSamplingOptions(o, vocab);
  return err ? llvm::toString(std::move(err)) : "";
}

std::vector<int64_t> values(const at::Tensor &t) {
  at::Tensor c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

/// How often each token of one row of `logits` [1, V] is picked over
/// `steps` steps.
std::vector<int64_t> counts(const at::Tensor &logits, const SamplingOptions &o,
                            int64_t steps) {
  std::vector<int64_t> out(logits.size(1));
  for (int64_t step = 0; step < steps; ++step)
    ++out[values(pick(logits, o, 0, step))[0]];
  return out;
}

/// Pearson's chi-square of `observed` against probabilities `expected`
/// (a zero probability must never be observed).
double chiSquare(const std::vector<int64_t> &observed,
                 const std::vector<double> &expected, int64_t n) {
  double chi = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(observed[i], 0) << "token " << i;
      continue;
    }
    double e = expected[i] * double(n);
    chi += (double(observed[i]) - e) * (double(observed[i]) - e) / e;
  }
  return chi;
}

at::Tensor flags(std::vector<int64_t> values) {
  return at::tensor(values, at::kLong).to(at::kBool);
}

at::Tensor row(std::vector<double> logits) {
  return at::tensor(logits, at::kDouble).unsqueeze(0);
}
} // namespace

TEST(SamplerTest, GreedyIsArgmaxWithTheFirstMaximum) {
  at::Tensor logits =
      at::tensor({1.f, 3.f, 3.f, 2.f, 5.f, 5.f, 0.f, 0.f, 0.f, 0.f, 0.f, 7.f},
                 at::kFloat)
          .view({3, 4});
  EXPECT_EQ(values(pick(logits, sampling(0))), (std::vector<int64_t>{1, 0, 3}));
  // As torch.argmax, a NaN counts as the maximum.
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(
      values(pick(at::tensor({1.f, nan, 9.f, nan}).view({1, 4}), sampling(0))),
      (std::vector<int64_t>{1}));
  at::manual_seed(0);
  at::Tensor random = at::randn({16, 1000});
  EXPECT_TRUE(pick(random, sampling(0)).equal(at::argmax(random, 1)));
}

TEST(SamplerTest, GreedyReadsEveryFloatingDtype) {
  at::manual_seed(1);
  at::Tensor random = at::randn({8, 300});
  at::Tensor expected = at::argmax(random.to(at::kBFloat16), 1);
  EXPECT_TRUE(pick(random.to(at::kBFloat16), sampling(0)).equal(expected));
  EXPECT_TRUE(pick(random.to(at::kHalf), sampling(0))
                  .equal(at::argmax(random.to(at::kHalf).to(at::kFloat), 1)));
  EXPECT_TRUE(
      pick(random.to(at::kDouble), sampling(0)).equal(at::argmax(random, 1)));
  // Sampling reads them too.
  EXPECT_EQ(pick(random.to(at::kBFloat16), sampling(1, 1)).numel(), 8);
}

TEST(SamplerTest, ThreeDimensionalLogitsUseTheLastPosition) {
  at::Tensor logits = at::zeros({2, 3, 5});
  logits.index_put_({0, 0, 1}, 9);
  logits.index_put_({0, 2, 4}, 1);
  logits.index_put_({1, 1, 0}, 9);
  logits.index_put_({1, 2, 2}, 1);
  EXPECT_EQ(values(pick(logits, sampling(0))), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(values(pick(logits, sampling(0.7, 1))),
            (std::vector<int64_t>{4, 2}));
}

TEST(SamplerTest, TopKOfOneAndATinyTopPAreGreedy) {
  at::manual_seed(2);
  at::Tensor logits = at::randn({6, 400});
  at::Tensor greedy = pick(logits, sampling(0));
  for (int64_t step = 0; step < 20; ++step) {
    EXPECT_TRUE(pick(logits, sampling(2.0, 1, 1.0, 9), 0, step).equal(greedy));
    EXPECT_TRUE(pick(logits, sampling(2.0, 0, 1e-9, 9), 0, step).equal(greedy));
    EXPECT_TRUE(
        pick(logits, sampling(2.0, 50, 1e-9, 9), 0, step).equal(greedy));
  }
}

TEST(SamplerTest, TopKTiesKeepTheLowerIds) {
  // Tokens 1, 2 and 4 tie; top-2 keeps 1 and 2.
  at::Tensor logits = row({0, 5, 5, 0, 5});
  std::vector<int64_t> seen = counts(logits, sampling(1, 2), 400);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
  EXPECT_EQ(seen[0] + seen[3] + seen[4], 0);
}

TEST(SamplerTest, TokensDoNotDependOnHowRowsAreGrouped) {
  at::manual_seed(3);
  at::Tensor logits = at::randn({8, 64}) * 2;
  for (SamplingOptions o :
       {sampling(1.0, 0, 1.0, 11), sampling(0.8, 10, 1.0, 11),
        sampling(1.3, 0, 0.9, 11), sampling(1, 20, 0.5, 11)})
    for (int64_t step : {0, 1, 17}) {
      at::Tensor whole = pick(logits, o, 0, step);
      for (int64_t group : {1, 2, 4}) {
        std::vector<at::Tensor> parts;
        for (int64_t first = 0; first < 8; first += group)
          parts.push_back(
              pick(logits.slice(0, first, first + group), o, first, step));
        EXPECT_TRUE(at::cat(parts).equal(whole)) << "groups of " << group;
      }
      // Rows placed elsewhere in the batch keep their sequence row's token.
      EXPECT_TRUE(
          pick(logits.slice(0, 4, 8), o, 4, step).equal(whole.slice(0, 4, 8)));
    }
}

TEST(SamplerTest, SeedsRowsAndStepsDrawDifferently) {
  at::Tensor flat = at::zeros({1, 100});
  int64_t seedDiffers = 0, rowDiffers = 0;
  for (int64_t step = 0; step < 200; ++step) {
    int64_t a = values(pick(flat, sampling(1, 0, 1, 1), 0, step))[0];
    seedDiffers += a != values(pick(flat, sampling(1, 0, 1, 2), 0, step))[0];
    rowDiffers += a != values(pick(flat, sampling(1, 0, 1, 1), 1, step))[0];
  }
  // Independent draws among 100 tokens agree about twice in 200.
  EXPECT_GT(seedDiffers, 180);
  EXPECT_GT(rowDiffers, 180);
  EXPECT_EQ(samplingUniform(4, 5, 6), samplingUniform(4, 5, 6));
  double sum = 0;
  for (int64_t step = 0; step < 10000; ++step) {
    double u = samplingUniform(4, 0, step);
    ASSERT_GE(u, 0);
    ASSERT_LT(u, 1);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
}

// The chi-square bound of each test is about the 99.9% quantile for its
// degrees of freedom; the draws are seeded, so the test is deterministic.
TEST(SamplerTest, FrequenciesFollowTheSoftmax) {
  std::vector<double> logits = {0.5, -1, 2, 0, 1, -3};
  const int64_t n = 20000;
  for (double temperature : {1.0, 2.0, 0.5}) {
    std::vector<double> p(logits.size());
    double total = 0;
    for (size_t i = 0; i < p.size(); ++i)
      total += p[i] = std::exp(logits[i] / temperature);
    for (double &x : p)
      x /= total;
    double chi =
        chiSquare(counts(row(logits), sampling(temperature, 0, 1, 5), n), p, n);
    EXPECT_LT(chi, 20.5) << "temperature " << temperature; // 5 dof
  }
}

TEST(SamplerTest, TopKAndTopPRenormaliseWhatTheyKeep) {
  // Probabilities 0.4, 0.1, 0.3, 0.2 (by id).
  std::vector<double> logits = {std::log(0.4), std::log(0.1), std::log(0.3),
                                std::log(0.2)};
  const int64_t n = 20000;
  // Top-2 keeps ids 0 and 2.
  EXPECT_LT(chiSquare(counts(row(logits), sampling(1, 2, 1, 6), n),
                      {0.4 / 0.7, 0, 0.3 / 0.7, 0}, n),
            10.8); // 1 dof
  // Top-p 0.8 keeps 0.4 + 0.3 + 0.2 (0.7 falls short).
  EXPECT_LT(chiSquare(counts(row(logits), sampling(1, 0, 0.8, 6), n),
                      {0.4 / 0.9, 0, 0.3 / 0.9, 0.2 / 0.9}, n),
            13.8); // 2 dof
  // Top-p 0.5 of top-3's renormalised 0.44, 0.33, 0.22 keeps two.
  EXPECT_LT(chiSquare(counts(row(logits), sampling(1, 3, 0.5, 6), n),
                      {0.4 / 0.7, 0, 0.3 / 0.7, 0}, n),
            10.8);
}

TEST(SamplerTest, NegativeInfinityIsNeverPicked) {
  double inf = std::numeric_limits<double>::infinity();
  std::vector<int64_t> seen = counts(row({-inf, 0, -inf, 0}), sampling(1), 500);
  EXPECT_EQ(seen[0] + seen[2], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[3], 0);
}

TEST(SamplerTest, EndOfSequenceFinishesARow) {
  SamplingOptions o = sampling(0);
  o.eosId = 2;
  at::Tensor finished;
  auto first =
      pickTokens(at::tensor({0.f, 0.f, 9.f, 0.f, 9.f, 0.f}).view({2, 3}), o, 0,
                 0, finished);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_EQ(values(*first), (std::vector<int64_t>{2, 1}));
  ASSERT_TRUE(finished.defined());
  EXPECT_TRUE(finished.equal(flags({1, 0})));
  // A finished row keeps eosId; the other row finishes now.
  auto second =
      pickTokens(at::tensor({9.f, 0.f, 0.f, 0.f, 0.f, 9.f}).view({2, 3}), o, 0,
                 1, finished);
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(values(*second), (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(finished.equal(flags({1, 1})));
  // Sampling does not read a finished row's logits, NaN or not.
  o.temperature = 1;
  finished = flags({1, 0});
  float nan = std::numeric_limits<float>::quiet_NaN();
  auto third =
      pickTokens(at::tensor({nan, nan, nan, 0.f, 9.f, 0.f}).view({2, 3}), o, 0,
                 2, finished);
  ASSERT_TRUE(bool(third)) << llvm::toString(third.takeError());
  EXPECT_EQ(values(*third), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(finished.equal(flags({1, 0})));
}

TEST(SamplerTest, WithoutEosTheFlagsAreUntouched) {
  at::Tensor finished;
  auto tokens = pickTokens(at::zeros({2, 3}), sampling(0), 0, 0, finished);
  ASSERT_TRUE(bool(tokens)) << llvm::toString(tokens.takeError());
  EXPECT_FALSE(finished.defined());
}

TEST(SamplerTest, OptionErrorsNameTheField) {
  EXPECT_EQ(optionError(sampling(0)), "");
  EXPECT_EQ(optionError(sampling(-1)),
            "temperature -1 is not a finite number of at least 0");
  EXPECT_EQ(optionError(sampling(std::numeric_limits<double>::infinity())),
            "temperature inf is not a finite number of at least 0");
  EXPECT_EQ(optionError(sampling(std::nan(""))),
            "temperature nan is not a finite number of at least 0");
  EXPECT_EQ(optionError(sampling(1e-40)),
            "temperature 1e-40 is not 0 or at least 2.938736052218037e-39 "
            "(1 over the largest float)");
  EXPECT_EQ(optionError(sampling(1, -1)),
            "topK -1 is not an integer in 0..2147483647 (0: all)");
  EXPECT_EQ(optionError(sampling(1, 0, 0)),
            "topP 0 is not a number above 0 and at most 1");
  EXPECT_EQ(optionError(sampling(1, 0, 1.5)),
            "topP 1.5 is not a number above 0 and at most 1");
  SamplingOptions o = sampling(0);
  o.eosId = -2;
  EXPECT_EQ(optionError(o),
            "eosId -2 is not an integer in -1..2147483647 (-1: none)");
  o.eosId = 128;
  EXPECT_EQ(optionError(o, 128),
            "eosId 128 is not an integer in -1..127 (-1: none)");
  EXPECT_EQ(pickError(at::zeros({2, 128}), o),
            "eosId 128 is not an integer in -1..127 (-1: none)");
  // The field survives as a type.
  llvm::Error err = checkSamplingOptions(sampling(1, 0, 2));
  bool typed = false;
  llvm::handleAllErrors(std::move(err), [&](const OptionError &e) {
    typed = e.field() == "topP";
  });
  EXPECT_TRUE(typed);
}

TEST(SamplerTest, LogitsErrors) {
  EXPECT_EQ(pickError(at::zeros({2, 4}, at::kLong), sampling(0)),
            "the logits are int64; expected floating point");
  EXPECT_EQ(pickError(at::zeros({2, 3, 4, 5}), sampling(0)),
            "the logits are float32[2,3,4,5]; expected [rows, vocab] or "
            "[rows, length, vocab] with length and vocab at least 1");
  EXPECT_EQ(pickError(at::zeros({2, 0}), sampling(0)),
            "the logits are float32[2,0]; expected [rows, vocab] or "
            "[rows, length, vocab] with length and vocab at least 1");
  EXPECT_EQ(pickError(at::zeros({2, 0, 4}), sampling(0)),
            "the logits are float32[2,0,4]; expected [rows, vocab] or "
            "[rows, length, vocab] with length and vocab at least 1");
  SamplingOptions eos = sampling(0);
  eos.eosId = 1;
  EXPECT_EQ(pickError(at::zeros({2, 4}), eos, at::zeros({3}, at::kBool)),
            "the finished flags are bool[3]; expected bool[2] on the CPU");
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(pickError(row({0, std::nan(""), 1}), sampling(1)),
            "the logits of row 5 at step 3 hold NaN");
  EXPECT_EQ(pickError(row({0, inf, 1}), sampling(1)),
            "the logits of row 5 at step 3 hold +inf");
  EXPECT_EQ(pickError(row({-inf, -inf}), sampling(1)),
            "the logits of row 5 at step 3 are all -inf");
}
