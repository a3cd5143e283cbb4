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
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
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

std::map<int, CpuTime> parseCpuTimes(const std::string &text) {
  std::map<int, CpuTime> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    // "cpuN": the machine-wide "cpu" line has no number.
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 ||
        !std::isdigit(static_cast<unsigned char>(line[3])))
      continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    fields >> cpu;
    uint64_t value = 0, total = 0, idle = 0;
    int count = 0;
    // user nice system idle iowait irq softirq steal (guest and guest_nice
    // are already in user and nice).
    for (; count < 8 && fields >> value; ++count) {
      total += value;
      if (count == 3 || count == 4)
        idle += value;
    }
    if (cpu >= 0 && count >= 4)
      out[cpu] = {idle, total};
  }
  return out;
}

std::optional<double> idleCores(std::chrono::milliseconds window) {
  cpu_set_t set;
  CPU_ZERO(&set);
  bool masked = sched_getaffinity(0, sizeof set, &set) == 0;
  auto sample = [] {
    std::ifstream stat("/proc/stat");
    std::ostringstream text;
    text << stat.rdbuf();
    return parseCpuTimes(text.str());
  };
  std::map<int, CpuTime> before = sample();
  std::this_thread::sleep_for(window);
  std::map<int, CpuTime> after = sample();
  double idle = 0;
  int counted = 0;
  for (const auto &[cpu, was] : before) {
    if (masked && (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)))
      continue;
    auto now = after.find(cpu);
    if (now == after.end() || now->second.total <= was.total ||
        now->second.idle < was.idle)
      continue;
    idle += static_cast<double>(now->second.idle - was.idle) /
            static_cast<double>(now->second.total - was.total);
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
