//===- tests/unit/runtime/link/ShmLinkTest.cpp - The shared-memory link ---===//
//
// Tests the ring of runtime/link/ShmRing.h between two threads and against a
// forked process that dies mid-message, and the link of ShmLink.cpp between
// two threads meeting through an in-memory store.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Link.h"
#include "runtime/link/ShmRing.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace ppc {
namespace {

using namespace std::chrono_literals;

std::string path(const shm::ShmRing &ring) {
  return "/proc/self/fd/" + std::to_string(ring.fd());
}

shm::RingPeer selfPeer(std::chrono::milliseconds timeout = 10s) {
  return shm::RingPeer{1, shm::PeerProcess::self(), timeout};
}

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<unsigned char>((i * 131 + seed * 7) >> 3);
  return v;
}

TEST(ShmRingTest, MessagesArriveInOrderAndWhole) {
  // A 4 KiB ring: every message above it streams through in chunks.
  auto ring = shm::ShmRing::create(4096);
  ASSERT_TRUE(bool(ring)) << llvm::toString(ring.takeError());
  auto reader = shm::ShmRing::open(path(*ring), ring->nonce());
  ASSERT_TRUE(bool(reader)) << llvm::toString(reader.takeError());
  std::vector<size_t> sizes{0, 1, 16, 4080, 4096, 4097, 100000, 3 << 20, 7};
  std::thread sender([&] {
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<unsigned char> data = pattern(sizes[k], unsigned(k));
      shm::Outgoing m(int32_t(k * 10), data.data(), data.size());
      llvm::Error err = shm::sendMessage(*ring, selfPeer(), m, "m");
      EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
    }
  });
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<unsigned char> got(sizes[k], 0xee);
    llvm::Error err = shm::receiveMessage(*reader, selfPeer(), int32_t(k * 10),
                                          got.data(), got.size(), "m");
    ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
    EXPECT_EQ(got, pattern(sizes[k], unsigned(k))) << "message " << k;
  }
  sender.join();
}

TEST(ShmRingTest, AnotherTagOrSizeIsAnInternalError) {
  auto ring = shm::ShmRing::create(4096);
  ASSERT_TRUE(bool(ring));
  float x = 1;
  shm::Outgoing m(7, &x, sizeof(x));
  ASSERT_FALSE(bool(shm::sendMessage(*ring, selfPeer(), m, "m")));
  float y = 0;
  llvm::Error err =
      shm::receiveMessage(*ring, selfPeer(), 8, &y, sizeof(y), "value v");
  EXPECT_EQ(llvm::toString(std::move(err)),
            "internal error: rank 1 sent a shared-memory message (tag 7, 4 "
            "bytes) where value v was expected (tag 8, 4 bytes)");
}

TEST(ShmRingTest, AnotherRingsNonceIsRefused) {
  auto ring = shm::ShmRing::create(4096);
  ASSERT_TRUE(bool(ring));
  auto other = shm::ShmRing::open(path(*ring), ring->nonce() + 1);
  ASSERT_FALSE(bool(other));
  EXPECT_NE(llvm::toString(other.takeError()).find("is not the one"),
            std::string::npos);
}

TEST(ShmRingTest, SilenceTimesOutNamingThePeer) {
  auto ring = shm::ShmRing::create(4096);
  ASSERT_TRUE(bool(ring));
  float y = 0;
  llvm::Error err =
      shm::receiveMessage(*ring, selfPeer(200ms), 0, &y, sizeof(y), "value v");
  EXPECT_EQ(llvm::toString(std::move(err)),
            "lost rank 1 (no answer within 0.2 s while waiting for value v)");
}

TEST(ShmRingTest, SenderKilledMidMessageIsALostRank) {
  auto ring = shm::ShmRing::create(4096);
  ASSERT_TRUE(bool(ring));
  std::vector<unsigned char> data = pattern(1 << 20, 3);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Once told to, writes the frame and what fits of 1 MiB, then dies.
    char byte;
    if (read(go[0], &byte, 1) == 1) {
      shm::Outgoing m(5, data.data(), data.size());
      m.advance(*ring);
    }
    _exit(0);
  }
  // Known while it runs; unreaped after its exit, it is a zombie, which
  // counts as gone.
  shm::RingPeer peer{1, shm::PeerProcess(child, shm::processStartTime(child)),
                     30s};
  ASSERT_TRUE(peer.process.alive());
  ASSERT_EQ(write(go[1], "x", 1), 1);
  std::vector<unsigned char> got(data.size());
  auto start = std::chrono::steady_clock::now();
  llvm::Error err =
      shm::receiveMessage(*ring, peer, 5, got.data(), got.size(), "value v");
  EXPECT_EQ(llvm::toString(std::move(err)),
            "lost rank 1 (it exited, while waiting for value v)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  int status = 0;
  waitpid(child, &status, 0);
  close(go[0]);
  close(go[1]);
}

/// Two links (ranks 0 and 1 of 2) over one in-memory store, each made on
/// its own thread as the ranks of a job would.
struct LinkPair {
  std::unique_ptr<Link> links[2];
  std::string errors[2];
};

LinkPair makePair(LinkPolicy policy, std::chrono::milliseconds timeout = 10s) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  LinkPair pair;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      LinkSetup setup;
      setup.rank = r;
      setup.worldSize = 2;
      setup.timeout = timeout;
      setup.store = store;
      setup.link = policy;
      auto link = makeShmLink(setup);
      if (!link)
        pair.errors[r] = llvm::toString(link.takeError());
      else
        pair.links[r] = std::move(*link);
    });
  for (std::thread &t : threads)
    t.join();
  return pair;
}

TEST(ShmLinkTest, BothSidesSendingLargeMessagesFirstDoNotDeadlock) {
  LinkPair pair = makePair(LinkPolicy::Shm);
  ASSERT_TRUE(pair.links[0] && pair.links[1]) << pair.errors[0];
  EXPECT_TRUE(pair.links[0]->carries(at::zeros({1}), 1));
  // Each sends 3 x 24 MiB (beyond what its 4 MiB ring holds) on two
  // channels, interleaved, before it receives anything; then receives the
  // channels in the other order.
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Link &link = *pair.links[r];
      int peer = 1 - r;
      std::vector<at::Tensor> sent;
      auto fail = [&](llvm::Error err) {
        if (err && errors[r].empty())
          errors[r] = llvm::toString(std::move(err));
        else
          llvm::consumeError(std::move(err));
      };
      for (int k = 0; k < 6; ++k) {
        sent.push_back(at::full({6 << 20}, float(r * 100 + k)));
        fail(link.send(sent.back(), {peer, 1 + k % 2, k}, "big"));
      }
      for (int channel : {2, 1})
        for (int k = channel - 1; k < 6; k += 2) {
          at::Tensor got = at::empty({6 << 20});
          fail(link.recv(got, {peer, channel, k}, "big"));
          if (!got.equal(at::full({6 << 20}, float(peer * 100 + k))))
            fail(makeError("message " + std::to_string(k) + " differs"));
        }
      fail(link.flushSends(std::chrono::steady_clock::now() + 10s));
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(ShmLinkTest, SilentPeerTimesOutNamed) {
  LinkPair pair = makePair(LinkPolicy::Auto, 300ms);
  ASSERT_TRUE(pair.links[0] && pair.links[1]) << pair.errors[0];
  at::Tensor got = at::empty({4});
  // Rank 1 never published a ring on channel 1.
  llvm::Error err = pair.links[0]->recv(got, {1, 1, 1}, "value v");
  EXPECT_EQ(llvm::toString(std::move(err)),
            "lost rank 1 (no answer within 0.3 s while waiting for value v)");
}

// A sender's link waits, as it goes, for its receivers to map their rings
// (the messages in them live as long as a process holds them); once the
// job has failed, nobody will.
TEST(ShmLinkTest, AnAbandonedLinkDoesNotWaitForItsReceivers) {
  LinkPair pair = makePair(LinkPolicy::Shm, 30s);
  ASSERT_TRUE(pair.links[0] && pair.links[1]) << pair.errors[0];
  EXPECT_EQ(
      llvm::toString(pair.links[0]->send(at::ones({4}), {1, 1, 1}, "value v")),
      "");
  auto start = std::chrono::steady_clock::now();
  pair.links[0]->abandon();
  pair.links[0].reset(); // rank 1 never opened the ring
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(ShmLinkTest, GlooPolicyDeclines) {
  LinkPair pair = makePair(LinkPolicy::Gloo);
  EXPECT_EQ(pair.errors[0], "");
  EXPECT_FALSE(pair.links[0]);
  EXPECT_FALSE(pair.links[1]);
}

/// Rank 0's link setup in a two-rank job whose rank 1 has published itself
/// as a rank on another host asking for `policy` ("shm", "auto").
LinkSetup besideARankOnAnotherHost(const std::string &policy) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string other = "1\nanother-host\n1\n1\n" + policy;
  store->set("ppc_shm/peer/1",
             std::vector<uint8_t>(other.begin(), other.end()));
  LinkSetup setup;
  setup.rank = 0;
  setup.worldSize = 2;
  setup.store = store;
  return setup;
}

TEST(ShmLinkTest, ShmPolicyRefusesARankOnAnotherHost) {
  LinkSetup setup = besideARankOnAnotherHost("shm");
  setup.link = LinkPolicy::Shm;
  auto link = makeShmLink(setup);
  ASSERT_FALSE(bool(link));
  EXPECT_EQ(llvm::toString(link.takeError()),
            "link shm needs every rank on one host, but rank 1 runs on "
            "another host than rank 0; use link auto or link gloo");
}

TEST(ShmLinkTest, AutoPolicyLeavesAPeerOnAnotherHostToGloo) {
  auto link = makeShmLink(besideARankOnAnotherHost("auto"));
  ASSERT_TRUE(bool(link)) << llvm::toString(link.takeError());
  EXPECT_FALSE(*link); // no co-located peer: no link
}

} // namespace
} // namespace ppc
