//===- tests/unit/runtime/LauncherTest.cpp - Launch options, unlaunched ---===//
#include "runtime/Launcher.h"

#include "runtime/Duration.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <limits>

using namespace ppc;

namespace {
LaunchOptions valid() {
  LaunchOptions options;
  options.command = {"true"};
  return options;
}

std::string errorOf(const LaunchOptions &options) {
  llvm::Error err = validateLaunchOptions(options);
  return err ? llvm::toString(std::move(err)) : std::string();
}
} // namespace

TEST(LauncherTest, CountsAreBounded) {
  LaunchOptions options = valid();
  options.nprocPerNode = kMaxProcsPerNode;
  EXPECT_EQ(errorOf(options), "");
  options.nprocPerNode = kMaxProcsPerNode + 1;
  EXPECT_EQ(errorOf(options), "nprocPerNode 1025 is not an integer in 1..1024");
  options = valid();
  options.nnodes = 3;
  options.nodeRank = 3;
  EXPECT_EQ(errorOf(options), "nodeRank 3 is not an integer in 0..2");
}

TEST(LauncherTest, TheWorldMustFitAnInt) {
  // nnodes * nprocPerNode computed in an int would wrap to a small or
  // negative WORLD_SIZE.
  LaunchOptions options = valid();
  options.nnodes = 536870912;
  options.nodeRank = 536870911;
  options.nprocPerNode = 8;
  EXPECT_EQ(errorOf(options),
            "--nnodes 536870912 times --nproc-per-node 8 is 4294967296 ranks; "
            "WORLD_SIZE holds at most 2147483647");
  // The largest world that fits: every RANK of the last node fits too.
  options.nnodes = INT_MAX / 8;
  options.nodeRank = options.nnodes - 1;
  EXPECT_EQ(errorOf(options), "");
  std::vector<std::pair<std::string, std::string>> vars =
      launchEnvironment(options, 7);
  EXPECT_EQ(vars[0], std::make_pair(std::string("RANK"),
                                    std::to_string(INT_MAX / 8 * 8 - 1)));
  EXPECT_EQ(vars[1], std::make_pair(std::string("WORLD_SIZE"),
                                    std::to_string(INT_MAX / 8 * 8)));
}

TEST(LauncherTest, DurationsAreBounded) {
  LaunchOptions options = valid();
  options.timeoutSeconds = kMaxDurationSeconds;
  options.gracePeriodSeconds = kMaxDurationSeconds;
  EXPECT_EQ(errorOf(options), "");
  options.gracePeriodSeconds = 0;
  EXPECT_EQ(errorOf(options), "");
  for (double bad : {1e7, std::numeric_limits<double>::infinity(), std::nan(""),
                     0.0, 1e-4}) {
    options.timeoutSeconds = bad;
    EXPECT_NE(errorOf(options), "") << bad;
  }
  options.timeoutSeconds = 2e300;
  EXPECT_EQ(errorOf(options), "timeoutSeconds 2e+300 is not a number of "
                              "seconds in 0.001..604800");
  options.timeoutSeconds.reset();
  options.gracePeriodSeconds = -std::numeric_limits<double>::infinity();
  EXPECT_EQ(errorOf(options), "gracePeriodSeconds -inf is not a number of "
                              "seconds in 0..604800");
}
