//===- tools/ppc/LaunchOptions.cpp - A launch's options and environment ---===//
//
// This file implements the option checks and the worker environment of
// Launcher.h: validateLaunchOptions(), procsPerNode(), newJobToken() and
// launchEnvironment(), apart from the processes ppc::launch runs.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Launcher.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/platform/Duration.h"
#include "runtime/platform/Threads.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <random>

#include <unistd.h>

namespace ppc {

llvm::Error validateLaunchOptions(const LaunchOptions &options) {
  if (llvm::Error err = checkOption(
          "nprocPerNode",
          IntegerRule{1, kMaxProcsPerNode}.problem(options.nprocPerNode)))
    return err;
  if (llvm::Error err = checkOption(
          "nnodes", IntegerRule{1, INT_MAX}.problem(options.nnodes)))
    return err;
  if (llvm::Error err = checkOption(
          "nodeRank",
          IntegerRule{0, options.nnodes - 1}.problem(options.nodeRank)))
    return err;
  // Every rank, nodeRank * nprocPerNode + localRank, is below the world
  // size: when that fits an int, so does each rank.
  int64_t world = int64_t(options.nnodes) * options.nprocPerNode;
  if (world > INT_MAX)
    return makeError(llvm::formatv("--nnodes {0} times --nproc-per-node {1} "
                                   "is {2} ranks; WORLD_SIZE holds at most {3}",
                                   options.nnodes, options.nprocPerNode, world,
                                   INT_MAX)
                         .str());
  if (llvm::Error err = checkOption(
          "masterPort", IntegerRule{0, 65535}.problem(options.masterPort)))
    return err;
  if (options.timeoutSeconds)
    if (llvm::Error err = checkOption(
            "timeoutSeconds",
            RealRule::seconds(kMinTimeoutSeconds, kMaxDurationSeconds)
                .problem(*options.timeoutSeconds)))
      return err;
  if (llvm::Error err = checkOption("gracePeriodSeconds",
                                    RealRule::seconds(0, kMaxDurationSeconds)
                                        .problem(options.gracePeriodSeconds)))
    return err;
  if (options.command.empty() || options.command[0].empty())
    return makeError("no command to launch (put it after '--')");
  return llvm::Error::success();
}

llvm::Expected<int> procsPerNode(llvm::StringRef value, int cpus, int gpus) {
  int count = 0;
  if (value == "cpu") {
    count = cpus;
  } else if (value == "gpu") {
    if (gpus <= 0)
      return llvm::make_error<OptionError>(
          "nprocPerNode", "gpu: this machine has no GPU that this ppc's "
                          "LibTorch can use (CUDA is not available)");
    count = gpus;
  } else if (value == "auto") {
    count = gpus > 0 ? gpus : cpus;
  } else {
    int64_t parsed = 0;
    std::string problem = IntegerRule{1, kMaxProcsPerNode}.parse(value, parsed);
    if (!problem.empty())
      return llvm::make_error<OptionError>("nprocPerNode",
                                           problem + ", auto, cpu or gpu");
    return static_cast<int>(parsed);
  }
  if (count > kMaxProcsPerNode)
    return llvm::make_error<OptionError>(
        "nprocPerNode",
        llvm::formatv("{0} is {1} workers, more than the {2} one node starts",
                      value, count, kMaxProcsPerNode)
            .str());
  return std::max(count, 1);
}

std::string newJobToken() {
  std::random_device device;
  uint64_t value = (static_cast<uint64_t>(device()) << 32) | device();
  return llvm::formatv("{0:x-16}", value).str();
}

std::vector<std::pair<std::string, std::string>>
launchEnvironment(const LaunchOptions &options, int localRank) {
  // validateLaunchOptions() keeps both within an int.
  int rank = options.nodeRank * options.nprocPerNode + localRank;
  int worldSize = options.nnodes * options.nprocPerNode;
  std::vector<std::pair<std::string, std::string>> vars{
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(worldSize)},
      {"LOCAL_RANK", std::to_string(localRank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nprocPerNode)},
      {"GROUP_RANK", std::to_string(options.nodeRank)},
      {"GROUP_WORLD_SIZE", std::to_string(options.nnodes)},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(worldSize)},
      {"MASTER_ADDR", options.masterAddr},
      {"MASTER_PORT", std::to_string(options.masterPort)},
      // The launcher relays whole lines: a rank cannot redraw a progress
      // line through it, but prints plain ones for a person at a terminal
      // (tools/ppc/Progress.h).
      {"PPC_LAUNCH_TTY", ::isatty(2) ? "1" : "0"},
  };
  // Like torchrun, workers that share a node get OMP_NUM_THREADS unless the
  // user set it; unlike torchrun's 1, each gets its share of the cores, the
  // default of `ppc run --threads` (defaultThreads). OpenBLAS's pthread build
  // sizes its pool from this variable when it is loaded, can never shrink
  // it, and boundThreads never grows it (runtime/platform/Threads.h): without
  // the variable every worker would start a pool as large as the machine, with
  // 1 its matrix products would run on one thread. A single worker keeps
  // the environment as it is.
  if (options.nprocPerNode > 1 && !std::getenv("OMP_NUM_THREADS"))
    vars.emplace_back("OMP_NUM_THREADS",
                      std::to_string(defaultThreads(options.nprocPerNode)));
  if (options.launcherHostsStore) {
    vars.emplace_back("TORCHELASTIC_USE_AGENT_STORE", "True");
    vars.emplace_back("TORCHELASTIC_RESTART_COUNT", "0");
  }
  if (!options.jobToken.empty())
    vars.emplace_back("PPC_JOB_TOKEN", options.jobToken);
  vars.insert(vars.end(), options.extraEnvironment.begin(),
              options.extraEnvironment.end());
  return vars;
}

} // namespace ppc
