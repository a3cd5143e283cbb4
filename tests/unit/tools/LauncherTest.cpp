//===- tests/unit/tools/LauncherTest.cpp - Launch options, unlaunched -----===//
#include "tools/ppc/Launcher.h"

#include "runtime/platform/Duration.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>

#include <unistd.h>

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

TEST(LauncherTest, ConsequenceLinesAreRecognised) {
  EXPECT_EQ(consequenceNote(3),
            "; a consequence: this rank stopped because of rank 3");
  std::string line = "lost rank 3 (Connection closed by peer, while waiting "
                     "for m)" +
                     consequenceNote(3);
  EXPECT_TRUE(isConsequenceLine(line));
  EXPECT_TRUE(isConsequenceLine(line + "\n"));
  EXPECT_TRUE(isConsequenceLine("batch 2 ('c.pt'): " + line));
  // A cause that merely mentions the words, or a note cut short, is not.
  EXPECT_FALSE(isConsequenceLine(line + " and more"));
  EXPECT_FALSE(isConsequenceLine("lost rank 3 (x)"));
  EXPECT_FALSE(
      isConsequenceLine("; a consequence: this rank stopped because of rank "));
  EXPECT_FALSE(isConsequenceLine("stage 0 failed: bad input"));
}

TEST(LauncherTest, ProcsPerNodeReadsTorchrunsWords) {
  auto count = [](llvm::StringRef value, int cpus, int gpus) {
    auto got = procsPerNode(value, cpus, gpus);
    return got ? std::to_string(*got) : llvm::toString(got.takeError());
  };
  EXPECT_EQ(count("3", 16, 0), "3");
  EXPECT_EQ(count("cpu", 16, 2), "16");
  EXPECT_EQ(count("gpu", 16, 2), "2");
  EXPECT_EQ(count("auto", 16, 2), "2");
  EXPECT_EQ(count("auto", 16, 0), "16");
  EXPECT_EQ(count("gpu", 16, 0),
            "nprocPerNode gpu: this machine has no GPU that this ppc's "
            "LibTorch can use (CUDA is not available)");
  EXPECT_EQ(count("cpu", 2048, 0),
            "nprocPerNode cpu is 2048 workers, more than the 1024 one node "
            "starts");
  EXPECT_EQ(count("0", 16, 0),
            "nprocPerNode 0 is not an integer in 1..1024, auto, cpu or gpu");
  EXPECT_EQ(count("x", 16, 0), "nprocPerNode 'x' is not an integer in "
                               "1..1024, auto, cpu or gpu");
}

namespace {
/// Runs `script` with sh as `procs` workers; returns launch()'s error and
/// what the workers printed to stderr.
std::pair<std::string, std::string> launchScript(int procs,
                                                 const std::string &script) {
  LaunchOptions options = valid();
  options.nprocPerNode = procs;
  options.gracePeriodSeconds = 1;
  options.command = {"sh", "-c", script};
  FILE *err = std::tmpfile();
  options.stderrFd = fileno(err);
  options.stdoutFd = fileno(err);
  llvm::Error result = launch(options);
  std::string message = result ? llvm::toString(std::move(result)) : "";
  std::string text;
  std::rewind(err);
  for (int c; (c = std::fgetc(err)) != EOF;)
    text += static_cast<char>(c);
  std::fclose(err);
  return {message, text};
}
} // namespace

TEST(LauncherTest, TheRootCauseWinsOverEarlierConsequences) {
  // Ranks 1 and 2 fail first, only because they lost rank 0; rank 0's own
  // error comes later, within the settle time, and is the one reported.
  std::string note = consequenceNote(0);
  auto [message, text] = launchScript(
      3, "if [ $RANK = 0 ]; then sleep 0.5; echo 'error: stage 0 failed: "
         "bad input' >&2; exit 2; fi; echo \"error: lost rank 0 (closed)" +
             note + "\" >&2; exit 2");
  EXPECT_EQ(message, "rank 0 exited with status 2: stage 0 failed: bad input")
      << text;
  EXPECT_NE(text.find("[rank 1] error: lost rank 0 (closed)" + note + "\n"),
            std::string::npos)
      << text;
}

TEST(LauncherTest, AKilledRankIsTheCauseOfItsPeersLosingIt) {
  // Rank 0 reports losing rank 1 before rank 1 is seen to die (kill -9 from
  // outside, not from the launcher).
  auto [message, text] =
      launchScript(2, "if [ $RANK = 1 ]; then sleep 0.3; kill -KILL $$; fi; "
                      "echo \"error: lost rank 1 (closed)" +
                          consequenceNote(1) + "\" >&2; exit 2");
  EXPECT_EQ(message, "rank 1 killed by signal SIGKILL") << text;
  EXPECT_NE(text.find("[rank 0] error: lost rank 1 (closed)"),
            std::string::npos)
      << text;
}

TEST(LauncherTest, OnlyConsequencesReportTheFirst) {
  // Rank 1 loses rank 0, which then hangs until the launcher stops it: the
  // first failure observed is all there is to say.
  auto [message, text] = launchScript(
      2, "if [ $RANK = 0 ]; then exec sleep 30; fi; echo \"error: lost rank "
         "0 (no answer within 1 s)" +
             consequenceNote(0) + "\" >&2; exit 2");
  EXPECT_EQ(message, "rank 1 exited with status 2: lost rank 0 (no answer "
                     "within 1 s)" +
                         consequenceNote(0))
      << text;
}
