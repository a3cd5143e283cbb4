//===- runtime/link/JobStore.cpp - A rendezvous store only the job can write
//===//
//
// This file implements HMAC-SHA256 over LLVM's SHA256 and the JobStore,
// which seals every value it sets and opens every value it gets.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/JobStore.h"

#include "lib/Error.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"

#include <array>
#include <cstring>
#include <random>

namespace ppc {

std::array<uint8_t, 32> hmacSha256(llvm::ArrayRef<uint8_t> key,
                                   llvm::ArrayRef<uint8_t> message) {
  constexpr size_t kBlock = 64;
  std::array<uint8_t, kBlock> block{};
  if (key.size() > kBlock) {
    llvm::SHA256 hash;
    hash.update(key);
    llvm::StringRef digest = hash.final();
    std::memcpy(block.data(), digest.data(), digest.size());
  } else {
    std::copy(key.begin(), key.end(), block.begin());
  }
  std::array<uint8_t, kBlock> pad;
  for (size_t i = 0; i < kBlock; ++i)
    pad[i] = block[i] ^ 0x36;
  llvm::SHA256 inner;
  inner.update(pad);
  inner.update(message);
  std::string innerDigest = inner.final().str();
  for (size_t i = 0; i < kBlock; ++i)
    pad[i] = block[i] ^ 0x5c;
  llvm::SHA256 outer;
  outer.update(pad);
  outer.update(llvm::StringRef(innerDigest));
  llvm::StringRef digest = outer.final();
  std::array<uint8_t, 32> result;
  std::memcpy(result.data(), digest.data(), result.size());
  return result;
}

namespace {
constexpr llvm::StringLiteral kSealTag = "ppc-mac1 ";
constexpr size_t kMacHex = 64;

/// The MAC's input: lengths first, so that no two (token, session, key,
/// value) tuples share one.
std::vector<uint8_t> macInput(const std::string &token,
                              const std::string &session,
                              const std::string &key,
                              const std::vector<uint8_t> &value) {
  std::string head = "ppc-rendezvous-v2\n" + std::to_string(token.size()) +
                     ":" + token + "\n" + std::to_string(session.size()) + ":" +
                     session + "\n" + std::to_string(key.size()) + ":" + key +
                     "\n" + std::to_string(value.size()) + ":";
  std::vector<uint8_t> input(head.begin(), head.end());
  input.insert(input.end(), value.begin(), value.end());
  return input;
}
} // namespace

std::string nonceKey(int rank) { return "ppc/nonce/" + std::to_string(rank); }

namespace {
/// Hex digits in a rank's nonce: 256 bits.
constexpr size_t kNonceHex = 64;
} // namespace

std::string drawNonce() {
  std::random_device device;
  std::array<uint8_t, kNonceHex / 2> bytes;
  for (size_t i = 0; i < bytes.size(); i += 4) {
    uint32_t word = device();
    for (size_t k = 0; k < 4; ++k)
      bytes[i + k] = static_cast<uint8_t>(word >> (8 * k));
  }
  return llvm::toHex(bytes, /*LowerCase=*/true);
}

llvm::Expected<std::string> jobSession(c10d::Store &store, int rank,
                                       int worldSize,
                                       const std::string &jobToken,
                                       const std::string &mine,
                                       const std::string &where) {
  std::string all;
  for (int r = 0; r < worldSize; ++r) {
    std::vector<uint8_t> value = store.get(nonceKey(r));
    std::string nonce(value.begin(), value.end());
    bool isNonce = nonce.size() == kNonceHex && llvm::all_of(nonce, [](char c) {
                     return llvm::isDigit(c) || (c >= 'a' && c <= 'f');
                   });
    if (!isNonce || (r == rank && nonce != mine))
      return makeError(llvm::formatv(
          "rendezvous key '{0}' at {1} {2}: another process is writing into "
          "this job's store",
          nonceKey(r), where,
          isNonce ? "no longer holds this rank's nonce" : "holds no nonce"));
    all += nonce;
  }
  std::vector<uint8_t> token(jobToken.begin(), jobToken.end());
  std::vector<uint8_t> nonces(all.begin(), all.end());
  return llvm::toHex(hmacSha256(token, nonces), /*LowerCase=*/true);
}

JobStore::JobStore(c10::intrusive_ptr<c10d::Store> inner, std::string secret,
                   std::string jobToken, std::string session, std::string where)
    : inner_(std::move(inner)), secret_(secret.begin(), secret.end()),
      jobToken_(std::move(jobToken)), session_(std::move(session)),
      where_(std::move(where)) {
  timeout_ = inner_->getTimeout();
}

std::vector<uint8_t> JobStore::seal(const std::string &key,
                                    const std::vector<uint8_t> &value) const {
  auto mac = hmacSha256(secret_, macInput(jobToken_, session_, key, value));
  std::string head =
      kSealTag.str() + llvm::toHex(mac, /*LowerCase=*/true) + " ";
  std::vector<uint8_t> sealed(head.begin(), head.end());
  sealed.insert(sealed.end(), value.begin(), value.end());
  return sealed;
}

std::vector<uint8_t> JobStore::open(const std::string &key,
                                    const std::vector<uint8_t> &stored) const {
  llvm::StringRef text(reinterpret_cast<const char *>(stored.data()),
                       stored.size());
  size_t headSize = kSealTag.size() + kMacHex + 1;
  if (text.size() >= headSize && text.startswith(kSealTag) &&
      text[headSize - 1] == ' ') {
    std::vector<uint8_t> value(stored.begin() + headSize, stored.end());
    auto mac = hmacSha256(secret_, macInput(jobToken_, session_, key, value));
    if (sameSecret(text.substr(kSealTag.size(), kMacHex),
                   llvm::toHex(mac, /*LowerCase=*/true)))
      return value;
  }
  throw ForgedValueError("rendezvous key '" + printable(key) + "' at " +
                         where_ +
                         " was not written by this job (it fails the check "
                         "against PPC_JOB_SECRET and this job's rendezvous "
                         "nonces): it was replayed from another job, written "
                         "by a rank given another secret, or another process "
                         "is writing into this job's store");
}

void JobStore::set(const std::string &key, const std::vector<uint8_t> &value) {
  inner_->set(key, seal(key, value));
}

std::vector<uint8_t> JobStore::compareSet(const std::string &key,
                                          const std::vector<uint8_t> &expected,
                                          const std::vector<uint8_t> &desired) {
  // HMAC is deterministic: the sealed expected value is what a rank of this
  // job stored.
  std::vector<uint8_t> sealedExpected =
      expected.empty() ? expected : seal(key, expected);
  std::vector<uint8_t> sealedDesired = seal(key, desired);
  std::vector<uint8_t> answer =
      inner_->compareSet(key, sealedExpected, sealedDesired);
  if (answer == sealedDesired)
    return desired;
  if (answer.empty() && expected.empty())
    return answer;
  return open(key, answer);
}

std::vector<uint8_t> JobStore::get(const std::string &key) {
  return open(key, inner_->get(key));
}

int64_t JobStore::add(const std::string &key, int64_t value) {
  return inner_->add(key, value);
}

bool JobStore::deleteKey(const std::string &key) {
  return inner_->deleteKey(key);
}

bool JobStore::check(const std::vector<std::string> &keys) {
  return inner_->check(keys);
}

int64_t JobStore::getNumKeys() { return inner_->getNumKeys(); }

void JobStore::wait(const std::vector<std::string> &keys) {
  inner_->wait(keys);
}

void JobStore::wait(const std::vector<std::string> &keys,
                    const std::chrono::milliseconds &timeout) {
  inner_->wait(keys, timeout);
}

const std::chrono::milliseconds &JobStore::getTimeout() const noexcept {
  return inner_->getTimeout();
}

void JobStore::setTimeout(const std::chrono::milliseconds &timeout) {
  inner_->setTimeout(timeout);
}

#if PPC_STORE_HAS_CLONE
c10::intrusive_ptr<c10d::Store> JobStore::clone() {
  return c10::make_intrusive<JobStore>(
      inner_->clone(), std::string(secret_.begin(), secret_.end()), jobToken_,
      session_, where_);
}
#endif

} // namespace ppc
