//===- tools/ppc/RankProcess.cpp - A ppc process that is a rank -----------===//
//
// This file implements startRank() (see RankProcess.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/RankProcess.h"

#include <csignal>

namespace ppc {

llvm::Expected<LaunchEnv> startRank() {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
  return LaunchEnv::fromEnvironment();
}

} // namespace ppc
