//===- runtime/link/JobStore.h - A store only the job writes ----*- C++ -*-===//
//
// The rendezvous store (a c10d TCPStore) answers any client that reaches its
// port, and 2.x's lists its keys. A JobStore wraps it so that every value a
// rank sets carries an HMAC-SHA256 under the job's secret (PPC_JOB_SECRET,
// docs/security.md), and every value a rank reads is checked against it: a
// value that another client wrote or rewrote is an error naming its key,
// never something a rank acts on.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LINK_JOBSTORE_H
#define PPC_RUNTIME_LINK_JOBSTORE_H

#include "runtime/platform/TorchCompat.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ppc {

/// HMAC-SHA256 (RFC 2104 over FIPS 180-4) of `message` under `key`.
std::array<uint8_t, 32> hmacSha256(llvm::ArrayRef<uint8_t> key,
                                   llvm::ArrayRef<uint8_t> message);

/// The store key of rank `rank`'s rendezvous nonce: "ppc/nonce/R".
std::string nonceKey(int rank);

/// A nonce drawn afresh for this rank's rendezvous: 256 bits, in hex.
std::string drawNonce();

/// The job's session, bound into every JobStore MAC: a digest of every
/// rank's nonce (nonceKey(0..worldSize-1), set before each rank counted
/// itself in), read once all ranks have. Rank `rank` checks that its own
/// slot still holds `mine`, the nonce it drew, so that no rank computes
/// another run's session, and a value signed in another run (under the same
/// secret and `jobToken`) fails every rank's check. The nonces are not
/// secret. Errors, one line each (`where`: HOST:PORT):
///   "rendezvous key 'ppc/nonce/1' at WHERE holds no nonce: another process
///    is writing into this job's store"
///   "rendezvous key 'ppc/nonce/0' at WHERE no longer holds this rank's
///    nonce: another process is writing into this job's store"
llvm::Expected<std::string> jobSession(c10d::Store &store, int rank,
                                       int worldSize,
                                       const std::string &jobToken,
                                       const std::string &mine,
                                       const std::string &where);

/// A value in the store that this job's secret does not vouch for. Its
/// message is the whole one-line error (see JobStore).
struct ForgedValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A c10d::Store whose values are authenticated. A value is stored as
/// "ppc-mac1 " + 64 hex digits + " " + the value; the MAC covers the job
/// token, the job's session (a digest of nonces that every rank drew afresh
/// at this rendezvous, runtime/link/Rendezvous.cpp), the key (as the wrapped
/// store sees it, so prefixes on top of this store are covered) and the
/// value, so a value cannot be moved to another key or replayed from
/// another job, even one with the same secret and token. Contract:
///   - set(), compareSet(): the value is stored with its MAC;
///   - get(), compareSet()'s answer: a value without a valid MAC throws
///     ForgedValueError "rendezvous key 'KEY' at WHERE was not written by this
///     job (it fails the check against PPC_JOB_SECRET and this job's
///     rendezvous nonces): it was replayed from another job, written by a
///     rank given another secret, or another process is writing into this
///     job's store";
///   - add(), check(), wait(), deleteKey(), getNumKeys() pass through
///     unauthenticated: a counter's server-side sum cannot carry a MAC, so
///     ranks never act on a counter beyond a claim that can at worst fail
///     the job (a denial of service; docs/security.md).
class JobStore : public c10d::Store {
public:
  /// `secret`: the job's secret (never stored or printed); `jobToken` and
  /// `session` (the same on every rank of the job, fresh for each job):
  /// bound into every MAC; `where`: HOST:PORT for messages.
  JobStore(c10::intrusive_ptr<c10d::Store> inner, std::string secret,
           std::string jobToken, std::string session, std::string where);

  void set(const std::string &key, const std::vector<uint8_t> &value) override;
  std::vector<uint8_t> compareSet(const std::string &key,
                                  const std::vector<uint8_t> &expected,
                                  const std::vector<uint8_t> &desired) override;
  std::vector<uint8_t> get(const std::string &key) override;
  int64_t add(const std::string &key, int64_t value) override;
  bool deleteKey(const std::string &key) override;
  bool check(const std::vector<std::string> &keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;
  const std::chrono::milliseconds &getTimeout() const noexcept override;
  void setTimeout(const std::chrono::milliseconds &timeout) override;
#if PPC_STORE_HAS_CLONE
  c10::intrusive_ptr<c10d::Store> clone() override;
#endif

  /// `value` as stored under `key` (with its MAC); for tests.
  std::vector<uint8_t> seal(const std::string &key,
                            const std::vector<uint8_t> &value) const;
  /// The value inside `stored`, or throws the error above.
  std::vector<uint8_t> open(const std::string &key,
                            const std::vector<uint8_t> &stored) const;

private:
  c10::intrusive_ptr<c10d::Store> inner_;
  std::vector<uint8_t> secret_;
  std::string jobToken_;
  std::string session_;
  std::string where_;
};

} // namespace ppc

#endif // PPC_RUNTIME_LINK_JOBSTORE_H
