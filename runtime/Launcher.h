//===- runtime/Launcher.h - Start the worker processes of a job -*- C++ -*-===//
//
// The library part of `ppc launch`, a built-in torchrun: it starts one worker
// process per local rank with the torchrun environment (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT),
// prefixes every line they print with "[rank R] ", forwards SIGINT, SIGTERM
// and SIGHUP to them, and stops all of them as soon as one fails.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LAUNCHER_H
#define PPC_RUNTIME_LAUNCHER_H

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ppc {

/// What to launch and where. The names mirror `ppc launch`'s options, and
/// validation errors name those options.
struct LaunchOptions {
  /// Worker processes on this node (local ranks 0..nprocPerNode-1).
  int nprocPerNode = 1;
  /// Nodes in the job; WORLD_SIZE = nnodes * nprocPerNode.
  int nnodes = 1;
  /// This node's index; RANK = nodeRank * nprocPerNode + localRank.
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  /// 0 is not passed to workers: serve a StoreHost on port 0 first
  /// (runtime/Rendezvous.h) and pass its port with launcherHostsStore.
  int masterPort = 29500;
  /// Whether this process serves the rendezvous store on masterPort:
  /// workers get TORCHELASTIC_USE_AGENT_STORE=True (and
  /// TORCHELASTIC_RESTART_COUNT=0), as under torchrun.
  bool launcherHostsStore = false;
  /// Passed to workers as PPC_JOB_TOKEN when not empty; ranks of different
  /// jobs that meet at one rendezvous refuse each other.
  std::string jobToken;
  /// Stop everything and fail after this many seconds; none when empty.
  std::optional<double> timeoutSeconds;
  /// How long workers get to exit after SIGTERM before SIGKILL.
  double gracePeriodSeconds = 5;
  /// The program (looked up in PATH) and its arguments.
  std::vector<std::string> command;
  /// Where the prefixed worker stdout and stderr lines go.
  int stdoutFd = 1;
  int stderrFd = 2;
};

/// Checks `options` without starting anything. Errors:
///   "--nproc-per-node must be at least 1 (got N)"
///   "--nnodes must be at least 1 (got N)"
///   "--node-rank must be in [0, NNODES) (got R)"
///   "--master-port must be in [0, 65535] (got P)"
///   "--timeout must be positive (got S)"
///   "--grace-period must not be negative (got S)"
///   "no command to launch (put it after '--')"
llvm::Error validateLaunchOptions(const LaunchOptions &options);

/// A fresh random job token (16 hex digits).
std::string newJobToken();

/// The variables set for local rank `localRank`, in a fixed order (the
/// store and token variables last, where set); the rest of the environment
/// is inherited.
std::vector<std::pair<std::string, std::string>>
launchEnvironment(const LaunchOptions &options, int localRank);

/// Runs the job to completion and succeeds when every worker exits with
/// status 0. The steps:
///   1. Starts worker l with launchEnvironment(options, l), in its own process
///      group (so a terminal's Ctrl-C reaches only the launcher, which
///      forwards it once), stdin from /dev/null, and a parent-death SIGTERM.
///   2. Forwards worker stdout lines to options.stdoutFd and stderr lines to
///      options.stderrFd, each prefixed "[rank R] " and written whole; a
///      last line without '\n' is completed at exit, and a line longer than
///      1 MiB is split (each piece prefixed).
///   3. On the first failure, SIGINT/SIGTERM/SIGHUP to the launcher, or the
///      timeout, signals every running worker's process group (SIGTERM, or
///      the received signal), waits up to gracePeriodSeconds, then SIGKILLs.
///   4. Returns once every worker has exited.
/// Errors, after all workers are gone (the first cause wins):
///   any validateLaunchOptions() error (nothing is started)
///   "cannot run 'CMD': <strerror>" (the program cannot be executed)
///   "rank R exited with status S"
///   "rank R killed by signal SIGxxx"
///   "timed out after S seconds"
///   "interrupted by SIGxxx"
///   "cannot start rank R: <reason>" (pipe or fork failed)
/// Installs handlers for SIGINT, SIGTERM, SIGHUP, SIGCHLD and SIGPIPE while
/// it runs and restores the previous ones; one launch per process at a time.
llvm::Error launch(const LaunchOptions &options);

} // namespace ppc

#endif // PPC_RUNTIME_LAUNCHER_H
