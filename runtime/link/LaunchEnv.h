//===- runtime/link/LaunchEnv.h - The torchrun environment of a rank ------===//
//
// The variables a launcher (ppc launch, torchrun) gives each worker, and
// ppc's own environment knobs, read once where a rank starts so that
// nothing below reads the environment. Part of libppc_runtime's public API
// (Pipeline.h includes it); the transport reads it too, so it lives apart
// from the pipeline.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_LAUNCHENV_H
#define PPC_RUNTIME_LINK_LAUNCHENV_H

#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <string>

namespace ppc {

/// The torchrun environment of one rank.
struct LaunchEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  /// Whether the launcher hosts the rendezvous store at MASTER_ADDR:
  /// MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True, as torchrun and
  /// `ppc launch --master-port 0` set it); otherwise rank 0 hosts it.
  bool launcherHostsStore = false;
  /// Names the job at the rendezvous, so that ranks of two jobs that meet
  /// on one port notice: PPC_JOB_TOKEN (set by ppc launch), else
  /// torchrun's TORCHELASTIC_RUN_ID, else "default".
  std::string jobToken = "default";
  /// PPC_JOB_SECRET: the job's secret, which authenticates every value the
  /// ranks put in the rendezvous store (runtime/link/JobStore.h,
  /// docs/security.md). ppc launch generates one per job; empty when unset
  /// (the rank warns, and the shared-memory link is off). Never printed.
  std::string jobSecret;
  /// PPC_HOST_ID: replaces this rank's host identity in the shared-memory
  /// link's co-location test (ranks with different values never share
  /// memory; docs/runtime.md, "Links"). Empty: the machine's own.
  std::string hostId;
  /// Whether an edge's wire tensors cross as one message per microbatch
  /// (runtime/exec/WirePack.h): false only with PPC_COALESCE=0, one message
  /// per wire tensor, for measurement (docs/runtime.md).
  bool coalesce = true;
  /// Whether `ppc train --data-parallel` starts each stage's gradient
  /// all-reduce as soon as its last backward is done, beside the rest of
  /// the schedule (runtime/train/DataParallel.h, GradientReducer): false
  /// only with PPC_OVERLAP_ALLREDUCE=0, the all-reduce after the schedule,
  /// for measurement and the tests' bitwise comparison (docs/training.md).
  bool overlapAllReduce = true;
  /// PPC_BLAS_WARNED (set to anything): ppc launch warned about the ranks'
  /// BLAS kernel already, so the rank does not (warnAboutBlasKernel).
  bool blasWarned = false;
  /// Called as the rank enters each step of the rendezvous, with the
  /// step's name as the store records it ("agree", "group"): a front end
  /// may log it, or stop the rank there as a debugger would (ppc's tests
  /// do, through tools/ppc/RankProcess.cpp). Not read from the environment.
  std::function<void(llvm::StringRef step)> beforeRendezvousStep;
  /// GLOO_SOCKET_IFNAME: the interface(s) Gloo's pairs use (the first);
  /// empty: the local address that reaches MASTER_ADDR.
  std::string glooSocketIfname;
  /// CUDA_VISIBLE_DEVICES as given, for a message when no GPU is seen;
  /// nullopt when unset.
  std::optional<std::string> cudaVisibleDevices;
  /// PPC_STATUS_DIR: where a rank that times out writes its status record
  /// (runtime/exec/StatusRecord.h; ppc launch sets it); empty: nowhere.
  std::string statusDir;

  /// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
  /// MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE, PPC_JOB_TOKEN, PPC_JOB_SECRET,
  /// PPC_HOST_ID, PPC_OVERLAP_ALLREDUCE, PPC_COALESCE, PPC_BLAS_WARNED,
  /// PPC_STATUS_DIR, GLOO_SOCKET_IFNAME and CUDA_VISIBLE_DEVICES (every
  /// variable the runtime reads) through `getenv` (the process
  /// environment by default). RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
  /// are required; LOCAL_RANK defaults to RANK and LOCAL_WORLD_SIZE to
  /// WORLD_SIZE. Every number must fit an int (ranks from 0, sizes from 1,
  /// the port 1..65535). Errors: a missing variable ("RANK is not set; start
  /// each rank under ppc launch or torchrun"), one that breaks its rule
  /// ("WORLD_SIZE='x' is not an integer in 1..2147483647", "RANK=3000000000 is
  /// not an integer in 0..2147483647", "MASTER_PORT=70000 is not an integer
  /// in 1..65535"), a rank not below its size ("RANK=4 is not below
  /// WORLD_SIZE=4"), a MASTER_ADDR longer than 255 bytes or a job token or
  /// PPC_HOST_ID longer than 256, or any of them holding control characters
  /// ("PPC_HOST_ID 'a\x0ab' must be at most 256 printable characters"), a
  /// PPC_JOB_SECRET that is not 16 to 1024 printable characters without
  /// spaces ("PPC_JOB_SECRET must be 16 to 1024 printable characters without
  /// spaces, e.g. the output of 'openssl rand -hex 32'"; the secret itself
  /// is never shown).
  static llvm::Expected<LaunchEnv> fromEnvironment(
      const std::function<const char *(const char *)> &getenv = nullptr);
};

} // namespace ppc

#endif // PPC_RUNTIME_LINK_LAUNCHENV_H
