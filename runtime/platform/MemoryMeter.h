//===- runtime/platform/MemoryMeter.h - Counting host allocator -----------===//
//
// Measures the host (CPU) memory LibTorch allocates for tensors, for
// `ppc train --stats` (peak_bytes=, docs/training.md): install() puts a
// counting allocator in front of the CPU allocator in use
// (c10::GetCPUAllocator(); c10::SetCPUAllocator with priority
// kMeterPriority, above the default's 0, so the default cannot take its
// place again), process-wide and for the rest of the process. Each
// allocation of n bytes takes n + kHeader bytes from the allocator it
// wraps: a header before the data holds n and the wrapped allocation's
// context and deleter, so freeing needs no table or lock and the data stays
// kHeader (64) bytes aligned. current() and peak() count the n bytes of
// live allocations made through the meter (tensors that existed before
// install() are freed by their own deleters and not counted; memory LibTorch
// does not allocate, e.g. shared-memory ring buffers or from_blob tensors,
// is not counted either). Counters are atomics: allocations from any
// thread (intra-op workers, the autograd engine) count.
//
// A process has one meter; ranks are processes, so the counts are one
// rank's. CUDA memory is not counted (the stages' tensors then live on the
// GPU; torch.cuda's allocator statistics are the tool there).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_MEMORYMETER_H
#define PPC_RUNTIME_PLATFORM_MEMORYMETER_H

#include <cstdint>
#include <string>

namespace ppc {

class MemoryMeter {
public:
  /// The priority install() registers the meter with.
  static constexpr uint8_t kMeterPriority = 100;
  /// Bytes each allocation takes beyond its own.
  static constexpr int64_t kHeader = 64;

  /// Installs the meter in front of the current CPU allocator; later calls
  /// do nothing. Returns whether the meter is installed (false only when an
  /// allocator of a higher priority is installed already).
  static bool install();
  static bool installed();
  /// Bytes live through the meter now; the most live at once since the
  /// last resetPeak() (or install()).
  static int64_t current();
  static int64_t peak();
  /// Starts a new peak from current().
  static void resetPeak();
};

/// The process's peak resident memory in bytes (getrusage's ru_maxrss, what
/// `/usr/bin/time -v` reports), and its anonymous resident memory now
/// (/proc/self/status RssAnon: the heap, not mapped files); 0 where the
/// system does not say.
int64_t peakResidentBytes();
int64_t anonymousResidentBytes();
/// Both for a --stats line: " peak_rss_mb=512.3 rss_anon_mb=101.0".
std::string memoryStatsText();

} // namespace ppc

#endif // PPC_RUNTIME_PLATFORM_MEMORYMETER_H
