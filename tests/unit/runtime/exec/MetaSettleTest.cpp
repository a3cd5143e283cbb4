//===- tests/unit/runtime/exec/MetaSettleTest.cpp -------------------------===//
//
// The metadata agreement.
//
// Tests the start-up agreement on where boundary metadata comes from, with
// two ranks as threads over the loopback link: inference on a first run, a
// cache hit on the next, a corrupt cache and caches that disagree falling
// back to inference on every rank alike, a lost peer named, and the exact
// messages each costs.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/MetaSettle.h"

#include "runtime/link/Link.h"
#include "runtime/link/LoopbackLink.h"
#include "runtime/schedule/Build.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <thread>

using namespace ppc;

namespace {
/// Two stages in a chain: stage 0 (rank 0) reads the model input and hands
/// its output 0 to stage 1 (rank 1), which returns the model output.
Manifest chain() { return Manifest::chain(2); }

/// What one rank saw.
struct RankResult {
  std::string error;
  std::string warnings;
  MetaSource source = MetaSource::User;
  std::vector<bool> inferring;
  int64_t messages = 0;
};

class MetaSettleTest : public ::testing::Test {
protected:
  void SetUp() override {
    llvm::SmallString<128> dir;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-settle", dir));
    cacheDir = std::string(dir);
    auto placed = Placement::create(2, 2);
    ASSERT_TRUE(static_cast<bool>(placed));
    placement = *placed;
    auto built = buildSchedule(manifest, placement, ScheduleKind::OneFOneB, 2);
    ASSERT_TRUE(static_cast<bool>(built));
    schedule = std::move(*built);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(cacheDir); }

  /// Runs one prepare() on both ranks (rank 0 holds a 4-row input: two
  /// microbatches of one signature); `infer` then plays the executor,
  /// recording metadata of `rows1` rows on rank 1 for the values it infers,
  /// and finish() saves them. `beforeRank` runs on each rank's thread first
  /// (to close a transport, say); `afterPrepare`, when given, replaces
  /// playing the executor.
  std::vector<RankResult> settle(
      int64_t rows1 = 2,
      std::function<void(int, LoopbackHub &)> beforeRank = nullptr,
      std::function<void(MetaSettler &, RankResult &)> afterPrepare = nullptr) {
    auto hub = std::make_shared<LoopbackHub>(2);
    std::vector<RankResult> results(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        RankResult &out = results[r];
        LinkSetup setup;
        setup.rank = r;
        setup.worldSize = 2;
        setup.timeout = std::chrono::milliseconds(500);
        setup.loopback = hub;
        auto transport = Transport::create(setup);
        if (!transport) {
          out.error = llvm::toString(transport.takeError());
          return;
        }
        (*transport)->setChannelCount(schedule.channelCount() + 1);
        if (beforeRank)
          beforeRank(r, *hub);
        llvm::raw_string_ostream warnings(out.warnings);
        MetaScope scope;
        scope.manifest = &manifest;
        scope.manifestSha256 = "manifest-sha";
        scope.stageHashes = {{r, "stage-sha"}};
        scope.placement = &placement;
        scope.schedule = &schedule;
        scope.transport = transport->get();
        scope.rank = r;
        scope.worldSize = 2;
        scope.cacheDir = cacheDir;
        scope.warnings = &warnings;
        MetaSettler settler(scope);
        std::vector<c10::IValue> inputs;
        if (r == 0)
          inputs.push_back(at::zeros({4, 3}));
        ExecutorStep step;
        if (llvm::Error err = settler.prepare(inputs, step)) {
          out.error = llvm::toString(std::move(err));
          return;
        }
        out.source = settler.source();
        out.inferring = step.inferring;
        out.messages = (*transport)->messagesSent();
        if (afterPrepare) {
          afterPrepare(settler, out);
          return;
        }
        for (size_t m = 0; m < step.inferring.size(); ++m) {
          if (!step.inferring[m])
            continue;
          MetaTable &table = (*step.tables)[step.signatures[m].text];
          int64_t rows = r == 1 ? rows1 : 2;
          for (auto key : {std::make_pair(0, 0), std::make_pair(1, 0)})
            if (!table.count(key))
              table[key] =
                  ValueMeta::of(at::zeros({rows, 3}), ValueKind::Tensor);
        }
        settler.finish();
        warnings.flush();
      });
    for (std::thread &t : threads)
      t.join();
    return results;
  }

  /// A settle() whose ranks, after prepare(), hand the settler a mismatch
  /// of a produced value; each rank's error is "TYPE: MESSAGE" of what came
  /// back, TYPE stale, mismatch or other.
  std::vector<RankResult> classifyAMismatch() {
    return settle(2, nullptr, [](MetaSettler &settler, RankResult &out) {
      llvm::Error err = settler.classify(
          llvm::make_error<MetaMismatchError>("stage 0 output 0 ('y')"));
      std::string type = err.isA<StaleCacheError>()     ? "stale"
                         : err.isA<MetaMismatchError>() ? "mismatch"
                                                        : "other";
      out.error = type + ": " + llvm::toString(std::move(err));
    });
  }

  std::string cacheFile(int rank) const {
    return MetaCache::filePath(cacheDir, rank, 2);
  }

  Manifest manifest = chain();
  Placement placement;
  Schedule schedule;
  std::string cacheDir;
};

// The messages of a first prepare(), per rank: the signatures' broadcast
// from rank 0 (a length and the bytes) and the agreement through rank 0
// (rank 1's values in, the minimum out).
constexpr int64_t kRank0Messages = 2 + 1;
constexpr int64_t kRank1Messages = 1;

/// Checks that every rank settled without error from `source`, inferring
/// on the microbatches `inferring` marks.
void expectEveryRank(const std::vector<RankResult> &ranks, MetaSource source,
                     const std::vector<bool> &inferring) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(ranks[r].error, "");
    EXPECT_EQ(ranks[r].source, source);
    EXPECT_EQ(ranks[r].inferring, inferring);
  }
}
} // namespace

// Tests that a first run infers on both ranks, from the first microbatch of
// the signature only, and writes each rank's cache; that being the normal
// path, it says so once, as a note from rank 0.
TEST_F(MetaSettleTest, AFirstRunInfersAndWritesTheCaches) {
  std::vector<RankResult> ranks = settle();
  expectEveryRank(ranks, MetaSource::Inferred, {true, false});
  EXPECT_EQ(ranks[0].warnings, "note: no meta cache at '" + cacheFile(0) +
                                   "'; inferring shapes (saved there for "
                                   "later runs)\n");
  EXPECT_EQ(ranks[1].warnings, "");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(llvm::sys::fs::exists(cacheFile(r)));
  }
  EXPECT_EQ(ranks[0].messages, kRank0Messages);
  EXPECT_EQ(ranks[1].messages, kRank1Messages);
}

// Tests that the next run takes the cache on every rank, silently, with the
// same messages and nothing left to infer.
TEST_F(MetaSettleTest, TheNextRunHitsTheCache) {
  settle();
  std::vector<RankResult> ranks = settle();
  expectEveryRank(ranks, MetaSource::Cache, {false, false});
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(ranks[r].warnings, "");
  }
  EXPECT_EQ(ranks[0].messages, kRank0Messages);
  EXPECT_EQ(ranks[1].messages, kRank1Messages);
}

// Tests that one corrupt cache file makes every rank infer, and that only
// the rank holding it warns.
TEST_F(MetaSettleTest, ACorruptCacheMakesEveryRankInfer) {
  settle();
  std::ofstream(cacheFile(1)) << "{\"format\": \"ppc-meta-cache\", \"ver";
  std::vector<RankResult> ranks = settle();
  expectEveryRank(ranks, MetaSource::Inferred, {true, false});
  EXPECT_EQ(ranks[0].warnings, "");
  EXPECT_NE(ranks[1].warnings.find("warning: meta cache '" + cacheFile(1) +
                                   "' is corrupt ("),
            std::string::npos)
      << ranks[1].warnings;
}

// Tests that complete caches whose digests of an edge differ (rank 1
// expects another shape than rank 0 sends) make both ranks infer, each
// naming the edge.
TEST_F(MetaSettleTest, CachesThatDisagreeOnAnEdgeMakeEveryRankInfer) {
  settle(/*rows1=*/3);
  std::vector<RankResult> ranks = settle();
  expectEveryRank(ranks, MetaSource::Inferred, {true, false});
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(ranks[r].warnings,
              "warning: the meta caches of ranks 0 and 1 disagree on stage 0 "
              "-> 1; inferring shapes\n");
  }
}

// Tests that a rank gone before the agreement is named by the other at
// once, as a lost rank.
TEST_F(MetaSettleTest, ALostPeerIsNamed) {
  std::vector<RankResult> ranks = settle(2, [](int rank, LoopbackHub &hub) {
    if (rank == 1)
      hub.close(1);
  });
  EXPECT_EQ(ranks[0].error.rfind("lost rank 1 (", 0), 0u) << ranks[0].error;
}

// Tests that a produced value contradicting cached metadata removes the
// cache file and becomes a StaleCacheError saying so.
TEST_F(MetaSettleTest, AMismatchWithTheCacheRemovesIt) {
  settle();
  std::vector<RankResult> ranks = classifyAMismatch();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(ranks[r].source, MetaSource::Cache);
    EXPECT_EQ(ranks[r].error,
              "stale: stage 0 output 0 ('y') (the meta cache '" + cacheFile(r) +
                  "' is wrong; it was removed; run again to infer)");
    EXPECT_FALSE(llvm::sys::fs::exists(cacheFile(r)));
  }
}

// Tests that a mismatch with metadata this run inferred stays what it was.
TEST_F(MetaSettleTest, AMismatchWithInferredMetadataIsKept) {
  std::vector<RankResult> ranks = classifyAMismatch();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(ranks[r].source, MetaSource::Inferred);
    EXPECT_EQ(ranks[r].error, "mismatch: stage 0 output 0 ('y')");
  }
}
