//===- tests/unit/runtime/link/JobStoreTest.cpp ---------------------------===//
//
// HMAC-SHA256 against RFC 4231, and the JobStore over an in-process store.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/JobStore.h"

#include "llvm/ADT/StringExtras.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

using namespace ppc;

namespace {
std::vector<uint8_t> bytes(llvm::StringRef text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

std::string hmacHex(const std::vector<uint8_t> &key,
                    const std::vector<uint8_t> &message) {
  return llvm::toHex(hmacSha256(key, message), /*LowerCase=*/true);
}

const char *kSecret = "00112233445566778899aabbccddeeff";
const char *kWhere = "127.0.0.1:29500";

c10::intrusive_ptr<JobStore> jobStore(c10::intrusive_ptr<c10d::Store> inner,
                                      const char *secret = kSecret,
                                      const char *token = "job-a",
                                      const char *session = "nonces-1") {
  return c10::make_intrusive<JobStore>(std::move(inner), secret, token, session,
                                       kWhere);
}

std::string forgedMessage(const std::string &key) {
  return "rendezvous key '" + key + "' at " + kWhere +
         " was not written by this job (it fails the check against "
         "PPC_JOB_SECRET and this job's rendezvous nonces): it was replayed "
         "from another job, written by a rank given another secret, or "
         "another process is writing into this job's store";
}

/// The message of what `fn` throws, or "".
template <typename Fn> std::string thrown(Fn fn) {
  try {
    fn();
  } catch (const ForgedValueError &e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST(JobStoreTest, HmacMatchesRfc4231) {
  EXPECT_EQ(hmacHex(std::vector<uint8_t>(20, 0x0b), bytes("Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmacHex(bytes("Jefe"), bytes("what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(
      hmacHex(std::vector<uint8_t>(20, 0xaa), std::vector<uint8_t>(50, 0xdd)),
      "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // A key longer than SHA-256's block is hashed first.
  EXPECT_EQ(hmacHex(std::vector<uint8_t>(131, 0xaa),
                    bytes("Test Using Larger Than Block-Size Key - Hash Key "
                          "First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(JobStoreTest, RoundTripsItsOwnValues) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  auto store = jobStore(inner);
  store->set("ppc/a", bytes("1234 5 678"));
  EXPECT_EQ(store->get("ppc/a"), bytes("1234 5 678"));
  store->set("ppc/empty", {});
  EXPECT_EQ(store->get("ppc/empty"), std::vector<uint8_t>());
  // What another client sees carries the value, never the secret.
  std::vector<uint8_t> raw = inner->get("ppc/a");
  std::string text(raw.begin(), raw.end());
  EXPECT_EQ(text.find(kSecret), std::string::npos);
  EXPECT_NE(text.find("1234 5 678"), std::string::npos);
}

TEST(JobStoreTest, RefusesRewrittenMovedAndForeignValues) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  auto store = jobStore(inner);
  store->set("ppc/a", bytes("4242 3 7"));
  store->set("ppc/b", bytes("1 2 3"));
  // A value rewritten in place, without a MAC, or with a MAC of another key.
  std::vector<uint8_t> sealed = inner->get("ppc/a");
  std::vector<uint8_t> changed = sealed;
  changed.back() = '8';
  inner->set("ppc/a", changed);
  EXPECT_EQ(thrown([&] { store->get("ppc/a"); }), forgedMessage("ppc/a"));
  inner->set("ppc/a", bytes("4242 3 7"));
  EXPECT_EQ(thrown([&] { store->get("ppc/a"); }), forgedMessage("ppc/a"));
  inner->set("ppc/a", inner->get("ppc/b"));
  EXPECT_EQ(thrown([&] { store->get("ppc/a"); }), forgedMessage("ppc/a"));
  // Another job's value: another secret, or the same secret and another
  // job token.
  auto other = jobStore(inner, "ffeeddccbbaa99887766554433221100");
  other->set("ppc/c", bytes("x"));
  EXPECT_EQ(thrown([&] { store->get("ppc/c"); }), forgedMessage("ppc/c"));
  auto sibling = jobStore(inner, kSecret, "job-b");
  sibling->set("ppc/d", bytes("x"));
  EXPECT_EQ(thrown([&] { store->get("ppc/d"); }), forgedMessage("ppc/d"));
  // An earlier job with the same secret and token: its ranks drew other
  // nonces (issue #45, class 1).
  auto earlier = jobStore(inner, kSecret, "job-a", "nonces-0");
  earlier->set("ppc/e", bytes("x"));
  EXPECT_EQ(thrown([&] { store->get("ppc/e"); }), forgedMessage("ppc/e"));
  // A key's name is shown printable.
  inner->set("ppc/\n", bytes("x"));
  EXPECT_EQ(thrown([&] { store->get("ppc/\n"); }), forgedMessage("ppc/\\x0a"));
}

TEST(JobStoreTest, CompareSetSealsAndChecks) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  auto store = jobStore(inner);
  EXPECT_EQ(store->compareSet("ppc/k", {}, bytes("v1")), bytes("v1"));
  // Already set: the answer is the current value, checked.
  EXPECT_EQ(store->compareSet("ppc/k", {}, bytes("v2")), bytes("v1"));
  EXPECT_EQ(store->compareSet("ppc/k", bytes("v1"), bytes("v2")), bytes("v2"));
  EXPECT_EQ(store->get("ppc/k"), bytes("v2"));
  inner->set("ppc/k", bytes("forged"));
  EXPECT_EQ(thrown([&] { store->compareSet("ppc/k", {}, bytes("v3")); }),
            forgedMessage("ppc/k"));
}

TEST(JobStoreTest, CountersAndPrefixesPassThrough) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  auto store = jobStore(inner);
  EXPECT_EQ(store->add("ppc/n", 2), 2);
  EXPECT_EQ(store->add("ppc/n", 1), 3);
  EXPECT_TRUE(store->check({"ppc/n"}));
  EXPECT_FALSE(store->check({"ppc/none"}));
  // A prefix store on top (it joins with '/'): the MAC covers the whole key.
  auto prefixed = compat::makePrefixStore("ppc/group", store);
  prefixed->set("0", bytes("addr"));
  EXPECT_EQ(prefixed->get("0"), bytes("addr"));
  EXPECT_EQ(store->get("ppc/group/0"), bytes("addr"));
  EXPECT_TRUE(store->deleteKey("ppc/group/0"));
  EXPECT_FALSE(store->check({"ppc/group/0"}));
}
