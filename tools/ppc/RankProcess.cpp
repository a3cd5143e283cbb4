//===- tools/ppc/RankProcess.cpp - A ppc process that is a rank -----------===//
//
// This file implements startRank() (see RankProcess.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/RankProcess.h"

namespace ppc {

llvm::Expected<LaunchEnv> startRank() { return LaunchEnv::fromEnvironment(); }

} // namespace ppc
