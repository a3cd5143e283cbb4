//===- runtime/platform/Threads.cpp - Bounding a rank's thread pools ------===//
//
// This file implements boundThreads: LibTorch's own setters, then the BLAS
// libraries' setters looked up by name in the running process.
//
//===----------------------------------------------------------------------===//
#include "runtime/platform/Threads.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include <dlfcn.h>
#include <sched.h>

namespace ppc {
namespace {

template <typename Arg> bool callSetter(const char *name, Arg threads) {
  void *address = findBlasSymbol(name);
  if (!address)
    return false;
  reinterpret_cast<void (*)(Arg)>(address)(threads);
  return true;
}

/// OpenBLAS's thread count when it was first asked: the size of the pool
/// it started when loaded (unless the program changed it before); 0 when
/// OpenBLAS is not loaded or too old to say.
int openBLASPoolSize() {
  static const int size = [] {
    void *address = findBlasSymbol("openblas_get_num_threads");
    return address ? reinterpret_cast<int (*)()>(address)() : 0;
  }();
  return size;
}

} // namespace

void *findBlasSymbol(const char *name) {
  if (void *address = dlsym(RTLD_DEFAULT, name))
    return address;
  Dl_info info;
  if (!dladdr(reinterpret_cast<void *>(&at::set_num_threads), &info) ||
      !info.dli_fname)
    return nullptr;
  // RTLD_NOLOAD: a handle to the already loaded LibTorch, or nothing.
  void *torch = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!torch)
    return nullptr;
  void *address = dlsym(torch, name);
  dlclose(torch);
  return address;
}

int availableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  // A mask over more than CPU_SETSIZE (1024) CPUs fails with EINVAL; the
  // machine's count is the fallback.
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int defaultThreads(int localWorldSize) {
  return std::max(1, availableCores() / std::max(1, localWorldSize));
}

std::optional<double> idleCores(std::chrono::milliseconds window) {
  cpu_set_t set;
  CPU_ZERO(&set);
  bool masked = sched_getaffinity(0, sizeof set, &set) == 0;
  // Per CPU of the mask: (idle + iowait, total) jiffies.
  auto sample = [&]() -> std::map<int, std::pair<uint64_t, uint64_t>> {
    std::map<int, std::pair<uint64_t, uint64_t>> out;
    std::ifstream stat("/proc/stat");
    std::string line;
    while (std::getline(stat, line)) {
      int cpu = -1;
      uint64_t v[8] = {};
      if (std::sscanf(line.c_str(), "cpu%d %lu %lu %lu %lu %lu %lu %lu %lu",
                      &cpu, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                      &v[7]) < 5 ||
          cpu < 0 || (masked && cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)))
        continue;
      uint64_t total = 0;
      for (uint64_t x : v)
        total += x;
      out[cpu] = {v[3] + v[4], total};
    }
    return out;
  };
  auto before = sample();
  std::this_thread::sleep_for(window);
  auto after = sample();
  double idle = 0;
  int counted = 0;
  for (const auto &[cpu, was] : before) {
    auto now = after.find(cpu);
    if (now == after.end() || now->second.second <= was.second)
      continue;
    idle += static_cast<double>(now->second.first - was.first) /
            static_cast<double>(now->second.second - was.second);
    ++counted;
  }
  if (!counted)
    return std::nullopt;
  return idle;
}

int rankDefaultThreads(int localWorldSize) {
  int threads = defaultThreads(localWorldSize);
  if (threads <= 1)
    return threads;
  std::optional<double> idle = idleCores(std::chrono::milliseconds(60));
  if (!idle)
    return threads;
  int share = static_cast<int>(
      std::lround(*idle / static_cast<double>(std::max(1, localWorldSize))));
  return std::clamp(share, 1, threads);
}

IntegerRule threadsRule() {
  return {0, std::max(4, 4 * availableCores()), "",
          "0: the default; at most 4 per core"};
}

void boundThreads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);

  // Each BLAS keeps its own count. The prototypes: OpenBLAS and GotoBLAS
  // `void f(int)`, MKL `void MKL_Set_Num_Threads(int)`, BLIS
  // `void bli_thread_set_num_threads(dim_t)` with a 64-bit dim_t. OpenBLAS
  // would start threads to grow its pool; it is only ever lowered.
  int pool = openBLASPoolSize();
  int blasThreads = pool > 0 ? std::min(threads, pool) : threads;
  if (!callSetter("openblas_set_num_threads", blasThreads))
    callSetter("goto_set_num_threads", blasThreads);
  callSetter("MKL_Set_Num_Threads", threads);
  callSetter("bli_thread_set_num_threads", static_cast<int64_t>(threads));

  // Throws once the inter-op pool has started or was sized before: then
  // it keeps that size (a second Pipeline in one process, a caller that
  // ran a fork first).
  try {
    at::set_num_interop_threads(1);
  } catch (const c10::Error &) {
  }
}

} // namespace ppc
