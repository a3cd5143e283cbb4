//===- tools/ppc/Launcher.cpp - Start the worker processes of a job -------===//
//
// This file implements ppc::launch: one fork/exec per local rank, a single
// poll() loop over the workers' output pipes and a self-pipe that the signal
// handlers write to (so a signal can never be lost between a check and the
// wait), and the stop sequence: signal every worker's process group, wait for
// the grace period, SIGKILL.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Launcher.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/platform/Duration.h"
#include "runtime/platform/Threads.h"
#include "tools/ppc/StuckReport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Errno.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ppc {
namespace {

using Clock = std::chrono::steady_clock;

/// A line longer than this is forwarded in pieces, so a worker that never
/// prints '\n' (a progress bar redrawn with '\r') cannot grow the buffer
/// without bound; real lines (a JSON record, a long tensor print) are far
/// shorter and arrive whole.
constexpr size_t kMaxLine = 1 << 20;

/// Signals that the launcher catches while it runs. SIGCHLD only wakes the
/// poll loop; the others are forwarded to the workers.
constexpr int kCaughtSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};

std::string signalName(int sig) {
  if (const char *abbrev = sigabbrev_np(sig))
    return std::string("SIG") + abbrev;
  return std::to_string(sig);
}

std::string errnoText(int error) { return llvm::sys::StrError(error); }

/// Writes all of `data`. A reader that went away (EPIPE, with SIGPIPE
/// ignored) drops the output rather than stopping the job.
void writeAll(int fd, const std::string &data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    done += static_cast<size_t>(n);
  }
}

//===----------------------------------------------------------------------===//
// Signals
//===----------------------------------------------------------------------===//

int gSignalPipeWrite = -1;

extern "C" void forwardToSignalPipe(int sig) {
  int savedErrno = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(gSignalPipeWrite, &byte, 1);
  (void)ignored;
  errno = savedErrno;
}

/// Routes kCaughtSignals into a pipe that the poll loop watches and ignores
/// SIGPIPE; the destructor restores the previous dispositions.
class SignalPipe {
public:
  SignalPipe() = default;
  SignalPipe(const SignalPipe &) = delete;
  SignalPipe &operator=(const SignalPipe &) = delete;

  llvm::Error install() {
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      return makeError("cannot set up signal handling: " + errnoText(errno));
    gSignalPipeWrite = fds[1];
    struct sigaction action = {};
    action.sa_handler = forwardToSignalPipe;
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < std::size(kCaughtSignals); ++i)
      ::sigaction(kCaughtSignals[i], &action, &previous[i]);
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &previousPipe);
    installed = true;
    return llvm::Error::success();
  }

  ~SignalPipe() {
    if (installed) {
      for (size_t i = 0; i < std::size(kCaughtSignals); ++i)
        ::sigaction(kCaughtSignals[i], &previous[i], nullptr);
      ::sigaction(SIGPIPE, &previousPipe, nullptr);
      gSignalPipeWrite = -1;
    }
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  }

  int readFd() const { return fds[0]; }

  /// Returns the signals received since the last call, in order.
  std::vector<int> take() {
    std::vector<int> signals;
    unsigned char buffer[64];
    ssize_t n;
    while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0 ||
           (n < 0 && errno == EINTR))
      for (ssize_t i = 0; i < n; ++i)
        signals.push_back(buffer[i]);
    return signals;
  }

private:
  int fds[2] = {-1, -1};
  struct sigaction previous[std::size(kCaughtSignals)] = {};
  struct sigaction previousPipe = {};
  bool installed = false;
};

//===----------------------------------------------------------------------===//
// Workers
//===----------------------------------------------------------------------===//

/// The most of a worker's error line that the launcher keeps for its own
/// report; the line itself is forwarded whole.
constexpr size_t kMaxErrorLine = 16 << 10;

/// A worker's last "error: " line, as launch() reports it.
struct ErrorLine {
  /// Without "error: " and '\n', at most kMaxErrorLine bytes; empty: none.
  std::string text;
  /// Whether the whole line is a consequence (isConsequenceLine()).
  bool consequence = false;
};

/// The error lines the workers printed, by text (at most kMaxErrorLine
/// bytes of it): the ranks that printed each, the first first. Only the
/// first rank's line is forwarded; the launcher's last line names the
/// others.
using ErrorRanks = std::map<std::string, std::vector<int>>;

/// The read end of one worker pipe (stdout or stderr) and its unfinished
/// last line; `lastError`, when set, receives the stream's error lines, and
/// `errorRanks` records them for worker `rank`.
struct OutputStream {
  int fd = -1;
  int targetFd = -1;
  std::string pending;
  ErrorLine *lastError = nullptr;
  ErrorRanks *errorRanks = nullptr;
  int rank = -1;
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  /// Whether the launcher signalled it while it ran.
  bool signalled = false;
  std::string prefix;
  OutputStream out;
  OutputStream err;
  ErrorLine error;
  /// Set when it failed: "rank R exited with status S" or the like, and
  /// whether it failed for a reason of its own (launch(), step 3).
  std::optional<std::string> failure;
  bool ownCause = false;
};

/// Keeps `line` (one whole line, '\n' included) as the last error of
/// `stream` when it is an "error: " line, and says whether to forward it:
/// not when another rank printed the same error first (every rank that
/// checks the same thing fails alike; the error is printed once).
bool noteErrorLine(OutputStream &stream, llvm::StringRef line) {
  if (!stream.lastError || !line.consume_front("error: "))
    return true;
  line = line.rtrim("\r\n");
  stream.lastError->consequence = isConsequenceLine(line);
  stream.lastError->text = line.take_front(kMaxErrorLine).str();
  if (!stream.errorRanks)
    return true;
  std::vector<int> &ranks = (*stream.errorRanks)[stream.lastError->text];
  if (!llvm::is_contained(ranks, stream.rank))
    ranks.push_back(stream.rank);
  return ranks.front() == stream.rank;
}

/// Writes the complete lines of `stream.pending`, each prefixed, in one
/// write; an unfinished rest of kMaxLine bytes or more in lines of exactly
/// kMaxLine bytes, and at EOF the rest, each completed with '\n'.
void emitLines(OutputStream &stream, const std::string &prefix, bool atEof) {
  std::string chunk;
  size_t start = 0;
  for (size_t newline;
       (newline = stream.pending.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    if (!noteErrorLine(
            stream, llvm::StringRef(stream.pending).slice(start, newline + 1)))
      continue;
    chunk += prefix;
    chunk.append(stream.pending, start, newline + 1 - start);
  }
  for (; stream.pending.size() - start >= kMaxLine; start += kMaxLine) {
    chunk += prefix;
    chunk.append(stream.pending, start, kMaxLine);
    chunk += '\n';
  }
  if (atEof && start < stream.pending.size()) {
    if (noteErrorLine(stream,
                      llvm::StringRef(stream.pending).drop_front(start))) {
      chunk += prefix;
      chunk.append(stream.pending, start, std::string::npos);
      chunk += '\n';
    }
    start = stream.pending.size();
  }
  stream.pending.erase(0, start);
  writeAll(stream.targetFd, chunk);
}

void closeStream(OutputStream &stream, const std::string &prefix) {
  emitLines(stream, prefix, /*atEof=*/true);
  ::close(stream.fd);
  stream.fd = -1;
}

/// Reads once from `stream`, closing it at EOF. Returns whether more may be
/// available right now.
bool readSome(OutputStream &stream, const std::string &prefix) {
  char buffer[1 << 16];
  ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
  if (n < 0 && errno == EINTR)
    return true;
  if (n < 0 && errno == EAGAIN)
    return false;
  if (n <= 0) {
    closeStream(stream, prefix);
    return false;
  }
  stream.pending.append(buffer, static_cast<size_t>(n));
  emitLines(stream, prefix, /*atEof=*/false);
  return true;
}

/// Forwards what an exited worker left in its pipe, then closes it: output
/// from background grandchildren that still hold the pipe is not waited for.
void drain(OutputStream &stream, const std::string &prefix) {
  while (stream.fd >= 0 && readSome(stream, prefix)) {
  }
  if (stream.fd >= 0)
    closeStream(stream, prefix);
}

std::string describeExit(int rank, int status) {
  std::string who = "rank " + std::to_string(rank);
  if (WIFSIGNALED(status))
    return who + " killed by signal " + signalName(WTERMSIG(status));
  return who + " exited with status " + std::to_string(WEXITSTATUS(status));
}

/// Everything the child needs, prepared before fork() so that the child only
/// makes async-signal-safe calls.
struct ChildSetup {
  pid_t parent;
  int stdinFd;
  int stdoutFd;
  int stderrFd;
  int execErrorFd;
  sigset_t mask;
  std::vector<char *> argv;
  std::vector<char *> envp;
};

/// Makes `to` refer to `from` and survive exec.
void moveFd(int from, int to) {
  if (from == to)
    ::fcntl(to, F_SETFD, 0);
  else
    ::dup2(from, to);
}

[[noreturn]] void runChild(const ChildSetup &setup) {
  ::setpgid(0, 0);
  // Own process groups keep a terminal's Ctrl-C from reaching workers
  // directly; this keeps a SIGKILLed launcher from leaving them behind.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != setup.parent)
    ::_exit(127);
  moveFd(setup.stdinFd, STDIN_FILENO);
  moveFd(setup.stdoutFd, STDOUT_FILENO);
  moveFd(setup.stderrFd, STDERR_FILENO);
  struct sigaction defaultAction = {};
  defaultAction.sa_handler = SIG_DFL;
  for (int sig : kCaughtSignals)
    ::sigaction(sig, &defaultAction, nullptr);
  ::sigaction(SIGPIPE, &defaultAction, nullptr);
  ::sigprocmask(SIG_SETMASK, &setup.mask, nullptr);
  ::execvpe(setup.argv[0], setup.argv.data(), setup.envp.data());
  int error = errno;
  ssize_t ignored = ::write(setup.execErrorFd, &error, sizeof error);
  (void)ignored;
  ::_exit(127);
}

/// Returns the environment for one worker: the launcher's, with the launch
/// variables replaced.
std::vector<std::string> workerEnvironment(const LaunchOptions &options,
                                           int localRank) {
  std::vector<std::pair<std::string, std::string>> vars =
      launchEnvironment(options, localRank);
  std::vector<std::string> env;
  for (char **entry = environ; *entry; ++entry) {
    llvm::StringRef name = llvm::StringRef(*entry).split('=').first;
    bool replaced = false;
    for (const auto &var : vars)
      replaced |= name == var.first;
    if (!replaced)
      env.emplace_back(*entry);
  }
  for (const auto &var : vars)
    env.push_back(var.first + "=" + var.second);
  return env;
}

/// Runs one job: spawns the workers, then loops until all have exited.
class Job {
public:
  Job(const LaunchOptions &options, SignalPipe &signals, int devNull)
      : options(options), signals(signals), devNull(devNull) {}

  llvm::Error run() {
    Clock::time_point start = Clock::now();
    if (options.timeoutSeconds)
      timeoutAt = deadlineAfter(toDuration(*options.timeoutSeconds), start);
    // Stable addresses: each worker's stderr stream points at its error.
    workers.reserve(static_cast<size_t>(options.nprocPerNode));
    StatusDir status;
    statusDir = status.path;
    for (int local = 0; local < options.nprocPerNode && !failure; ++local)
      spawn(local);
    while (anyRunning())
      step();
    if (failure)
      return makeError(*failure);
    if (std::optional<std::string> stuck = stuckRank())
      return makeError(*stuck);
    if (const Worker *cause = rootCause()) {
      std::string same = sameErrorNote(*cause);
      if (!same.empty())
        llvm::errs() << same << "\n";
      return makeError(*cause->failure + (cause->error.text.empty()
                                              ? ""
                                              : ": " + cause->error.text));
    }
    return llvm::Error::success();
  }

private:
  /// "note: ranks 1 and 2 reported the same error": the other ranks whose
  /// error line was `cause`'s (not forwarded); empty when none.
  std::string sameErrorNote(const Worker &cause) const {
    auto found = errorRanks.find(cause.error.text);
    if (found == errorRanks.end())
      return "";
    std::vector<int> others;
    llvm::copy_if(found->second, std::back_inserter(others),
                  [&](int rank) { return rank != cause.rank; });
    if (others.empty())
      return "";
    llvm::sort(others);
    return (others.size() == 1 ? "note: rank " : "note: ranks ") +
           rankList(others) + " reported the same error";
  }

  static Clock::duration toDuration(double seconds) {
    return durationFromSeconds<Clock::duration>(seconds);
  }

  /// The ranks' status directory (PPC_STATUS_DIR, runtime/exec/
  /// StatusRecord.h): created private (0700, by mkdtemp) for the job in
  /// $TMPDIR, or in /tmp when TMPDIR is missing or no directory, removed
  /// with what is in it. Without one a stuck rank cannot be named: that is
  /// said in one line.
  struct StatusDir {
    std::string path;
    StatusDir() {
      const char *tmp = std::getenv("TMPDIR");
      int err = 0;
      for (std::string base :
           {std::string(tmp ? tmp : ""), std::string("/tmp")}) {
        if (base.empty())
          continue;
        std::string dir = base + "/ppc-status-XXXXXX";
        if (::mkdtemp(dir.data())) {
          path = dir;
          return;
        }
        err = errno;
      }
      llvm::errs() << "warning: cannot create the ranks' status directory in "
                      "/tmp: "
                   << llvm::sys::StrError(err)
                   << "; a stuck rank will not be named\n";
    }
    ~StatusDir() {
      if (!path.empty())
        llvm::sys::fs::remove_directories(path);
    }
  };

  /// At most `limit` bytes of the regular file (not a link) at `path`, which
  /// must not say it is larger; empty otherwise. The job's ranks write the
  /// status records read so: one that is a FIFO must not block the launcher
  /// (O_NONBLOCK), nor a link lead it elsewhere (O_NOFOLLOW).
  static std::string readSmallFile(const std::string &path, size_t limit) {
    int fd = llvm::sys::RetryAfterSignal(-1, ::open, path.c_str(),
                                         O_RDONLY | O_NONBLOCK | O_NOFOLLOW |
                                             O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
      return "";
    std::string text;
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<uint64_t>(st.st_size) <= limit) {
      text.resize(limit);
      size_t done = 0;
      while (done < limit) {
        ssize_t n = llvm::sys::RetryAfterSignal(
            -1, ::read, fd, text.data() + done, limit - done);
        if (n <= 0)
          break;
        done += static_cast<size_t>(n);
      }
      text.resize(done);
    }
    ::close(fd);
    return text;
  }

  /// When every failed worker only lost a peer and their status records
  /// lead to a rank that was still alive when the job was stopped: "rank R
  /// is stuck (STATE); ranks ... wait for it" and what it last said (see
  /// Launcher.h). Otherwise none.
  std::optional<std::string> stuckRank() const {
    const Worker *cause = rootCause();
    if (!cause || cause->ownCause || statusDir.empty() || aliveStates.empty())
      return std::nullopt;
    int world = options.nnodes * options.nprocPerNode;
    std::map<int, RankReport> reports;
    for (const Worker &worker : workers) {
      std::string path =
          statusDir + "/rank-" + std::to_string(worker.rank) + ".json";
      std::string text = readSmallFile(path, kMaxRankReportBytes);
      if (std::optional<RankReport> report =
              parseRankReport(text, worker.rank, world))
        reports[worker.rank] = *report;
    }
    std::optional<int> start;
    for (size_t index : exits)
      if (!start && reports.count(workers[index].rank))
        start = workers[index].rank;
    if (!start)
      return std::nullopt;
    StuckRank stuck = findStuckRank(reports, *start);
    std::string waiters =
        stuck.waiters.empty()
            ? ""
            : llvm::formatv("; {0} {1} {2} for it",
                            stuck.waiters.size() == 1 ? "rank" : "ranks",
                            rankList(stuck.waiters),
                            stuck.waiters.size() == 1 ? "waits" : "wait")
                  .str();
    if (stuck.isCycle) {
      std::string chain;
      for (int r : stuck.cycle)
        chain += llvm::formatv("rank {0} ({1}) waits for ", r,
                               positionText(reports.at(r)))
                     .str();
      return llvm::formatv("ranks {0} wait for each other: {1}rank {2}{3}",
                           rankList(stuck.cycle), chain, stuck.rank, waiters)
          .str();
    }
    auto alive = aliveStates.find(stuck.rank);
    if (alive == aliveStates.end())
      return std::nullopt;
    std::string state =
        alive->second == 'T' || alive->second == 't'
            ? "stopped by a signal, state " + std::string(1, alive->second)
            : "running but never answered, state " +
                  std::string(1, alive->second ? alive->second : '?');
    // What the rank nearest it in the chain says about the wait.
    std::string seen;
    for (int waiter : stuck.waiters)
      if (reports.at(waiter).waitingFor == stuck.rank) {
        seen = llvm::formatv(": rank {0} waited for it {1}", waiter,
                             positionText(reports.at(waiter)))
                   .str();
        break;
      }
    return llvm::formatv("rank {0} is stuck ({1}){2}{3}", stuck.rank, state,
                         seen, waiters)
        .str();
  }

  /// Records the /proc state letter of every running worker (Linux; '?'
  /// where it cannot be read), before the job is stopped.
  void noteAliveStates() {
    if (!aliveStates.empty())
      return;
    for (const Worker &worker : workers) {
      if (!worker.running)
        continue;
      char state = '?';
      // "PID (COMM) S ...": COMM may hold ')', the state follows the last.
      std::string stat =
          readSmallFile("/proc/" + std::to_string(worker.pid) + "/stat", 4096);
      size_t close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size())
        state = stat[close + 2];
      aliveStates[worker.rank] = state;
    }
  }

  bool anyRunning() const {
    for (const Worker &worker : workers)
      if (worker.running)
        return true;
    return false;
  }

  /// Records the first failure of the launcher itself (a signal, the
  /// timeout, a worker that cannot start) and returns true for it; it wins
  /// over any worker's.
  bool fail(std::string cause) {
    if (failure)
      return false;
    failure = std::move(cause);
    return true;
  }

  /// Whether the job is failing: stopping, or about to stop.
  bool failing() const { return failure || workerFailed; }

  /// The failed worker that launch() reports, in the order of `exits`: the
  /// first that failed for a reason of its own, else the first.
  const Worker *rootCause() const {
    for (size_t index : exits)
      if (workers[index].ownCause)
        return &workers[index];
    return exits.empty() ? nullptr : &workers[exits.front()];
  }

  /// Sends `sig` to every running worker's process group and starts the
  /// grace period, unless it has already started.
  void stop(int sig) {
    stopAt.reset();
    for (Worker &worker : workers)
      if (worker.running) {
        ::kill(-worker.pid, sig);
        worker.signalled = true;
      }
    if (!killAt && !killed)
      killAt = deadlineAfter(toDuration(options.gracePeriodSeconds));
  }

  /// Records that `worker` failed as `what`, and stops the others: at once
  /// when it failed for a reason of its own, after the settle time when it
  /// only lost a peer.
  void workerFailure(Worker &worker, std::string what) {
    worker.failure = std::move(what);
    worker.ownCause = worker.error.text.empty() ? !worker.signalled
                                                : !worker.error.consequence;
    exits.push_back(static_cast<size_t>(&worker - workers.data()));
    workerFailed = true;
    if (worker.ownCause)
      stop(SIGTERM);
    else if (!stopAt && !killAt && !killed)
      stopAt = deadlineAfter(toDuration(kConsequenceSettleSeconds));
  }

  /// The three pipes of one worker: stdout, stderr, and the exec-error
  /// pipe (closed on a successful exec, an errno written otherwise).
  struct Pipes {
    int out[2] = {-1, -1}, err[2] = {-1, -1}, exec[2] = {-1, -1};
  };

  /// Opens all three pipes or none; returns the errno on failure.
  static int openPipes(Pipes &pipes) {
    for (int *fds : {pipes.out, pipes.err, pipes.exec})
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        int error = errno;
        for (int *open : {pipes.out, pipes.err, pipes.exec})
          for (int i = 0; i < 2; ++i)
            if (open[i] >= 0)
              ::close(open[i]);
        return error;
      }
    return 0;
  }

  /// Forks a child that runs the command with worker `local`'s environment
  /// on `pipes`. Returns the pid, or -1 with errno set.
  pid_t forkWorker(int local, const Pipes &pipes) {
    std::vector<std::string> env = workerEnvironment(options, local);
    if (!statusDir.empty()) {
      llvm::erase_if(env, [](const std::string &entry) {
        return llvm::StringRef(entry).startswith("PPC_STATUS_DIR=");
      });
      env.push_back("PPC_STATUS_DIR=" + statusDir);
    }
    ChildSetup setup;
    setup.parent = ::getpid();
    setup.stdinFd = devNull;
    setup.stdoutFd = pipes.out[1];
    setup.stderrFd = pipes.err[1];
    setup.execErrorFd = pipes.exec[1];
    for (const std::string &arg : options.command)
      setup.argv.push_back(const_cast<char *>(arg.c_str()));
    setup.argv.push_back(nullptr);
    for (std::string &entry : env)
      setup.envp.push_back(entry.data());
    setup.envp.push_back(nullptr);

    // Block signals across fork() so that no handler of ours runs in the
    // child before it resets them.
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &setup.mask);
    pid_t pid = ::fork();
    if (pid == 0)
      runChild(setup);
    int forkError = errno;
    ::pthread_sigmask(SIG_SETMASK, &setup.mask, nullptr);
    errno = forkError;
    return pid;
  }

  /// Reads the exec-error pipe: EOF means exec succeeded; an errno means
  /// it did not. Returns 0 or that errno.
  static int execError(int fd) {
    int error = 0;
    ssize_t n;
    while ((n = ::read(fd, &error, sizeof error)) < 0 && errno == EINTR) {
    }
    ::close(fd);
    return n == sizeof error ? error : 0;
  }

  void spawn(int local) {
    Worker worker;
    worker.rank = options.nodeRank * options.nprocPerNode + local;
    worker.prefix = "[rank " + std::to_string(worker.rank) + "] ";
    auto cannotStart = [&](int error) {
      if (fail("cannot start rank " + std::to_string(worker.rank) + ": " +
               errnoText(error)))
        stop(SIGTERM);
    };

    Pipes pipes;
    if (int error = openPipes(pipes))
      return cannotStart(error);
    pid_t pid = forkWorker(local, pipes);
    int forkError = errno;
    closeAll({pipes.out[1], pipes.err[1], pipes.exec[1]});
    if (pid < 0) {
      closeAll({pipes.out[0], pipes.err[0], pipes.exec[0]});
      return cannotStart(forkError);
    }
    // Also here, so the group exists before we may signal it.
    ::setpgid(pid, pid);

    worker.pid = pid;
    worker.running = true;
    worker.out = {pipes.out[0], options.stdoutFd, {}, nullptr};
    worker.err = {pipes.err[0], options.stderrFd, {}, nullptr};
    ::fcntl(pipes.out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(pipes.err[0], F_SETFL, O_NONBLOCK);
    workers.push_back(std::move(worker));
    // `workers` holds every worker before any output is read.
    workers.back().err.lastError = &workers.back().error;
    workers.back().err.errorRanks = &errorRanks;
    workers.back().err.rank = workers.back().rank;

    // Every rank runs the same command, so the first one tells.
    if (int error = execError(pipes.exec[0]))
      if (fail("cannot run '" + options.command[0] + "': " + errnoText(error)))
        stop(SIGTERM);
  }

  static void closeAll(std::initializer_list<int> fds) {
    for (int fd : fds)
      ::close(fd);
  }

  /// One turn of the loop: wait for output, a signal or a deadline, then
  /// handle all of them.
  void step() {
    std::vector<pollfd> fds{{signals.readFd(), POLLIN, 0}};
    std::vector<std::pair<OutputStream *, const std::string *>> streams;
    for (Worker &worker : workers)
      for (OutputStream *stream : {&worker.out, &worker.err})
        if (stream->fd >= 0) {
          fds.push_back({stream->fd, POLLIN, 0});
          streams.emplace_back(stream, &worker.prefix);
        }

    if (::poll(fds.data(), fds.size(), pollTimeoutMs()) > 0)
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents)
          readSome(*streams[i - 1].first, *streams[i - 1].second);

    for (int sig : signals.take()) {
      // Every signal is forwarded, so a second Ctrl-C reaches workers too.
      if (sig == SIGCHLD)
        continue;
      fail("interrupted by " + signalName(sig));
      stop(sig);
    }
    reap();
    checkDeadlines();
  }

  int pollTimeoutMs() const {
    std::optional<Clock::time_point> next = killAt;
    if (stopAt && (!next || *stopAt < *next))
      next = stopAt;
    if (timeoutAt && !failing() && (!next || *timeoutAt < *next))
      next = timeoutAt;
    if (!next)
      return -1;
    auto ms =
        std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now());
    return static_cast<int>(std::clamp<long long>(ms.count(), 0, INT_MAX));
  }

  void reap() {
    for (Worker &worker : workers) {
      if (!worker.running)
        continue;
      int status = 0;
      pid_t result;
      while ((result = ::waitpid(worker.pid, &status, WNOHANG)) < 0 &&
             errno == EINTR) {
      }
      if (result == 0)
        continue;
      int waitError = errno;
      worker.running = false;
      drain(worker.out, worker.prefix);
      drain(worker.err, worker.prefix);
      if (result < 0)
        workerFailure(worker, "lost rank " + std::to_string(worker.rank) +
                                  ": " + errnoText(waitError));
      else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        workerFailure(worker, describeExit(worker.rank, status));
    }
  }

  void checkDeadlines() {
    Clock::time_point now = Clock::now();
    if (timeoutAt && now >= *timeoutAt && !failing() &&
        fail("timed out after " + formatNumber(*options.timeoutSeconds) +
             " seconds"))
      stop(SIGTERM);
    if (stopAt && now >= *stopAt) {
      noteAliveStates();
      stop(SIGTERM);
    }
    if (killAt && now >= *killAt) {
      killAt.reset();
      killed = true;
      stop(SIGKILL);
    }
  }

  const LaunchOptions &options;
  SignalPipe &signals;
  int devNull;
  std::vector<Worker> workers;
  /// The workers' error lines, by text (noteErrorLine()).
  ErrorRanks errorRanks;
  /// Indexes into `workers` of the failed ones, in the order seen.
  std::vector<size_t> exits;
  std::optional<std::string> failure;
  bool workerFailed = false;
  std::optional<Clock::time_point> timeoutAt;
  /// When a consequence's settle time ends (launch(), step 3).
  std::optional<Clock::time_point> stopAt;
  std::optional<Clock::time_point> killAt;
  bool killed = false;
  /// The status directory, and the /proc state of each worker still running
  /// when the settle time after a lost rank ended (stuckRank()).
  std::string statusDir;
  std::map<int, char> aliveStates;
};

} // namespace

namespace {
constexpr llvm::StringLiteral kConsequence =
    "; a consequence: this rank stopped because of rank ";
} // namespace

std::string consequenceNote(int lostRank) {
  return kConsequence.str() + std::to_string(lostRank);
}

bool isConsequenceLine(llvm::StringRef line) {
  line = line.rtrim("\r\n");
  size_t at = line.rfind(kConsequence);
  if (at == llvm::StringRef::npos)
    return false;
  llvm::StringRef rank = line.drop_front(at + kConsequence.size());
  return !rank.empty() && rank.size() <= 10 &&
         rank.find_first_not_of("0123456789") == llvm::StringRef::npos;
}

llvm::Error launch(const LaunchOptions &options) {
  if (llvm::Error err = validateLaunchOptions(options))
    return err;
  int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devNull < 0)
    return makeError("cannot open /dev/null: " + errnoText(errno));
  SignalPipe signals;
  llvm::Error result = signals.install();
  if (!result)
    result = Job(options, signals, devNull).run();
  ::close(devNull);
  return result;
}

} // namespace ppc
