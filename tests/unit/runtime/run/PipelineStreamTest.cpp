//===- tests/unit/runtime/run/PipelineStreamTest.cpp ----------------------===//
//
// Pipeline::submit/next.
//
// Tests the streaming API of runtime/run/Pipeline.h: batches form windows
// of windowBatches() (a flush() closes a partial one), run in the
// background as one execution of the schedule over all their
// microbatches, at most two windows in flight, and come out of next() one
// batch at a time, in order, on every rank; the stats cover the window;
// errors name their batch (a window's failure in the background:
// WindowStreamTest, and tests/cli/test_stream.py). Ranks run in threads of
// this process over Gloo; the stages are TorchScript modules defined here.
//
//===----------------------------------------------------------------------===//
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "runtime/run/Pipeline.h"
#include "tests/unit/runtime/FreePort.h"
#include "tests/unit/runtime/TwoStageJob.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <functional>
#include <string>
#include <thread>

using namespace ppc;

namespace {
using ppc::testing::freePort;

/// Two stages: a = x * 2, b = a + 1.
class PipelineStreamTest : public ppc::testing::TwoStageJob {
protected:
  RunOptions options(int microbatches, int stream) const {
    RunOptions o;
    o.microbatches = microbatches;
    o.streamMicrobatches = stream;
    o.useMetaCache = false;
    o.timeout = std::chrono::milliseconds(30000);
    o.threads = 1;
    return o;
  }

  /// Runs `body` as each of `world` ranks, in threads; returns each rank's
  /// failure ("" when none).
  std::vector<std::string>
  onRanks(int world, const RunOptions &o,
          const std::function<llvm::Error(Pipeline &, int)> &body) {
    return onRankThreads<Pipeline>(
        world,
        [&](const std::string &manifest, const LaunchEnv &env) {
          return Pipeline::create(manifest, env, o);
        },
        body);
  }

  /// Batch b: rows 4 + b % 3 (so signatures differ), values from b.
  static at::Tensor batch(int b) {
    return at::arange(4 + b % 3, at::kFloat).view({-1, 1}) + 10.0 * b;
  }
};
} // namespace

TEST_F(PipelineStreamTest, WindowsRunInTheBackgroundAndHandOutInOrder) {
  // M = 2, a bound of 5 microbatches: windows of 2 batches, at most 2
  // windows (4 batches) in flight.
  std::vector<std::vector<at::Tensor>> outputs(2);
  std::vector<std::vector<int64_t>> windowSizes(2);
  std::vector<int> mostInFlight(2, 0);
  auto errors =
      onRanks(2, options(2, 5), [&](Pipeline &p, int r) -> llvm::Error {
        EXPECT_EQ(p.windowBatches(), 2);
        auto take = [&] {
          bool first = false;
          while (auto out = p.next(&first)) {
            if (first)
              windowSizes[r].push_back(p.stats().batches);
            if (r == p.outputRank()) {
              EXPECT_EQ(out->size(), 1u);
              outputs[r].push_back((*out)[0].toTensor());
            } else {
              EXPECT_TRUE(out->empty());
              outputs[r].push_back(at::Tensor());
            }
          }
        };
        for (int b = 0; b < 5; ++b) {
          std::vector<c10::IValue> in;
          if (p.needsInputs())
            in.push_back(batch(b));
          if (llvm::Error err = p.submit(std::move(in)))
            return err;
          mostInFlight[r] = std::max(mostInFlight[r], p.queuedBatches());
          take();
        }
        if (llvm::Error err = p.flush())
          return err;
        EXPECT_EQ(p.queuedBatches(), 0);
        take();
        // A second flush has nothing to run.
        if (llvm::Error err = p.flush())
          return err;
        EXPECT_FALSE(p.next().has_value());
        return llvm::Error::success();
      });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  for (int r = 0; r < 2; ++r) {
    // Windows of 2, 2 and the flushed 1, whatever the timing.
    EXPECT_EQ(windowSizes[r], (std::vector<int64_t>{2, 2, 1})) << "rank " << r;
    EXPECT_LE(mostInFlight[r], 4) << "rank " << r;
    EXPECT_EQ(outputs[r].size(), 5u);
  }
  ASSERT_EQ(outputs[1].size(), 5u);
  for (int b = 0; b < 5; ++b)
    EXPECT_TRUE(at::equal(outputs[1][b], batch(b) * 2 + 1))
        << "batch " << b << ": " << outputs[1][b];
}

TEST_F(PipelineStreamTest, RunRefusesWhileBatchesAreQueued) {
  auto errors = onRanks(2, options(2, 6), [&](Pipeline &p, int) -> llvm::Error {
    std::vector<c10::IValue> in;
    if (p.needsInputs())
      in.push_back(batch(0));
    if (llvm::Error err = p.submit(in))
      return err;
    EXPECT_EQ(p.queuedBatches(), 1);
    auto out = p.run(in);
    return out ? llvm::Error::success() : out.takeError();
  });
  EXPECT_EQ(errors[0], "run() with 1 submitted batch not run yet; flush() "
                       "first");
  EXPECT_EQ(errors[1], errors[0]);
}

TEST_F(PipelineStreamTest, StreamedEqualsRunBitwise) {
  std::vector<at::Tensor> single, streamed;
  auto errors =
      onRanks(2, options(2, 6), [&](Pipeline &p, int r) -> llvm::Error {
        for (int b = 0; b < 4; ++b) {
          std::vector<c10::IValue> in;
          if (p.needsInputs())
            in.push_back(batch(b));
          auto out = p.run(in);
          if (!out)
            return out.takeError();
          if (r == 1)
            single.push_back((*out)[0].toTensor());
        }
        for (int b = 0; b < 4; ++b) {
          std::vector<c10::IValue> in;
          if (p.needsInputs())
            in.push_back(batch(b));
          if (llvm::Error err = p.submit(std::move(in)))
            return err;
        }
        if (llvm::Error err = p.flush())
          return err;
        while (auto out = p.next())
          if (r == 1)
            streamed.push_back((*out)[0].toTensor());
        return llvm::Error::success();
      });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  ASSERT_EQ(single.size(), 4u);
  ASSERT_EQ(streamed.size(), 4u);
  for (int b = 0; b < 4; ++b)
    EXPECT_TRUE(at::equal(single[b], streamed[b])) << "batch " << b;
}

TEST_F(PipelineStreamTest, ErrorsNameTheirBatch) {
  // One rank holds both stages, so a failure needs no peer to report it.
  auto errors = onRanks(1, options(3, 9), [&](Pipeline &p, int) -> llvm::Error {
    EXPECT_EQ(p.windowBatches(), 3);
    if (llvm::Error err = p.submit({batch(0)}))
      return err;
    // Two rows cannot make three microbatches: refused at once, named.
    llvm::Error err = p.submit({at::ones({2, 1})}, "batch 7 ('g.pt')");
    EXPECT_EQ(llvm::toString(std::move(err)),
              "batch 7 ('g.pt'): microbatches 3 exceeds the batch size 2");
    EXPECT_EQ(p.queuedBatches(), 0);
    // The default label counts submit() calls from 0, refused ones too.
    if (llvm::Error err = p.submit({batch(1)}))
      return err;
    err = p.submit({at::ones({4, 1}), at::ones({4, 1})});
    EXPECT_EQ(llvm::toString(std::move(err)),
              "batch 3: the model takes 1 input, got 2");
    return llvm::Error::success();
  });
  EXPECT_EQ(errors, std::vector<std::string>(1));
}
