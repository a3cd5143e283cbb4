//===- tools/ppc/RankProcess.h - A ppc process that is a rank ---*- C++ -*-===//
//
// What `ppc run`, `ppc train` and `ppc generate` do first as one rank of a
// job: the launch environment. (SIGPIPE is ignored by every ppc process,
// tools/ppc/StdStreams.h: a write to a peer that has gone, a Gloo or store
// socket, fails with EPIPE, which the transport reports as that peer lost.)
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_RANKPROCESS_H
#define PPC_TOOLS_PPC_RANKPROCESS_H

#include "runtime/link/LaunchEnv.h"

#include "llvm/Support/Error.h"

namespace ppc {

/// Reads the launch environment (LaunchEnv::fromEnvironment). Errors:
/// that's.
llvm::Expected<LaunchEnv> startRank();

} // namespace ppc

#endif // PPC_TOOLS_PPC_RANKPROCESS_H
