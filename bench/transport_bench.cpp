//===- bench/transport_bench.cpp - Ping-pong over ppc's Transport ---------===//
//
// Benchmark 4 (bench/run.py). Two ranks, started by
//
//   ppc launch --nproc-per-node 2 --master-port 0 -- transport_bench B:N ...
//
// meet through ppc's own connectTransport (runtime/Transport.h: the c10d
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
// Threads are bounded to 1 (ppc::boundThreads), as `ppc run --threads 1`.
//
//===----------------------------------------------------------------------===//
#include "runtime/Collectives.h"
#include "runtime/LaunchEnv.h"
#include "runtime/Rendezvous.h"
#include "runtime/Threads.h"

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

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: transport_bench BYTES:ITERATIONS ...\n");
    return 2;
  }
  ppc::boundThreads(1);
  auto env = ppc::LaunchEnv::fromEnvironment();
  if (!env)
    return fail(env.takeError());
  if (env->worldSize != 2) {
    std::fprintf(stderr, "error: transport_bench needs WORLD_SIZE=2\n");
    return 2;
  }
  auto transport = ppc::connectTransport(*env, ppc::DeviceKind::CPU,
                                         std::chrono::seconds(60));
  if (!transport)
    return fail(transport.takeError());
  ppc::Transport &t = **transport;
  t.setChannelCount(2); // channel 1: the benchmark's messages
  const int rank = env->rank;
  const int peer = 1 - rank;

  for (int a = 1; a < argc; ++a) {
    int64_t bytes = 0;
    int iterations = 0;
    if (std::sscanf(argv[a], "%ld:%d", &bytes, &iterations) != 2 || bytes < 1 ||
        iterations < 1) {
      std::fprintf(stderr, "error: '%s' is not BYTES:ITERATIONS\n", argv[a]);
      return 2;
    }
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
    std::printf("{\"bytes\": %ld, ", bytes);
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
