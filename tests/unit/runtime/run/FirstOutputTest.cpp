//===- tests/unit/runtime/run/FirstOutputTest.cpp -------------------------===//
//
// What first_output_ms counts.
//
// Tests that RunStats::firstOutputMs does not count a rank's wait for a
// slower rank's set-up: `ppc run` meets the other ranks before its first
// run(), a library user's program need not, and both must report the same
// quantity. Two ranks run in threads of this process over Gloo; the stages
// are TorchScript modules defined here.
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

#include <chrono>
#include <string>
#include <thread>

using namespace ppc;

namespace {
using ppc::testing::freePort;

/// Two stages, one per rank: a = x * 2 on rank 0, b = a + 1 on rank 1.
class FirstOutputTest : public ppc::testing::TwoStageJob {};
} // namespace

TEST_F(FirstOutputTest, AWaitForASlowerRankIsNotCounted) {
  // Rank 0 (the input root) takes this long between create() and run(), as
  // a rank still reading its input would; rank 1 enters run() at once and
  // waits inside it.
  const std::chrono::milliseconds delay(2000);
  int port = freePort();
  RunStats stats[2];
  std::string errors[2];
  std::vector<at::Tensor> outputs(2);
  auto rank = [&](int r) {
    LaunchEnv env;
    env.rank = env.localRank = r;
    env.worldSize = env.localWorldSize = 2;
    env.masterPort = port;
    RunOptions options;
    options.microbatches = 2;
    options.useMetaCache = false;
    options.timeout = std::chrono::milliseconds(30000);
    options.threads = 1;
    auto pipeline = Pipeline::create(path("manifest.json"), env, options);
    if (!pipeline) {
      errors[r] = llvm::toString(pipeline.takeError());
      return;
    }
    std::vector<c10::IValue> inputs;
    if (r == 0) {
      std::this_thread::sleep_for(delay);
      inputs.push_back(at::arange(4, at::kFloat).view({4, 1}));
    }
    auto out = (*pipeline)->run(inputs);
    if (!out) {
      errors[r] = llvm::toString(out.takeError());
      return;
    }
    if (!out->empty())
      outputs[r] = (*out)[0].toTensor();
    stats[r] = (*pipeline)->stats();
    if (llvm::Error err = (*pipeline)->finish())
      errors[r] = llvm::toString(std::move(err));
  };
  std::thread rank0(rank, 0), rank1(rank, 1);
  rank0.join();
  rank1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  at::Tensor x = at::arange(4, at::kFloat).view({4, 1});
  ASSERT_TRUE(outputs[1].defined());
  EXPECT_TRUE(at::equal(outputs[1], x * 2 + 1)) << outputs[1];
  // Rank 1's run() included the wait, its first_output_ms does not.
  double delayMs = static_cast<double>(delay.count());
  EXPECT_GE(stats[1].totalMs, 0.9 * delayMs);
  EXPECT_LT(stats[1].firstOutputMs, 0.5 * delayMs);
  EXPECT_LT(stats[0].firstOutputMs, 0.5 * delayMs);
}
