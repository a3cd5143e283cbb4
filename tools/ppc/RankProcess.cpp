//===- tools/ppc/RankProcess.cpp - A ppc process that is a rank -----------===//
//
// This file implements startRank() (see RankProcess.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/RankProcess.h"

#include <csignal>
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

/// A test hook: with PPC_TEST_RENDEZVOUS_STOP=STEP the rank stops itself
/// (SIGSTOP) as it enters rendezvous step STEP ("agree", "group"), as a
/// person or a debugger may stop it (tests/cli/test_rendezvous_trust.py).
void stopAtRendezvousStepForTests(LaunchEnv &env) {
  const char *stop = std::getenv("PPC_TEST_RENDEZVOUS_STOP");
  if (!stop)
    return;
  env.beforeRendezvousStep = [at = std::string(stop)](llvm::StringRef step) {
    if (step == at)
      std::raise(SIGSTOP);
  };
}
} // namespace

llvm::Expected<LaunchEnv> startRank() {
  keepLargeBlocksInHeap();
  auto env = LaunchEnv::fromEnvironment();
  if (env)
    stopAtRendezvousStepForTests(*env);
  return env;
}

} // namespace ppc
