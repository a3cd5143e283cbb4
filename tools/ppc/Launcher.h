//===- tools/ppc/Launcher.h - Start the worker processes of a job ---------===//
//
// The library part of `ppc launch`, a built-in torchrun: it starts one worker
// process per local rank with the torchrun environment (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT),
// prefixes every line they print with "[rank R] ", forwards SIGINT, SIGTERM
// and SIGHUP to them, and stops all of them as soon as one fails.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_LAUNCHER_H
#define PPC_TOOLS_PPC_LAUNCHER_H

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ppc {

/// The most worker processes one node's launch starts (each holds two
/// pipes open in the launcher): a bound on the work done before any check
/// a worker could make, not a guess at a useful size.
constexpr int kMaxProcsPerNode = 1024;

/// What to launch and where. The names mirror `ppc launch`'s options, and
/// validation errors name those options.
struct LaunchOptions {
  /// Worker processes on this node (local ranks 0..nprocPerNode-1), at most
  /// kMaxProcsPerNode.
  int nprocPerNode = 1;
  /// Nodes in the job; WORLD_SIZE = nnodes * nprocPerNode, which must fit
  /// an int.
  int nnodes = 1;
  /// This node's index; RANK = nodeRank * nprocPerNode + localRank.
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  /// 0 is not passed to workers: serve a StoreHost on port 0 first
  /// (runtime/link/Rendezvous.h) and pass its port with launcherHostsStore.
  int masterPort = 29500;
  /// Whether this process serves the rendezvous store on masterPort:
  /// workers get TORCHELASTIC_USE_AGENT_STORE=True (and
  /// TORCHELASTIC_RESTART_COUNT=0), as under torchrun.
  bool launcherHostsStore = false;
  /// Passed to workers as PPC_JOB_TOKEN when not empty; ranks of different
  /// jobs that meet at one rendezvous refuse each other.
  std::string jobToken;
  /// Stop everything and fail after this many seconds (kMinTimeoutSeconds
  /// to kMaxDurationSeconds, runtime/platform/Duration.h); none when empty.
  std::optional<double> timeoutSeconds;
  /// How long workers get to exit after SIGTERM before SIGKILL, in seconds
  /// (0 to kMaxDurationSeconds).
  double gracePeriodSeconds = 5;
  /// Set for every worker after the variables above (replacing inherited
  /// ones of the same name): OPENBLAS_CORETYPE chosen by ppc launch.
  std::vector<std::pair<std::string, std::string>> extraEnvironment;
  /// The program (looked up in PATH) and its arguments.
  std::vector<std::string> command;
  /// Where the prefixed worker stdout and stderr lines go.
  int stdoutFd = 1;
  int stderrFd = 2;
};

/// Checks `options` without starting anything. Errors, each an OptionError
/// naming the field (the CLI shows its flag) except the last two:
///   "nprocPerNode 0 is not an integer in 1..1024"
///   "nnodes 0 is not an integer in 1..2147483647"
///   "nodeRank 2 is not an integer in 0..1"
///   "masterPort 70000 is not an integer in 0..65535"
///   "timeoutSeconds 1e+10 is not a number of seconds in 0.001..604800"
///   "gracePeriodSeconds inf is not a number of seconds in 0..604800"
///   "--nnodes N times --nproc-per-node P is W ranks; WORLD_SIZE holds at
///    most 2147483647"
///   "no command to launch (put it after '--')"
llvm::Error validateLaunchOptions(const LaunchOptions &options);

/// How long the launcher waits, after a worker failed only as a consequence
/// of another rank, before it stops the rest (step 3 of launch()).
constexpr double kConsequenceSettleSeconds = 2;

/// What a rank appends to its one error line when it stopped only because
/// it lost rank `lostRank` (a LostRankError: the peer died, hung or never
/// came), so that the line reads as a consequence under any launcher:
/// "; a consequence: this rank stopped because of rank R".
std::string consequenceNote(int lostRank);

/// Whether `line`, a worker's error line, ends with a consequenceNote().
bool isConsequenceLine(llvm::StringRef line);

/// The number of workers `ppc launch --nproc-per-node VALUE` starts, as
/// torchrun reads VALUE: an integer in 1..kMaxProcsPerNode; "cpu": `cpus`;
/// "gpu": `gpus`; "auto": `gpus` when there is one, else `cpus`. Errors (an
/// OptionError for the field "nprocPerNode"): "'x' is not an integer in
/// 1..1024, auto, cpu or gpu"; "gpu: this machine has no GPU that this
/// ppc's LibTorch can use (CUDA is not available)"; "cpu is 2048 workers,
/// more than the 1024 one node starts". A count of 0 reads as 1.
llvm::Expected<int> procsPerNode(llvm::StringRef value, int cpus, int gpus);

/// A fresh random job token (16 hex digits).
std::string newJobToken();

/// The variables set for local rank `localRank` of `options` that
/// validateLaunchOptions() accepts, in a fixed order (the
/// store and token variables, where set, then options.extraEnvironment
/// last); the rest of the environment is inherited.
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
///      1 MiB is split (each piece prefixed). The last stderr line of each
///      worker that starts with "error: " is kept as its error, and an
///      error line that another rank printed first is not forwarded: ranks
///      that check the same thing fail alike, and the error shows once.
///   3. On SIGINT/SIGTERM/SIGHUP to the launcher, the timeout, or a worker
///      that fails for a reason of its own, signals every running worker's
///      process group (SIGTERM, or the received signal), waits up to
///      gracePeriodSeconds, then SIGKILLs. A worker whose error is only a
///      consequence (isConsequenceLine()) starts that stop
///      kConsequenceSettleSeconds later, so that the rank it lost can still
///      report its own error rather than be stopped before it.
///   4. Returns once every worker has exited.
/// Errors, after all workers are gone:
///   any validateLaunchOptions() error (nothing is started)
///   "cannot run 'CMD': <strerror>" (the program cannot be executed)
///   "timed out after S seconds"
///   "interrupted by SIGxxx"
///   "cannot start rank R: <reason>" (pipe or fork failed)
///   else the root cause among the failed workers, as torchrun's "first
///   observed failure": the first, in the order their exits were seen, that
///   failed for a reason of its own (an error line that is not a
///   consequence; without one, an exit or a signal that came before the
///   launcher signalled it), else the first failed worker:
///   "rank R exited with status S", "rank R killed by signal SIGxxx", each
///   followed by ": ERROR" (its error line without "error: ") when it
///   printed one; when other ranks printed that line too, a line "note:
///   ranks A and B reported the same error" comes before it.
///   Before that, a stuck job: when every failed worker only lost a peer,
///   the status records the ranks wrote (PPC_STATUS_DIR, a private
///   directory the launcher creates and removes; runtime/exec/Executor.h)
///   are followed from the first failed worker that wrote one to the rank
///   its chain of waits ends at (tools/ppc/StuckReport.h). When that rank
///   was still running when the settle time ended (its /proc state then):
///   "rank R is stuck (stopped by a signal, state T): rank W waited for it
///   at action I of N (KIND mb M stage S); ranks A and B wait for it"
///   ("running but never answered, state X" for any other state); when
///   the chain closes on itself: "ranks A and B wait for each other: rank A
///   (POSITION) waits for rank B (POSITION) waits for rank A; ...".
/// The first four win over any worker's failure. Installs handlers for
/// SIGINT, SIGTERM, SIGHUP, SIGCHLD and SIGPIPE while it runs and restores
/// the previous ones; one launch per process at a time.
llvm::Error launch(const LaunchOptions &options);

} // namespace ppc

#endif // PPC_TOOLS_PPC_LAUNCHER_H
