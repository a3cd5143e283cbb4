//===- tools/ppc/RankProcess.h - A ppc process that is a rank ---*- C++ -*-===//
//
// What `ppc run`, `ppc train` and `ppc generate` do first as one rank of a
// job: the launch environment, and the heap's policy for large blocks.
//
// A rank allocates and frees blocks of the same sizes every microbatch
// (activations, gradients, received messages). glibc serves blocks above
// its mmap threshold (adaptive, from 128 KiB) from fresh mappings and trims
// the heap's free top back to the system, so each such allocation faults
// and clears its pages again: 5-10 % of a rank's step training 16 x
// Linear(1024) (issue #33). A rank keeps blocks up to 32 MiB (glibc's
// largest threshold) in its heap and trims only above 1 GiB free, unless
// MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ says otherwise; its
// peak resident memory grows by about the largest blocks it frees. (SIGPIPE is
// ignored by every ppc process, tools/ppc/StdStreams.h: a write to a peer that
// has gone, a Gloo or store socket, fails with EPIPE, which the transport
// reports as that peer lost.)
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_RANKPROCESS_H
#define PPC_TOOLS_PPC_RANKPROCESS_H

#include "runtime/link/LaunchEnv.h"

#include "llvm/Support/Error.h"

namespace ppc {

/// Sets the heap's policy (above) and reads the launch environment
/// (LaunchEnv::fromEnvironment). Errors: that's.
llvm::Expected<LaunchEnv> startRank();

} // namespace ppc

#endif // PPC_TOOLS_PPC_RANKPROCESS_H
