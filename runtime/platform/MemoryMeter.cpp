//===- runtime/platform/MemoryMeter.cpp - Counting host allocator ---------===//
//
// This file implements MemoryMeter (see MemoryMeter.h): a c10::Allocator
// that wraps the CPU allocator installed before it.
//
//===----------------------------------------------------------------------===//
#include "runtime/platform/MemoryMeter.h"

#include "runtime/platform/TorchCompat.h"

#include "llvm/Support/FormatVariadic.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sys/resource.h>

namespace ppc {

namespace {
std::atomic<int64_t> liveBytes{0};
std::atomic<int64_t> peakBytes{0};
std::atomic<bool> isInstalled{false};

/// What precedes each allocation's data.
struct Header {
  int64_t bytes;
  void *context;
  c10::DeleterFnPtr deleter;
};
static_assert(sizeof(Header) <= MemoryMeter::kHeader, "header too small");

void countingDelete(void *data) {
  if (!data)
    return;
  auto *header = reinterpret_cast<Header *>(static_cast<char *>(data) -
                                            MemoryMeter::kHeader);
  liveBytes.fetch_sub(header->bytes, std::memory_order_relaxed);
  void *context = header->context;
  c10::DeleterFnPtr deleter = header->deleter;
  if (deleter)
    deleter(context);
}

class CountingAllocator final : public compat::CountingAllocatorBase {
public:
  explicit CountingAllocator(c10::Allocator *inner) : inner(inner) {}

  c10::DataPtr allocateBytes(size_t n) const override {
    c10::DataPtr base = inner->allocate(n + MemoryMeter::kHeader);
    char *raw = static_cast<char *>(base.get());
    if (!raw)
      return base;
    c10::Device device = base.device();
    c10::DeleterFnPtr deleter = base.get_deleter();
    void *context = base.release_context();
    auto *header = reinterpret_cast<Header *>(raw);
    header->bytes = static_cast<int64_t>(n);
    header->context = context;
    header->deleter = deleter;
    int64_t now =
        liveBytes.fetch_add(header->bytes, std::memory_order_relaxed) +
        header->bytes;
    int64_t seen = peakBytes.load(std::memory_order_relaxed);
    while (now > seen && !peakBytes.compare_exchange_weak(
                             seen, now, std::memory_order_relaxed))
      ;
    void *data = raw + MemoryMeter::kHeader;
    return {data, data, &countingDelete, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &countingDelete; }

private:
  c10::Allocator *inner;
};
} // namespace

bool MemoryMeter::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator *inner = c10::GetCPUAllocator();
    // Never destroyed: tensors it allocated may outlive any scope.
    static auto *meter = new CountingAllocator(inner);
    c10::SetCPUAllocator(meter, kMeterPriority);
    isInstalled = c10::GetCPUAllocator() == meter;
  });
  return isInstalled;
}

bool MemoryMeter::installed() { return isInstalled; }

int64_t MemoryMeter::current() {
  return liveBytes.load(std::memory_order_relaxed);
}

int64_t MemoryMeter::peak() {
  return peakBytes.load(std::memory_order_relaxed);
}

void MemoryMeter::resetPeak() {
  peakBytes.store(liveBytes.load(std::memory_order_relaxed),
                  std::memory_order_relaxed);
}

int64_t peakResidentBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

int64_t anonymousResidentBytes() {
  FILE *status = std::fopen("/proc/self/status", "r");
  if (!status)
    return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, status))
    if (std::sscanf(line, "RssAnon: %lld kB", &kb) == 1)
      break;
  std::fclose(status);
  return static_cast<int64_t>(kb) * 1024;
}

std::string memoryStatsText() {
  return llvm::formatv(" peak_rss_mb={0:f1} rss_anon_mb={1:f1}",
                       peakResidentBytes() / 1048576.0,
                       anonymousResidentBytes() / 1048576.0)
      .str();
}

} // namespace ppc
