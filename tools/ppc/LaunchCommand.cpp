//===- tools/ppc/LaunchCommand.cpp - ppc launch ---------------------------===//
//
// `ppc launch`: the built-in torchrun. CLI11 wiring only; the work is
// ppc::launch() in tools/ppc/Launcher.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/link/Rendezvous.h"
#include "runtime/platform/Duration.h"
#include "tools/ppc/BlasCheck.h"
#include "tools/ppc/Launcher.h"
#include "tools/ppc/OptionChecks.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <torch/cuda.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

namespace ppc {

namespace {
struct LaunchArgs {
  LaunchOptions options;
  /// --nproc-per-node as given: a number, auto, cpu or gpu.
  std::string nprocPerNode;
  bool standalone = false;
  double timeoutSeconds = 0;
  CLI::Option *timeout = nullptr;
};

/// --nproc-per-node's check at parsing: a number in range, or a word that
/// procsPerNode() reads once the machine is looked at.
CLI::Validator procsOption() {
  return CLI::Validator(
      [](std::string &text) -> std::string {
        if (text == "auto" || text == "cpu" || text == "gpu")
          return "";
        int64_t value = 0;
        std::string problem =
            IntegerRule{1, kMaxProcsPerNode}.parse(text, value);
        return problem.empty() ? "" : problem + ", auto, cpu or gpu";
      },
      "1.." + std::to_string(kMaxProcsPerNode) + "|auto|cpu|gpu");
}

/// The GPUs this ppc's LibTorch sees (0 without CUDA); asked only for
/// --nproc-per-node auto or gpu, as torchrun does.
int gpuCount() {
  try {
    return static_cast<int>(torch::cuda::device_count());
  } catch (const std::exception &) {
    return 0;
  }
}

/// The test hooks of the ranks' kernel plan (tools/ppc/BlasCheck.h), read
/// here and nowhere else.
BlasTestHooks blasTestHooks() {
  BlasTestHooks hooks;
  hooks.coreTypeIsDefault =
      std::getenv("PPC_TEST_BLAS_CORETYPE_IS_DEFAULT") != nullptr;
  if (const char *candidate = std::getenv("PPC_TEST_BLAS_CANDIDATE"))
    hooks.candidate = candidate;
  return hooks;
}

/// The ranks' BLAS kernel (tools/ppc/BlasCheck.h, planRankKernel()): when
/// this ppc's OpenBLAS picked a kernel below the CPU and the user did not set
/// OPENBLAS_CORETYPE, the best core type is checked once in a child and, if
/// it computes correctly, set for the ranks. The note or warning is printed
/// unless the command passes --quiet (ppc run's and ppc train's).
void chooseRankKernel(LaunchOptions &options, const BlasTestHooks &hooks) {
  bool userSet = std::getenv("OPENBLAS_CORETYPE") && !hooks.coreTypeIsDefault;
  RankKernelPlan plan = planRankKernel(
      loadedBlas(), hostCpuFeatures(), userSet, hooks.candidate,
      [](llvm::StringRef core) {
        return checkCoreType(
            core, llvm::sys::fs::getMainExecutable(
                      "ppc", reinterpret_cast<void *>(&addLaunchCommand)));
      });
  if (!plan.coreType.empty())
    options.extraEnvironment.emplace_back("OPENBLAS_CORETYPE", plan.coreType);
  if (!plan.warning.empty())
    options.extraEnvironment.emplace_back("PPC_BLAS_WARNED", "1");
  if (llvm::is_contained(options.command, "--quiet"))
    return;
  for (const std::string &line : {plan.note, plan.warning})
    if (!line.empty())
      llvm::errs() << line << "\n";
}
} // namespace

/// 32 bytes from /dev/urandom in hex: a new job's PPC_JOB_SECRET.
static llvm::Expected<std::string> newJobSecret() {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  unsigned char bytes[32];
  size_t got = 0;
  while (fd >= 0 && got < sizeof(bytes)) {
    ssize_t n = ::read(fd, bytes + got, sizeof(bytes) - got);
    if (n <= 0 && !(n < 0 && errno == EINTR))
      break;
    got += n > 0 ? static_cast<size_t>(n) : 0;
  }
  int error = errno;
  if (fd >= 0)
    ::close(fd);
  if (got < sizeof(bytes))
    return makeError(std::string("cannot read /dev/urandom for the job's "
                                 "secret: ") +
                     std::strerror(error));
  return llvm::toHex(llvm::ArrayRef<uint8_t>(bytes), /*LowerCase=*/true);
}

static llvm::Expected<int> runLaunch(const LaunchArgs &args) {
  LaunchOptions options = args.options;
  if (args.timeout->count())
    options.timeoutSeconds = args.timeoutSeconds;
  bool countsDevices =
      args.nprocPerNode == "auto" || args.nprocPerNode == "gpu";
  auto procs = procsPerNode(
      args.nprocPerNode, static_cast<int>(std::thread::hardware_concurrency()),
      countsDevices ? gpuCount() : 0);
  if (!procs)
    return procs.takeError();
  options.nprocPerNode = *procs;
  // torchrun --standalone: one node, a rendezvous on a free local port.
  if (args.standalone) {
    options.masterAddr = "127.0.0.1";
    options.masterPort = 0;
  }
  if (llvm::Error err = validateLaunchOptions(options))
    return err;
  chooseRankKernel(options, blasTestHooks());
  // One node's launch can name its job; nodes of a multi-node job share
  // whatever PPC_JOB_TOKEN the user gives them all (inherited).
  if (options.nnodes == 1 && !std::getenv("PPC_JOB_TOKEN"))
    options.jobToken = newJobToken();
  // The job's secret authenticates what its ranks exchange through the
  // rendezvous store (docs/security.md); it travels in their environment
  // only. The launchers of a multi-node job cannot agree on a new one.
  if (const char *given = std::getenv("PPC_JOB_SECRET"); !given || !*given) {
    if (options.nnodes > 1)
      return makeError("--nnodes " + std::to_string(options.nnodes) +
                       " needs PPC_JOB_SECRET, the same on every node (e.g. "
                       "from 'openssl rand -hex 32'), so that the ranks can "
                       "trust each other's rendezvous values; see "
                       "docs/security.md");
    auto secret = newJobSecret();
    if (!secret)
      return secret.takeError();
    options.extraEnvironment.emplace_back("PPC_JOB_SECRET", *secret);
  }
  // Port 0: serve the rendezvous here on a port bound now and held for the
  // whole job, so no other process can take it before rank 0 would.
  std::unique_ptr<StoreHost> store;
  if (options.masterPort == 0) {
    if (options.nnodes > 1)
      return makeError(
          "--master-port 0 needs --nnodes 1: the nodes must agree on the port");
    auto host = StoreHost::start(0);
    if (!host)
      return host.takeError();
    store = std::move(*host);
    options.masterPort = store->port();
    options.launcherHostsStore = true;
    llvm::errs() << "note: using MASTER_PORT=" << options.masterPort << "\n";
  }
  if (llvm::Error err = launch(options))
    return err;
  return 0;
}

Command addLaunchCommand(CLI::App &parent) {
  auto args = std::make_shared<LaunchArgs>();
  LaunchOptions &options = args->options;
  CLI::App *app = parent.add_subcommand(
      "launch", "Run a command as N worker processes with the torchrun "
                "environment (a built-in torchrun)");
  app->footer(
      "Starts --nproc-per-node copies of CMD on this node, each with RANK, "
      "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, "
      "GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR and "
      "MASTER_PORT set; the rest of the environment is inherited.\n"
      "Every line a worker prints goes to the same stream (stdout or "
      "stderr) of ppc, prefixed with '[rank R] '.\n"
      "Workers run in their own process groups with stdin from /dev/null; "
      "SIGINT, SIGTERM and SIGHUP sent to ppc are forwarded to all of them "
      "(so a Ctrl-C reaches each worker once).\n"
      "As soon as one worker fails (2 s later when it only lost another "
      "rank), the others get SIGTERM, then SIGKILL "
      "after the grace period, and ppc reports 'error: rank R exited with "
      "status S' (or 'killed by signal SIG'). Exit 0 when every worker "
      "exits with 0, 2 otherwise.\n\n"
      "A worker whose error line says it only lost another rank ('lost "
      "rank R (...); a consequence: ...') is not taken for the cause: ppc "
      "then ends with the first failure of a rank's own, 'error: rank R "
      "exited with status S: ITS ERROR', as torchrun's root cause.\n"
      "When ppc's OpenBLAS runs a kernel slower than the CPU allows (its "
      "generic Prescott kernel on an AVX-512 CPU) and OPENBLAS_CORETYPE is "
      "not set, the best core type is checked numerically once and set for "
      "the workers (docs/runtime.md).\n"
      "torchrun's spellings work too: --nproc_per_node, --node_rank, "
      "--master_addr, --master_port, '--option=value', --standalone.\n\n"
      "Example: ppc launch --nproc-per-node 4 -- python3 train.py "
      "--epochs 3");

  app->add_option("--nproc-per-node,--nproc_per_node", args->nprocPerNode,
                  "Worker processes to start on this node: 1 to 1024, or as "
                  "torchrun reads them, cpu (one per CPU), gpu (one per GPU) "
                  "or auto (gpu when there is a GPU, else cpu); local rank l "
                  "gets RANK = node-rank * N + l")
      ->required()
      ->type_name("INT")
      ->check(procsOption());
  CLI::Option *nnodes =
      app->add_option("--nnodes", options.nnodes,
                      "Nodes in the job, each running its own 'ppc launch'; "
                      "WORLD_SIZE = nnodes * N, at most 2147483647")
          ->capture_default_str()
          ->transform(intInRange(1));
  CLI::Option *nodeRank =
      app->add_option("--node-rank,--node_rank", options.nodeRank,
                      "This node's index in [0, nnodes) (GROUP_RANK)")
          ->capture_default_str()
          ->transform(intInRange(0));
  CLI::Option *masterAddr =
      app->add_option("--master-addr,--master_addr", options.masterAddr,
                      "Address of the node that runs rank 0 (MASTER_ADDR)")
          ->capture_default_str();
  CLI::Option *masterPort =
      app->add_option(
             "--master-port,--master_port", options.masterPort,
             "Rendezvous port on the master node (MASTER_PORT); 0 makes "
             "ppc launch serve the rendezvous store itself on a free "
             "port, which it prints (only with --nnodes 1)")
          ->capture_default_str()
          ->transform(intInRange(0, 65535));
  app->add_flag("--standalone", args->standalone,
                "One node, with the rendezvous served by ppc launch on a "
                "free local port (as torchrun --standalone; the same as "
                "--master-port 0)")
      ->excludes(nnodes)
      ->excludes(nodeRank)
      ->excludes(masterAddr)
      ->excludes(masterPort);
  args->timeout = app->add_option("--timeout", args->timeoutSeconds,
                                  "Stop every worker and fail after this many "
                                  "seconds (0.001 to 604800, "
                                  "7 days; default: none)")
                      ->transform(durationOption(kMinTimeoutSeconds));
  app->add_option("--grace-period", options.gracePeriodSeconds,
                  "Seconds workers get to exit after SIGTERM before SIGKILL "
                  "(0 to 604800)")
      ->capture_default_str()
      ->transform(durationOption(0));
  app->add_option("command", options.command,
                  "The program (looked up in PATH) and its arguments: "
                  "everything after '--', or from the first argument that is "
                  "not an option of ppc launch");
  app->positionals_at_end();
  return {app, [args]() { return runLaunch(*args); }};
}

} // namespace ppc
