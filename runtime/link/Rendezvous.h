//===- runtime/link/Rendezvous.h - Meeting the other ranks of a job -------===//
//
// The ranks of a job meet through a c10d TCPStore at MASTER_ADDR:MASTER_PORT
// (served by rank 0, or by the launcher), connect a Gloo process group
// through it, and get a Transport (runtime/link/Transport.h) over the links
// that setup provides. Every step is bounded by the run's timeout; a rank that
// never arrives is a LostRankError naming it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_RENDEZVOUS_H
#define PPC_RUNTIME_LINK_RENDEZVOUS_H

#include "lib/Error.h"
#include "runtime/link/Agreement.h"
#include "runtime/link/Link.h"
#include "runtime/link/Transport.h"
#include "runtime/platform/DeviceKind.h"

#include "llvm/Support/Error.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ppc {

struct LaunchEnv;

/// The rendezvous port is bound by another process on this machine.
class PortTakenError : public llvm::ErrorInfo<PortTakenError, TypedError> {
public:
  static char ID;
  explicit PortTakenError(int port) : port_(port) {}
  int port() const { return port_; }
  std::string describe() const override;

private:
  int port_;
};

/// Meets the other ranks at env.masterAddr:env.masterPort and makes this
/// rank's transport for `device`. The rendezvous store is served by rank 0,
/// or by the launcher when env.launcherHostsStore. The steps, all within
/// about `timeout` (a blocking c10d call that outlives it is abandoned):
///   1. connect to the store (rank 0: serve it);
///   2. claim the store for env.jobToken, or find that another job holds it;
///   3. announce this rank with a nonce it draws afresh, refusing a rank
///      that another process claimed;
///   4. wait until every rank has announced itself, bind the job's store
///      (a JobStore, with a secret) to the digest of every rank's nonce,
///      then exchange and
///      compare `agreement`, every rank's record of what must be alike
///      (runtime/link/Agreement.h);
///   5. connect the Gloo process group through the store, and the links of
///      `device` (NCCL's connect per route on first use or
///      Transport::connectRoutes()).
/// Errors: PortTakenError (rank 0 serving the store); LostRankError for a
/// rank that never reached the rendezvous, or rank 0's store not
/// answering; another job holding the rendezvous; a rank joining twice;
/// "ranks disagree on --lr: rank 0 has 0.01, rank 2 has 0.5" (every rank
/// the same line, agreeAcrossRanks());
/// "rendezvous at HOST:PORT failed (...)" for the rest; and for
/// DeviceKind::CUDA those of checkCudaDevice(), before any rendezvous.
/// `link` decides where the shared-memory link carries CPU tensors
/// (runtime/link/Link.h); its errors are the link's (ShmLink.cpp).
llvm::Expected<std::unique_ptr<Transport>>
connectTransport(const LaunchEnv &env, DeviceKind device,
                 std::chrono::milliseconds timeout,
                 LinkPolicy link = LinkPolicy::Auto,
                 const Agreement &agreement = Agreement());

/// Ranks of a job that get a transport of their own (data parallelism:
/// one pipeline, or the replicas of one pipeline rank).
struct RankGroup {
  /// Names the group in the store (its keys live under it): unique among
  /// the groups of a job, e.g. "pipeline1".
  std::string name;
  /// Its ranks in the job, ascending; the transport's rank i is ranks[i],
  /// and its errors name ranks[i]. Empty: the whole job, as
  /// connectTransport() meets it.
  std::vector<int> ranks;
};

/// connectTransport() for several groups of ranks at once: one rendezvous
/// of the whole job (steps 1-4), then, for each of `groups` in order (each
/// holding env.rank; every rank passes groups of the same names, in an
/// order that cannot deadlock: each group's ranks in one order), step 5 over
/// the group's own prefix of the store: a Gloo group and links of its
/// ranks only, each connect within `timeout`. Errors: connectTransport()'s.
llvm::Expected<std::vector<std::unique_ptr<Transport>>>
connectGroupTransports(const LaunchEnv &env, DeviceKind device,
                       std::chrono::milliseconds timeout, LinkPolicy link,
                       const std::vector<RankGroup> &groups,
                       const Agreement &agreement = Agreement());

/// Checks that this rank can put its stages on cuda:LOCAL_RANK. Errors,
/// each one line: this ppc's LibTorch has no CUDA; this ppc was built
/// without NCCL; the rank sees no GPU; LOCAL_WORLD_SIZE ranks need more
/// GPUs than this machine has.
llvm::Error checkCudaDevice(const LaunchEnv &env);

/// A rendezvous store served by this process for workers it starts (they
/// get TORCHELASTIC_USE_AGENT_STORE=True, as under torchrun). It binds its
/// port, 0 = any free one, on all interfaces and holds it until destroyed,
/// so no other process can take the port between choosing and using it.
class StoreHost {
public:
  /// Errors: PortTakenError; "rendezvous at port P failed (...)" for the
  /// rest.
  static llvm::Expected<std::unique_ptr<StoreHost>> start(int port);
  ~StoreHost();
  /// The port it listens on.
  int port() const;

private:
  struct Impl;
  explicit StoreHost(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace ppc

#endif // PPC_RUNTIME_LINK_RENDEZVOUS_H
