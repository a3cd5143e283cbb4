//===- tools/ppc/RankProcess.h - A ppc process that is a rank ---*- C++ -*-===//
//
// What `ppc run`, `ppc train` and `ppc generate` do first as one rank of a
// job: the launch environment, and the process's handling of broken pipes.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_RANKPROCESS_H
#define PPC_TOOLS_PPC_RANKPROCESS_H

#include "runtime/link/LaunchEnv.h"

#include "llvm/Support/Error.h"

namespace ppc {

/// Ignores SIGPIPE for the rest of the process, so that a write to a peer
/// that has gone (a Gloo or store socket) fails with EPIPE, which the
/// transport reports as that peer lost, instead of ending this rank with a
/// signal before the peer's own error line is seen; then reads the launch
/// environment (LaunchEnv::fromEnvironment). Errors: that's.
llvm::Expected<LaunchEnv> startRank();

} // namespace ppc

#endif // PPC_TOOLS_PPC_RANKPROCESS_H
