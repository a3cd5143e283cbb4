//===- tests/unit/lib/WeightBindingTest.cpp - checkpoint ties -------------===//
//
// A program exported on the meta device records no ties, so a weight the
// checkpoint lacks is taken from the one its config.json ties it to, as
// transformers ties word embeddings, and only when exactly one tensor can be
// that one.
//
//===----------------------------------------------------------------------===//
#include "lib/WeightBinding.h"
#include "lib/Safetensors.h"

#include "tests/unit/ScratchDirTest.h"

#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

using namespace ppc;

namespace {

class WeightBindingTest : public test::ScratchDirTest {
protected:
  /// A checkpoint directory "ck" of `tensors` (F32, each element 1.0 times
  /// its index), with `config` as its config.json unless empty.
  std::string checkpoint(
      const std::vector<std::pair<std::string, std::vector<int64_t>>> &tensors,
      llvm::StringRef config) {
    std::string dir = path("ck");
    std::vector<std::string> data;
    std::vector<safetensors::WriteTensor> out;
    for (const auto &[name, shape] : tensors) {
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      at::Tensor t = at::arange(n, at::kFloat);
      data.emplace_back(static_cast<const char *>(t.data_ptr()),
                        static_cast<size_t>(n) * 4);
    }
    for (size_t i = 0; i < tensors.size(); ++i)
      out.push_back({tensors[i].first, "F32", tensors[i].second, data[i]});
    EXPECT_FALSE(
        llvm::errorToBool(safetensors::writeCheckpoint(dir, out, 1 << 20)));
    if (!config.empty()) {
      std::error_code ec;
      llvm::raw_fd_ostream os(dir + "/config.json", ec);
      EXPECT_FALSE(ec);
      os << config;
    }
    return dir;
  }

  static WeightSlot meta(const std::string &name, std::vector<int64_t> shape) {
    return {{name}, at::empty(shape, at::device(at::kMeta)), true, false};
  }

  /// Binds an embedding "emb" [10, 4], a head "head" [10, 4] and "mid"
  /// [4, 4], all without data, from `dir`: the bound tensors by name, or
  /// the error's text in `error`.
  std::map<std::string, at::Tensor> bindAll(const std::string &dir,
                                            std::string &error,
                                            WeightReport *report = nullptr) {
    WeightOptions options;
    options.path = dir;
    std::vector<WeightSlot> slots{meta("emb", {10, 4}), meta("head", {10, 4}),
                                  meta("mid", {4, 4})};
    auto source = WeightSource::open(options, {"emb", "head", "mid"});
    if (!source) {
      error = llvm::toString(source.takeError());
      return {};
    }
    std::map<std::string, at::Tensor> bound;
    auto made = (*source)->bind(
        slots, [&](const std::string &name, at::Tensor t) { bound[name] = t; },
        /*inPlace=*/false);
    if (!made) {
      error = llvm::toString(made.takeError());
      return {};
    }
    if (report)
      *report = *made;
    return bound;
  }
};

const char kTies[] = R"({"tie_word_embeddings": true, "vocab_size": 10})";

} // namespace

TEST_F(WeightBindingTest, ATiedHeadIsTheEmbeddingItsConfigTiesItTo) {
  std::string dir = checkpoint({{"emb", {10, 4}}, {"mid", {4, 4}}}, kTies);
  std::string error;
  WeightReport report;
  auto bound = bindAll(dir, error, &report);
  ASSERT_EQ(error, "");
  ASSERT_EQ(bound.size(), 3u);
  EXPECT_TRUE(at::equal(bound["head"], bound["emb"]));
  EXPECT_TRUE(
      at::equal(bound["emb"], at::arange(40, at::kFloat).view({10, 4})));
  ASSERT_EQ(report.configTies.size(), 1u);
  EXPECT_EQ(report.configTies[0].first, "head");
  EXPECT_EQ(report.configTies[0].second, "emb");
}

TEST_F(WeightBindingTest, WithoutTheConfigsTieTheMissingHeadIsOneLine) {
  const std::string hint = "; if it shares another weight's tensor, name that "
                           "one with --weights-tied head=SOURCE)";
  const std::string lacks = "weight 'head' is not in checkpoint '";
  struct Case {
    const char *config;
    std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
    std::string why;
  } cases[] = {
      // No config.json, one that does not tie, one without vocab_size, and
      // a vocabulary the head is not: the head is missing, as it is.
      {"", {{"emb", {10, 4}}, {"mid", {4, 4}}}, ""},
      {R"({"tie_word_embeddings": false, "vocab_size": 10})",
       {{"emb", {10, 4}}, {"mid", {4, 4}}},
       ""},
      {R"({"tie_word_embeddings": true})",
       {{"emb", {10, 4}}, {"mid", {4, 4}}},
       ""},
      {R"({"tie_word_embeddings": true, "vocab_size": 4})",
       {{"emb", {10, 4}}, {"mid", {4, 4}}},
       ""},
      // Two tensors could be the source: none is taken.
      {kTies,
       {{"emb", {10, 4}}, {"mid", {4, 4}}, {"other", {10, 4}}},
       "; its config.json ties word embeddings, but 2 tensors have its "
       "dtype and shape: 'emb', 'other'"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.config);
    llvm::sys::fs::remove_directories(path("ck"));
    std::string dir = checkpoint(c.tensors, c.config);
    std::string error;
    WeightOptions options;
    options.path = dir;
    options.ignoreExtra = true;
    auto source = WeightSource::open(options, {"emb", "head", "mid"});
    ASSERT_TRUE(static_cast<bool>(source));
    std::vector<WeightSlot> slots{meta("head", {10, 4})};
    auto made = (*source)->bind(
        slots, [](const std::string &, at::Tensor) {}, false);
    ASSERT_FALSE(static_cast<bool>(made));
    EXPECT_EQ(llvm::toString(made.takeError()),
              lacks + dir + "' (the program carries no data for it" + c.why +
                  hint);
  }
}

TEST_F(WeightBindingTest, AConfigThatIsNotAnObjectIsOneLine) {
  std::string dir = checkpoint({{"emb", {10, 4}}, {"mid", {4, 4}}}, "[1, 2]");
  std::string error;
  bindAll(dir, error);
  EXPECT_EQ(error,
            "checkpoint config '" + dir + "/config.json' is not a JSON object");
}
