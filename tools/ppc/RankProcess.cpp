//===- tools/ppc/RankProcess.cpp - A ppc process that is a rank -----------===//
//
// This file implements startRank() (see RankProcess.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/RankProcess.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ppc {
namespace {
/// Keeps large blocks in the heap (RankProcess.h), unless the user set
/// glibc's own variables.
void keepLargeBlocksInHeap() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_"))
    return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}
} // namespace

llvm::Expected<LaunchEnv> startRank() {
  keepLargeBlocksInHeap();
  return LaunchEnv::fromEnvironment();
}

} // namespace ppc
