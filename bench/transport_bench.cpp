//===- bench/transport_bench.cpp - Ping-pong over ppc's Transport ---------===//
//
// Benchmark 4 (bench/run.py). Two ranks, started by
//
//   ppc launch --nproc-per-node 2 --master-port 0 -- transport_bench B:N ...
//
// meet through ppc's own connectTransport (runtime/link/Transport.h: the c10d
// TCPStore rendezvous and the Gloo process group that ppc run uses) and
// ping-pong a uint8 tensor of B bytes N times (after N/10 + 2 untimed
// round trips): rank 0 sends, rank 1 receives and sends the bytes back,
// rank 0 receives. Each round trip is timed on rank 0; half of it is the
// latency of one message. Then rank 0 times N memcpy's of the same bytes
// between two buffers of its own (the in-process baseline). Rank 0 prints
// one JSON object per size on stdout:
//
//   {"bytes": B, "half_rtt_us": [...], "memcpy_us": [...]}
//
// `--link gloo|shm|auto` (first argument; default gloo) chooses the link
// (runtime/link/Link.h: LinkPolicy), and rank 0's lines then carry "link".
//
// `transport_bench --bare-ring B:N ...`, without a launcher, is the
// shared-memory link's baseline (bench/run.py, benchmark 11): the process
// forks, and parent and child ping-pong the same bytes through a pair of
// the link's rings (runtime/link/ShmRing.h: sendMessage / receiveMessage), with
// no transport, tags or queues around them. It prints
//
//   {"bytes": B, "half_rtt_us": [...], "bare": true}
//
// Threads are bounded to 1 (ppc::boundThreads), as `ppc run --threads 1`.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Collectives.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/link/Rendezvous.h"
#include "runtime/link/ShmRing.h"
#include "runtime/platform/Threads.h"

#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double usSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start)
      .count();
}

int fail(llvm::Error err) {
  std::fprintf(stderr, "error: %s\n", llvm::toString(std::move(err)).c_str());
  return 2;
}

void printList(const char *key, const std::vector<double> &values) {
  std::printf("\"%s\": [", key);
  for (size_t i = 0; i < values.size(); ++i)
    std::printf("%s%.5g", i ? ", " : "", values[i]);
  std::printf("]");
}

bool parseSize(const char *arg, int64_t &bytes, int &iterations) {
  if (std::sscanf(arg, "%ld:%d", &bytes, &iterations) != 2 || bytes < 1 ||
      iterations < 1) {
    std::fprintf(stderr, "error: '%s' is not BYTES:ITERATIONS\n", arg);
    return false;
  }
  return true;
}

/// The --bare-ring mode (file comment).
int bareRing(int argc, char **argv) {
  using namespace ppc::shm;
  for (int a = 0; a < argc; ++a) {
    int64_t bytes = 0;
    int iterations = 0;
    if (!parseSize(argv[a], bytes, iterations))
      return 2;
    auto ping = ShmRing::create(size_t(4) << 20);
    auto pong = ShmRing::create(size_t(4) << 20);
    if (!ping)
      return fail(ping.takeError());
    if (!pong)
      return fail(pong.takeError());
    const int warmup = iterations / 10 + 2;
    RingPeer parent{0, PeerProcess::self(), std::chrono::seconds(60)};
    pid_t child = fork();
    if (child < 0)
      return 2;
    // Buffers made after the fork: pages shared copy-on-write would fault
    // on every first write.
    std::vector<unsigned char> out(bytes, 1), in(bytes, 0);
    if (child == 0) {
      for (int i = 0; i < warmup + iterations; ++i) {
        if (llvm::Error err =
                receiveMessage(*ping, parent, i, in.data(), in.size(), "ping"))
          _exit(fail(std::move(err)));
        Outgoing m(i, out.data(), out.size());
        if (llvm::Error err = sendMessage(*pong, parent, m, "pong"))
          _exit(fail(std::move(err)));
      }
      _exit(0);
    }
    RingPeer peer{1, PeerProcess(child, processStartTime(child)),
                  std::chrono::seconds(60)};
    std::vector<double> halfRtt;
    for (int i = 0; i < warmup + iterations; ++i) {
      Clock::time_point start = Clock::now();
      Outgoing m(i, out.data(), out.size());
      if (llvm::Error err = sendMessage(*ping, peer, m, "ping"))
        return fail(std::move(err));
      if (llvm::Error err =
              receiveMessage(*pong, peer, i, in.data(), in.size(), "pong"))
        return fail(std::move(err));
      if (i >= warmup)
        halfRtt.push_back(usSince(start) / 2);
    }
    int status = 0;
    waitpid(child, &status, 0);
    std::printf("{\"bytes\": %ld, ", bytes);
    printList("half_rtt_us", halfRtt);
    std::printf(", \"bare\": true}\n");
    std::fflush(stdout);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: transport_bench [--link gloo|shm|auto | "
                         "--bare-ring] BYTES:ITERATIONS ...\n");
    return 2;
  }
  ppc::boundThreads(1);
  if (std::strcmp(argv[1], "--bare-ring") == 0)
    return bareRing(argc - 2, argv + 2);
  ppc::LinkPolicy link = ppc::LinkPolicy::Gloo;
  int first = 1;
  if (std::strcmp(argv[1], "--link") == 0 && argc > 2) {
    auto named = ppc::linkPolicyNamed(argv[2]);
    if (!named) {
      std::fprintf(stderr, "error: unknown link '%s'\n", argv[2]);
      return 2;
    }
    link = *named;
    first = 3;
  }
  auto env = ppc::LaunchEnv::fromEnvironment();
  if (!env)
    return fail(env.takeError());
  if (env->worldSize != 2) {
    std::fprintf(stderr, "error: transport_bench needs WORLD_SIZE=2\n");
    return 2;
  }
  auto transport = ppc::connectTransport(*env, ppc::DeviceKind::CPU,
                                         std::chrono::seconds(60), link);
  if (!transport)
    return fail(transport.takeError());
  ppc::Transport &t = **transport;
  t.setChannelCount(2); // channel 1: the benchmark's messages
  const int rank = env->rank;
  const int peer = 1 - rank;

  for (int a = first; a < argc; ++a) {
    int64_t bytes = 0;
    int iterations = 0;
    if (!parseSize(argv[a], bytes, iterations))
      return 2;
    // Separate buffers for sending and receiving: a send may still be in
    // flight when the next receive starts.
    at::Tensor out = at::full({bytes}, 1, at::kByte);
    at::Tensor in = at::zeros({bytes}, at::kByte);
    const int warmup = iterations / 10 + 2;
    std::vector<double> halfRtt;
    halfRtt.reserve(iterations);
    for (int i = 0; i < warmup + iterations; ++i) {
      Clock::time_point start = Clock::now();
      if (rank == 0) {
        if (llvm::Error err = t.send(out, peer, 1, "ping"))
          return fail(std::move(err));
        if (llvm::Error err = t.recv(in, peer, 1, "pong"))
          return fail(std::move(err));
      } else {
        if (llvm::Error err = t.recv(in, peer, 1, "ping"))
          return fail(std::move(err));
        if (llvm::Error err = t.send(out, peer, 1, "pong"))
          return fail(std::move(err));
      }
      if (i >= warmup)
        halfRtt.push_back(usSince(start) / 2);
    }
    if (llvm::Error err = t.flushSends())
      return fail(std::move(err));
    if (rank != 0)
      continue;

    // The baseline: the same bytes copied within this process, buffers
    // already touched (as the transport's are after the warm-up).
    std::vector<double> memcpyUs;
    memcpyUs.reserve(iterations);
    auto *src = out.data_ptr<uint8_t>();
    auto *dst = in.data_ptr<uint8_t>();
    // Small copies are timed in groups (up to 1000 copies, about 1 MB), so
    // that the clock's own cost does not make the sample.
    const int group = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(1000, (1 << 20) / bytes)));
    for (int i = 0; i < warmup + iterations; ++i) {
      Clock::time_point start = Clock::now();
      for (int k = 0; k < group; ++k) {
        std::memcpy(dst, src, static_cast<size_t>(bytes));
        asm volatile("" : : "r"(dst) : "memory"); // keep every copy
      }
      if (i >= warmup)
        memcpyUs.push_back(usSince(start) / group);
    }
    std::printf("{\"bytes\": %ld, \"link\": \"%s\", ", bytes,
                t.linksUsed().c_str());
    printList("half_rtt_us", halfRtt);
    std::printf(", ");
    printList("memcpy_us", memcpyUs);
    std::printf("}\n");
    std::fflush(stdout);
  }
  if (llvm::Error err = ppc::barrier(t))
    return fail(std::move(err));
  return 0;
}
