//===- runtime/link/Rendezvous.cpp - Meeting the other ranks of a job -----===//
//
// This file implements the rendezvous (a c10d::TCPStore served by rank 0 or
// the launcher), the checks of a CUDA rank, the store host, and
// connectTransport(), which turns a rendezvous into a Transport.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Rendezvous.h"

#include "lib/Error.h"
#include "lib/OptionName.h"
#include "runtime/link/JobStore.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/link/Link.h"
#include "runtime/platform/BoundedCall.h"
#include "runtime/platform/Duration.h"
#include "runtime/platform/TorchCompat.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>

namespace ppc {

char PortTakenError::ID = 0;

std::string PortTakenError::describe() const {
  return "MASTER_PORT " + std::to_string(port_) +
         " is taken on this machine (another job?); choose another port";
}

namespace {
using Clock = std::chrono::steady_clock;

/// The time left until `deadline`, at least 1 ms (0 means "no timeout" to
/// c10d and Gloo).
/// How long a bounded step may run past its deadline, so that the step's
/// own timeouts, which say more, normally fire first.
constexpr std::chrono::milliseconds kStepGrace(500);

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

/// A rendezvous step's error as a value that can cross threads (runBounded)
/// and still become an error of its type.
struct Failure {
  enum class Kind { Other, LostRank, PortTaken };
  Kind kind = Kind::Other;
  /// The lost rank, or the taken port.
  int number = 0;
  /// The whole message (Other), or a lost rank's detail.
  std::string text;

  static Failure other(std::string message) {
    return {Kind::Other, 0, std::move(message)};
  }
  static Failure lost(int rank, std::string detail) {
    return {Kind::LostRank, rank, std::move(detail)};
  }
  static Failure portTaken(int port) { return {Kind::PortTaken, port, ""}; }

  llvm::Error toError() const {
    switch (kind) {
    case Kind::LostRank:
      return lostRank(number, text);
    case Kind::PortTaken:
      return llvm::make_error<PortTakenError>(number);
    case Kind::Other:
      break;
    }
    return makeError(text);
  }
};

/// getaddrinfo()'s list, freed with it.
using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

/// `host`:`port` resolved to IPv4 addresses for sockets of `type`.
/// Errors: "cannot resolve MASTER_ADDR 'HOST': WHY".
llvm::Expected<AddressList> resolveIPv4(const std::string &host, int port,
                                        int type) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = type;
  addrinfo *found = nullptr;
  int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  AddressList list(found, &freeaddrinfo);
  if (rc != 0 || !found)
    return makeError(llvm::formatv("cannot resolve MASTER_ADDR '{0}': {1}",
                                   host, gai_strerror(rc))
                         .str());
  return list;
}

/// The local address this machine uses to reach `host` (found by
/// "connecting" a UDP socket, which sends nothing): Gloo must listen on an
/// address the other ranks can reach, and the host name may resolve to one
/// they cannot (e.g. in a network namespace).
llvm::Expected<std::string> localAddressTowards(const std::string &host,
                                                int port) {
  auto found = resolveIPv4(host, port, SOCK_DGRAM);
  if (!found)
    return found.takeError();
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string result;
  if (fd >= 0 && connect(fd, (*found)->ai_addr, (*found)->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)))
      result = text;
  }
  if (fd >= 0)
    close(fd);
  if (result.empty())
    return makeError(
        llvm::formatv("no local address reaches MASTER_ADDR '{0}'", host)
            .str());
  return result;
}

/// A socket listening at `host`:`port` (port 0: a free one) for the store
/// to take (compat::makeTCPStore's listenFd), so that a store for a job on
/// 127.0.0.1 is not reachable from other machines; -1 where this LibTorch
/// cannot take one (compat::kStoreTakesListenFd), or where `host` is no
/// address of this machine (the store listens on every interface then, as
/// before). Errors: a taken port, as "errno: 98" (storeFailure() reads it).
llvm::Expected<int> storeListener(const std::string &host, int port) {
  if (!compat::kStoreTakesListenFd)
    return -1;
  auto found = resolveIPv4(host, port, SOCK_STREAM);
  if (!found)
    return found.takeError();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (*found)->ai_addr, (*found)->ai_addrlen) != 0) {
    int error = errno;
    close(fd);
    if (error == EADDRINUSE)
      return makeError("Address already in use (errno: 98)");
    return -1;
  }
  if (listen(fd, 2048) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// The port `fd` listens on.
int listenerPort(int fd) {
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) != 0)
    return 0;
  return ntohs(local.sin_port);
}

/// A TCP connection to host:port made within `wait`, or -1: a
/// non-blocking socket, closed by the destructor.
class ProbeSocket {
public:
  ProbeSocket(const std::string &host, int port,
              std::chrono::milliseconds wait) {
    auto found = resolveIPv4(host, port, SOCK_STREAM);
    if (!found) {
      llvm::consumeError(found.takeError());
      return;
    }
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0)
      return;
    if (connect(fd_, (*found)->ai_addr, (*found)->ai_addrlen) == 0)
      return;
    pollfd waiting{fd_, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof(error);
    if (errno != EINPROGRESS ||
        poll(&waiting, 1, static_cast<int>(wait.count())) != 1 ||
        getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0 ||
        error != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ProbeSocket(const ProbeSocket &) = delete;
  ProbeSocket &operator=(const ProbeSocket &) = delete;
  ~ProbeSocket() {
    if (fd_ >= 0)
      close(fd_);
  }
  bool connected() const { return fd_ >= 0; }

  /// Sends `bytes` and reads exactly `size` bytes within `wait`; returns
  /// them, or an empty vector when the peer closed, failed or said less.
  std::vector<uint8_t> ask(const std::vector<uint8_t> &bytes, size_t size,
                           std::chrono::milliseconds wait) {
    if (fd_ < 0 || send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
                       static_cast<ssize_t>(bytes.size()))
      return {};
    Clock::time_point deadline = deadlineAfter(wait);
    std::vector<uint8_t> got;
    while (got.size() < size) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      pollfd reading{fd_, POLLIN, 0};
      if (left.count() <= 0 ||
          poll(&reading, 1, static_cast<int>(left.count())) != 1)
        return {};
      uint8_t buffer[16];
      ssize_t n =
          recv(fd_, buffer, std::min(sizeof buffer, size - got.size()), 0);
      if (n <= 0)
        return {};
      got.insert(got.end(), buffer, buffer + n);
    }
    return got;
  }

private:
  int fd_ = -1;
};

/// Whether something accepts TCP connections at host:port within `wait`.
/// Tells a store host that never started (refused, or unreachable) from one
/// that listens but does not answer (a stopped process: the kernel still
/// accepts its connections).
bool acceptsConnections(const std::string &host, int port,
                        std::chrono::milliseconds wait) {
  return ProbeSocket(host, port, wait).connected();
}

/// Whether the store at host:port speaks PyTorch 2.x's store protocol,
/// which LibTorch 1.13's client cannot (compat::kStoreHasValidation): a
/// 2.x store ignores, or hangs up on, a client that does not open with its
/// VALIDATE message, so the 1.13 client would wait for its whole timeout.
/// Both questions are harmless to either store:
///   1. "how many keys?" in 1.13's words (the one byte GETNUMKEYS = 6): a
///      1.13 store answers with 8 bytes at once, and the answer is no;
///   2. else, on a new connection, 2.x's VALIDATE (0, then the magic number
///      0x3C85F7CE) and PING (13, then a nonce): a 2.x store echoes the
///      nonce, and the answer is yes. A 1.13 store reads the bytes as a key
///      longer than any allocation and drops that connection.
/// A store that answers neither within `wait` each (not up yet, or stopped)
/// is left to the rendezvous and its own timeout: the answer is no.
bool speaksNewerStoreProtocol(const std::string &host, int port,
                              std::chrono::milliseconds wait) {
  {
    ProbeSocket probe(host, port, wait);
    if (!probe.connected())
      return false;
    if (probe.ask({6}, 8, wait).size() == 8)
      return false;
  }
  ProbeSocket probe(host, port, wait);
  // Little-endian, as both protocols send integers (x86 and ARM hosts).
  std::vector<uint8_t> validateAndPing = {0,  0xCE, 0xF7, 0x85, 0x3C,
                                          13, 0x7F, 0x70, 0x70, 0x7F};
  std::vector<uint8_t> nonce(validateAndPing.end() - 4, validateAndPing.end());
  return probe.ask(validateAndPing, 4, wait) == nonce;
}

/// "MASTER_ADDR:MASTER_PORT", the rendezvous store's address.
std::string storeAddress(const LaunchEnv &env) {
  return env.masterAddr + ":" + std::to_string(env.masterPort);
}

/// The error of a rank that got no answer from the store within `timeout`.
/// Rank 0's store either never started (nothing accepts connections at the
/// port) or stopped answering. LibTorch 1.13's client gives up connecting
/// within the timeout and 2.x's may overshoot it, so both the client's
/// error and ppc's own deadline come here, and the error does not depend on
/// which fired first.
Failure storeSilence(const LaunchEnv &env, std::chrono::milliseconds timeout) {
  std::string where = storeAddress(env);
  if (env.launcherHostsStore)
    return Failure::other(
        llvm::formatv("rendezvous at {0} failed (the launcher's store did "
                      "not answer within {1} s)",
                      where, secondsText(timeout)));
  if (!acceptsConnections(env.masterAddr, env.masterPort,
                          std::chrono::milliseconds(500)))
    return Failure::lost(0, llvm::formatv("never reached the rendezvous at {0} "
                                          "within {1} s",
                                          where, secondsText(timeout)));
  return Failure::lost(0, llvm::formatv("the rendezvous store at {0} did not "
                                        "answer within {1} s",
                                        where, secondsText(timeout)));
}

/// A Failure raised on a start-up thread.
struct StepError {
  Failure failure;
};

/// JobStore's error for a forged value (ForgedValueError), when `what`
/// holds it: Gloo and c10d may rethrow it inside an error of their own;
/// else `otherwise`.
std::string forgedOr(const std::string &what, std::string otherwise) {
  size_t at = what.find("rendezvous key '");
  if (at == std::string::npos ||
      what.find("was not written by this job", at) == std::string::npos)
    return otherwise;
  return firstLine(what.substr(at));
}

/// Runs `fn` within `deadline` (runWithin(), runtime/platform/BoundedCall.h:
/// a store host that stops would block a c10d call forever). `fn` returns T
/// or throws: a StepError (its failure is the error), or anything else
/// (`where`: first line of the message). `onTimeout` gives the error past
/// the deadline.
template <typename T, typename Fn>
llvm::Expected<T> runBounded(Clock::time_point deadline,
                             const std::function<Failure()> &onTimeout,
                             const std::string &where, Fn fn) {
  BoundedOutcome<T> outcome = runWithin<T>(deadline, std::move(fn));
  if (outcome.timedOut)
    return onTimeout().toError();
  if (!outcome.error)
    return std::move(*outcome.value);
  Failure error;
  try {
    std::rethrow_exception(outcome.error);
  } catch (const StepError &e) {
    error = e.failure;
  } catch (const ForgedValueError &e) {
    error = Failure::other(e.what());
  } catch (const c10::Error &e) {
    error = Failure::other(
        forgedOr(e.what_without_backtrace(),
                 where + " (" + firstLine(e.what_without_backtrace()) + ")"));
  } catch (const std::exception &e) {
    error = Failure::other(
        forgedOr(e.what(), where + " (" + firstLine(e.what()) + ")"));
  } catch (...) {
    error = Failure::other(where);
  }
  return error.toError();
}

/// Text from a peer, safe to print (printable() in lib/Error.h).
std::string printableBytes(const std::vector<uint8_t> &bytes) {
  return printable(llvm::StringRef(reinterpret_cast<const char *>(bytes.data()),
                                   bytes.size()));
}

/// The rendezvous store's keys: "ppc/job" holds the job token of the job
/// that claimed the store; "ppc/rank/R" counts the processes that claimed
/// rank R, and "ppc/nonce/R" holds the nonce rank R drew (set before the
/// count; runtime/link/JobStore.h). The process group's keys live under
/// "ppc/group/".
std::string rankKey(int rank) { return "ppc/rank/" + std::to_string(rank); }

/// The steps of the rendezvous after the ranks have met, in order. Each
/// rank records the one it enters under "ppc/progress/R" (through the
/// JobStore when the job has a secret), so that a rank whose step times
/// out can name a rank that stayed behind.
enum class Step { Announced, Agree, Group, Connected };

/// Each step's name in the store and to LaunchEnv::beforeRendezvousStep,
/// and its
/// words in errors, by Step.
struct StepInfo {
  llvm::StringRef name, text;
};
constexpr StepInfo kSteps[] = {
    {"announced", "announcing itself"},
    {"agree", "comparing the ranks' options"},
    {"group", "connecting the process group"},
    {"connected", "connecting the process group"},
};
const StepInfo &stepInfo(Step step) { return kSteps[static_cast<int>(step)]; }
llvm::StringRef stepName(Step step) { return stepInfo(step).name; }
llvm::StringRef stepText(Step step) { return stepInfo(step).text; }

std::string progressKey(int rank) {
  return "ppc/progress/" + std::to_string(rank);
}

/// Records that this rank enters `step`, after telling
/// LaunchEnv::beforeRendezvousStep.
void recordProgress(c10d::Store &store, const LaunchEnv &env, Step step) {
  llvm::StringRef name = stepName(step);
  if (env.beforeRendezvousStep)
    env.beforeRendezvousStep(name);
  store.set(progressKey(env.rank),
            std::vector<uint8_t>(name.begin(), name.end()));
}

/// The first rank of `ranks` (global ranks) whose recorded progress is
/// behind `step`, with the step it is at; reads the store within `wait`
/// (its host may be the rank that stopped). Throws what the store throws
/// (a forged value: ForgedValueError).
std::optional<std::pair<int, Step>>
rankBehind(c10d::Store &store, const std::vector<int> &ranks, Step step) {
  for (int r : ranks) {
    Step at = Step::Announced;
    std::string key = progressKey(r);
    if (store.check({key})) {
      std::vector<uint8_t> value = store.get(key);
      llvm::StringRef name(reinterpret_cast<const char *>(value.data()),
                           value.size());
      for (Step s : {Step::Agree, Step::Group, Step::Connected})
        if (name == stepName(s))
          at = s;
    }
    if (at < step)
      return std::make_pair(r, at);
  }
  return std::nullopt;
}

/// Whether this rank serves the job's store: rank 0, unless the launcher
/// hosts it.
bool servesStore(const LaunchEnv &env) {
  return env.rank == 0 && !env.launcherHostsStore;
}

/// Explains why the store at `where` could not be served or reached.
/// LibTorch gives neither a taken port nor a client's timeout an exception
/// type of its own (c10::Error, or c10d's TimeoutError, a
/// std::runtime_error), so their text is the only sign of them; it is read
/// here, and in compat::isAddressInUse(), only.
Failure storeFailure(const LaunchEnv &env, bool serve, const std::string &where,
                     std::chrono::milliseconds timeout,
                     const std::string &cause) {
  if (serve && compat::isAddressInUse(cause))
    return Failure::portTaken(env.masterPort);
  if (!serve && cause.find("timed out") != std::string::npos)
    return storeSilence(env, timeout);
  return Failure::other("rendezvous at " + where + " failed (" + cause + ")");
}

/// Waits until every rank has counted itself in at the rendezvous; throws
/// StepError naming the first rank missing at the deadline (or the store's
/// host, when the store stops answering).
void waitForEveryRank(c10d::Store &store, const LaunchEnv &env,
                      const std::string &where,
                      std::chrono::milliseconds timeout,
                      Clock::time_point deadline) {
  std::vector<std::string> keys;
  for (int r = 0; r < env.worldSize; ++r)
    keys.push_back(rankKey(r));
  try {
    store.wait(keys, remaining(deadline));
  } catch (const std::exception &) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < env.worldSize; ++r)
        if (!store.check({keys[r]}))
          missing.push_back(r);
    } catch (const std::exception &) {
      // The store itself stopped answering (its host stopped): its "Socket
      // Timeout" names nobody.
      throw StepError{storeSilence(env, timeout)};
    }
    if (!missing.empty()) {
      std::string others;
      for (size_t i = 1; i < missing.size(); ++i)
        others += (i == 1 ? "; rank " : ", ") + std::to_string(missing[i]);
      throw StepError{Failure::lost(
          missing[0],
          llvm::formatv("never reached the rendezvous at {0} within {1} s{2}",
                        where, secondsText(timeout),
                        others.empty() ? "" : others + " neither"))};
    }
  }
}

/// Steps 1-4 of connectTransport(), on a thread of runBounded(): returns
/// the job's store (a JobStore when the job has a secret). Throws
/// StepError, or ForgedValueError.
c10::intrusive_ptr<c10d::Store> meetRanks(const LaunchEnv &env,
                                          std::chrono::milliseconds timeout,
                                          Clock::time_point deadline,
                                          const Agreement &agreement) {
  std::string where = storeAddress(env);
  bool serve = servesStore(env);
  // The launcher's store is up before any rank starts, so a short probe
  // tells torchrun 2.x's store from ours (a rank 0 of this same ppc always
  // speaks our protocol).
  if (!compat::kStoreHasValidation && env.launcherHostsStore &&
      speaksNewerStoreProtocol(env.masterAddr, env.masterPort,
                               std::min<std::chrono::milliseconds>(
                                   std::chrono::seconds(1), timeout / 4)))
    throw StepError{Failure::other(llvm::formatv(
        "rendezvous at {0} failed: its store speaks the protocol of PyTorch "
        "2.x (torchrun from a pip-installed torch?), which this ppc, built "
        "against LibTorch {1}.{2}, cannot; start the ranks with 'ppc launch' "
        "instead, or use a ppc built against LibTorch 2.x",
        where, compat::kTorchMajor, compat::kTorchMinor))};
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    // Rank 0's store listens where the job meets, not on every interface.
    int listenFd = -1;
    if (serve) {
      auto listener = storeListener(env.masterAddr, env.masterPort);
      if (!listener)
        throw std::runtime_error(llvm::toString(listener.takeError()));
      listenFd = *listener;
    }
    // c10d truncates the connect timeout to whole seconds (0.9 s would fail
    // at once): round up; the caller's deadline still bounds the step.
    store = compat::makeTCPStore(
        env.masterAddr, static_cast<uint16_t>(env.masterPort), serve,
        std::chrono::ceil<std::chrono::seconds>(remaining(deadline)), listenFd);
  } catch (const std::exception &e) {
    // c10::Error, or c10d's TimeoutError (a std::runtime_error).
    throw StepError{
        storeFailure(env, serve, where, timeout, firstLine(e.what()))};
  }
  std::vector<uint8_t> token(env.jobToken.begin(), env.jobToken.end());
  std::vector<uint8_t> holder = store->compareSet("ppc/job", {}, token);
  if (holder != token)
    throw StepError{Failure::other(
        llvm::formatv("another job (job token '{0}') holds the rendezvous at "
                      "{1}; give each job its own MASTER_PORT",
                      printableBytes(holder), where))};
  // The nonce goes in before the count, so that a rank that sees every
  // count finds every nonce.
  std::string nonce = drawNonce();
  std::vector<uint8_t> mine(nonce.begin(), nonce.end());
  if (store->compareSet(nonceKey(env.rank), {}, mine) != mine ||
      store->add(rankKey(env.rank), 1) != 1)
    throw StepError{Failure::other(llvm::formatv(
        "RANK={0} joined the rendezvous at {1} twice: another job with the "
        "same job token uses this port (set PPC_JOB_TOKEN per job or give "
        "each job its own MASTER_PORT)",
        env.rank, where))};
  waitForEveryRank(*store, env, where, timeout, deadline);
  // From here on, every value a rank acts on is authenticated, and bound
  // to this job's nonces.
  c10::intrusive_ptr<c10d::Store> job = store;
  if (!env.jobSecret.empty()) {
    auto session =
        jobSession(*store, env.rank, env.worldSize, env.jobToken, nonce, where);
    if (!session)
      throw StepError{Failure::other(llvm::toString(session.takeError()))};
    job = c10::make_intrusive<JobStore>(store, env.jobSecret, env.jobToken,
                                        *session, where);
  }
  recordProgress(*job, env, Step::Agree);
  // Before anything that could wait on a rank started differently.
  if (llvm::Error err = agreeAcrossRanks(*job, env.rank, env.worldSize,
                                         agreement, remaining(deadline)))
    throw StepError{Failure::other(llvm::toString(std::move(err)))};
  return job;
}

/// The error of a rank whose `step` failed with `cause` (its text): when
/// another rank of `ranks` never got as far, names it instead (the step
/// timed out because of that rank); a store that does not answer names its
/// host, and a forged progress record is named as such.
llvm::Error nameRankBehind(const LaunchEnv &env,
                           c10::intrusive_ptr<c10d::Store> job,
                           std::vector<int> ranks, Step step,
                           std::chrono::milliseconds timeout,
                           const std::string &cause) {
  if (cause.find("was not written by this job") != std::string::npos)
    return makeError(cause);
  llvm::erase_value(ranks, env.rank);
  using Behind = std::optional<std::pair<int, Step>>;
  auto behind = runBounded<Behind>(
      deadlineAfter(std::chrono::seconds(2)),
      [&] { return storeSilence(env, timeout); },
      "rendezvous at " + storeAddress(env) + " failed",
      [job, ranks, step] { return rankBehind(*job, ranks, step); });
  if (!behind)
    return behind.takeError();
  if (!*behind)
    return makeError(cause);
  auto [rank, at] = **behind;
  return lostRank(rank,
                  llvm::formatv("it never got past {0} in the rendezvous at "
                                "{1}; {2} timed out after {3} s",
                                stepText(at), storeAddress(env), stepText(step),
                                secondsText(timeout)));
}

/// The store key counting the ranks done reading the progress records
/// after a failed step (waitForNamers()).
const char *const kNamedKey = "ppc/named";

/// After a failed `step`: this rank is done reading the progress records
/// (nameRankBehind()). The rank that serves the store then keeps it up
/// until every other rank of `ranks` that reached the step is done too, for
/// at most two seconds: exiting first would close the store under their
/// reads, and they would report a broken pipe instead of the rank behind.
/// Best effort, like the counter itself (another client can move it; then
/// the store closes early, and the others' errors say so).
void waitForNamers(const LaunchEnv &env, c10::intrusive_ptr<c10d::Store> job,
                   std::vector<int> ranks, Step step) {
  llvm::erase_value(ranks, env.rank);
  bool serve = servesStore(env);
  auto done = runBounded<bool>(
      deadlineAfter(std::chrono::seconds(2)),
      [] { return Failure::other("the other ranks took over 2 s"); }, "",
      [job, ranks, step, serve] {
        int64_t named = job->add(kNamedKey, 1);
        if (!serve)
          return true;
        int64_t expected = 1;
        for (int r : ranks)
          if (!rankBehind(*job, {r}, step))
            ++expected;
        while (named < expected) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          named = job->add(kNamedKey, 0);
        }
        return true;
      });
  llvm::consumeError(done.takeError());
}

/// The Gloo device for this rank: on GLOO_SOCKET_IFNAME's first interface,
/// else on the local address that reaches MASTER_ADDR.
llvm::Expected<std::shared_ptr<::gloo::transport::Device>>
glooDevice(const LaunchEnv &env, const std::string &where) {
  if (!env.glooSocketIfname.empty()) {
    std::string first =
        llvm::StringRef(env.glooSocketIfname).split(',').first.str();
    return torchCall(where,
                     [&] { return compat::makeGlooDeviceForInterface(first); });
  }
  auto address = localAddressTowards(env.masterAddr, env.masterPort);
  if (!address)
    return withContext(address.takeError(), where);
  return torchCall(where,
                   [&] { return compat::makeGlooDeviceForHost(*address); });
}

/// Connects this rank's process group and links of `group` (the whole job
/// when it lists no ranks), once every rank has met at `job`.
llvm::Expected<std::unique_ptr<Transport>>
connectGroup(const LaunchEnv &env, c10::intrusive_ptr<c10d::Store> job,
             const RankGroup &group, DeviceKind device, LinkPolicy link,
             std::chrono::milliseconds timeout, const std::string &failed,
             const std::shared_ptr<::gloo::transport::Device> &glooDev) {
  auto storeSilent = [&] { return storeSilence(env, timeout); };
  // The whole job (no ranks listed) keeps the store's own prefix; a group
  // gets one below it, so that its process group and links meet only
  // its own ranks.
  int rank = env.rank, worldSize = env.worldSize;
  c10::intrusive_ptr<c10d::Store> groupStore =
      compat::makePrefixStore("ppc/group/", job);
  if (!group.ranks.empty()) {
    auto at = llvm::find(group.ranks, env.rank);
    if (at == group.ranks.end())
      return makeError(llvm::formatv("internal error: rank {0} is not in "
                                     "rank group '{1}'",
                                     env.rank, group.name)
                           .str());
    rank = static_cast<int>(at - group.ranks.begin());
    worldSize = static_cast<int>(group.ranks.size());
    groupStore = compat::makePrefixStore(group.name + "/", groupStore);
  }
  // Every rank has arrived; connecting the group gets a timeout of its
  // own. The Gloo group exists on every device: with CUDA it carries the
  // CPU messages, and NCCL groups are connected per channel on first use.
  Clock::time_point deadline = deadlineAfter(timeout);
  auto recorded = runBounded<bool>(deadline, storeSilent, failed, [job, env] {
    recordProgress(*job, env, Step::Group);
    return true;
  });
  if (!recorded)
    return recorded.takeError();
  auto groupSilent = [&] {
    return Failure::other(
        llvm::formatv("{0} (connecting the process group{1} took over "
                      "{2} s)",
                      failed, group.name.empty() ? "" : " of " + group.name,
                      secondsText(timeout)));
  };
  auto glooGroup = runBounded<c10::intrusive_ptr<compat::GlooGroup>>(
      saturatingAdd(deadline, kStepGrace), groupSilent, failed,
      [groupStore, rank, worldSize, timeout, dev = glooDev] {
        return compat::makeGlooGroup(groupStore, rank, worldSize, timeout, dev);
      });
  if (!glooGroup) {
    std::vector<int> ranks = group.ranks;
    if (ranks.empty())
      for (int r = 0; r < env.worldSize; ++r)
        ranks.push_back(r);
    llvm::Error named = nameRankBehind(env, job, ranks, Step::Group, timeout,
                                       llvm::toString(glooGroup.takeError()));
    waitForNamers(env, job, std::move(ranks), Step::Group);
    return named;
  }
  LinkSetup setup;
  setup.rank = rank;
  setup.worldSize = worldSize;
  setup.localRank = env.localRank;
  setup.timeout = timeout;
  setup.device = device;
  setup.store = groupStore;
  setup.glooGroup = *glooGroup;
  setup.link = link;
  setup.hostId = env.hostId;
  setup.globalRanks = group.ranks;
  return Transport::create(setup);
}

} // namespace

llvm::Error checkCudaDevice(const LaunchEnv &env) {
  const std::string device = optionName(Option::Device);
  const std::string what = device + " cuda";
  // A CPU-only LibTorch registers no CUDA device guard; a CUDA one does,
  // with or without a GPU.
  if (!c10::impl::hasDeviceGuardImpl(c10::kCUDA))
    return makeError(llvm::formatv("{0}: this ppc's LibTorch ({1}.{2}) is a "
                                   "CPU-only build, without CUDA; use "
                                   "{3} cpu, or a ppc built against a "
                                   "LibTorch with CUDA",
                                   what, compat::kTorchMajor,
                                   compat::kTorchMinor, device)
                         .str());
#ifndef PPC_HAVE_NCCL
  (void)env;
  return makeError(what +
                   ": this ppc was built without NCCL, which carries "
                   "values between CUDA stages; use " +
                   device +
                   " cpu, or rebuild ppc against a LibTorch with NCCL");
#else
  int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (gpus == 0) {
    const std::optional<std::string> &visible = env.cudaVisibleDevices;
    return makeError(
        llvm::formatv("{0}: rank {1} sees no GPU{2}; use {3} cpu", what,
                      env.rank,
                      visible ? llvm::formatv(" (CUDA_VISIBLE_DEVICES='{0}')",
                                              printable(*visible))
                                    .str()
                              : std::string(),
                      device)
            .str());
  }
  if (env.localWorldSize > gpus || env.localRank >= gpus)
    return makeError(
        llvm::formatv("{0}: LOCAL_WORLD_SIZE={1} ranks on this machine need "
                      "a GPU each (rank {2} would use cuda:{3}), but it has "
                      "{4}; start at most {4} rank{5} per machine, or use "
                      "{6} cpu",
                      what, env.localWorldSize, env.rank, env.localRank, gpus,
                      gpus == 1 ? "" : "s", device)
            .str());
  return llvm::Error::success();
#endif
}

llvm::Expected<std::unique_ptr<Transport>>
connectTransport(const LaunchEnv &env, DeviceKind device,
                 std::chrono::milliseconds timeout, LinkPolicy link,
                 const Agreement &agreement) {
  auto transports = connectGroupTransports(env, device, timeout, link,
                                           {RankGroup{}}, agreement);
  if (!transports)
    return transports.takeError();
  return std::move(transports->front());
}

llvm::Expected<std::vector<std::unique_ptr<Transport>>>
connectGroupTransports(const LaunchEnv &env, DeviceKind device,
                       std::chrono::milliseconds timeout, LinkPolicy link,
                       const std::vector<RankGroup> &groups,
                       const Agreement &agreement) {
  std::string where = storeAddress(env);
  std::string failed = "rendezvous at " + where + " failed";
  if (device == DeviceKind::CUDA)
    if (llvm::Error err = checkCudaDevice(env))
      return err;
  if (env.jobSecret.empty()) {
    // The shared-memory link opens what a peer's store values point at:
    // only authenticated values may say that.
    if (link == LinkPolicy::Shm)
      return makeError(optionName(Option::Link) +
                       " shm needs PPC_JOB_SECRET: the shared-memory "
                       "link trusts only rendezvous values this job wrote; "
                       "start the ranks with 'ppc launch', or set the same "
                       "PPC_JOB_SECRET on every rank (docs/security.md)");
    if (link == LinkPolicy::Auto)
      link = LinkPolicy::Gloo;
    static std::once_flag warned;
    std::call_once(warned, [&] {
      llvm::errs() << "warning: PPC_JOB_SECRET is not set: any process that "
                      "reaches the rendezvous at "
                   << where
                   << " can rewrite what the ranks exchange there, and the "
                      "shared-memory link is off; start the ranks with 'ppc "
                      "launch', or set the same PPC_JOB_SECRET on every rank "
                      "(docs/security.md)\n";
    });
  }
  Clock::time_point deadline = deadlineAfter(timeout);
  auto storeSilent = [&] { return storeSilence(env, timeout); };
  auto store = runBounded<c10::intrusive_ptr<c10d::Store>>(
      saturatingAdd(deadline, kStepGrace), storeSilent, failed,
      [env, timeout, deadline, agreement] {
        return meetRanks(env, timeout, deadline, agreement);
      });
  if (!store)
    return store.takeError();
  c10::intrusive_ptr<c10d::Store> job = *store;

  auto glooDev = glooDevice(env, failed);
  if (!glooDev)
    return glooDev.takeError();
  std::vector<std::unique_ptr<Transport>> transports;
  for (const RankGroup &group : groups) {
    auto transport =
        connectGroup(env, job, group, device, link, timeout, failed, *glooDev);
    if (!transport)
      return transport.takeError();
    transports.push_back(std::move(*transport));
  }
  // Nothing waits on this record; a failure to write it shows up later.
  try {
    recordProgress(*job, env, Step::Connected);
  } catch (const std::exception &) {
  }
  return transports;
}

struct StoreHost::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreHost::StoreHost(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreHost::~StoreHost() = default;

int StoreHost::port() const { return compat::storePort(*impl_->store); }

llvm::Expected<std::unique_ptr<StoreHost>> StoreHost::start(int port) {
  auto impl = std::make_unique<Impl>();
  try {
    // The launcher's store serves one node's job: loopback only.
    auto listener = storeListener("127.0.0.1", port);
    if (!listener)
      throw std::runtime_error(llvm::toString(listener.takeError()));
    if (*listener >= 0)
      port = listenerPort(*listener);
    impl->store = compat::makeTCPStore("127.0.0.1", static_cast<uint16_t>(port),
                                       /*isServer=*/true,
                                       std::chrono::seconds(60), *listener);
  } catch (const std::exception &e) {
    LaunchEnv env;
    env.masterPort = port;
    return storeFailure(env, /*serve=*/true, "port " + std::to_string(port),
                        std::chrono::seconds(60), firstLine(e.what()))
        .toError();
  }
  return std::unique_ptr<StoreHost>(new StoreHost(std::move(impl)));
}
} // namespace ppc
