//===- tests/unit/runtime/link/LoopbackLinkTest.cpp - Ranks as threads ----===//
//
// Tests the transport over the loopback link: ranks are threads of this
// process sharing one LoopbackHub. Order per channel, tags, exact message
// counts, a lost peer named within the timeout, and the collectives on 2-4
// ranks, each in milliseconds.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/LoopbackLink.h"
#include "runtime/link/Collectives.h"
#include "runtime/link/Link.h"
#include "runtime/link/Transport.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

using namespace ppc;

namespace {
/// Runs `body(rank, transport)` for every rank of a `world`-rank job on its
/// own thread, over one hub; returns each rank's error text ("" when it
/// succeeded) and leaves the hub in `hubOut` for counting.
std::vector<std::string>
onRanks(int world, std::chrono::milliseconds timeout,
        const std::function<llvm::Error(int, Transport &)> &body,
        std::shared_ptr<LoopbackHub> *hubOut = nullptr, int channels = 3) {
  auto hub = std::make_shared<LoopbackHub>(world);
  if (hubOut)
    *hubOut = hub;
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      LinkSetup setup;
      setup.rank = r;
      setup.worldSize = world;
      setup.timeout = timeout;
      setup.loopback = hub;
      auto t = Transport::create(setup);
      if (!t) {
        errors[r] = llvm::toString(t.takeError());
        return;
      }
      (*t)->setChannelCount(channels);
      if (llvm::Error err = body(r, **t))
        errors[r] = llvm::toString(std::move(err));
    });
  for (std::thread &t : threads)
    t.join();
  return errors;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}
} // namespace

TEST(LoopbackLinkTest, ChannelsKeepTheirOrderInAnyInterleaving) {
  std::shared_ptr<LoopbackHub> hub;
  int64_t sent = -1;
  auto errors = onRanks(
      2, std::chrono::seconds(5),
      [&](int rank, Transport &t) -> llvm::Error {
        if (rank == 0) {
          for (int i = 0; i < 3; ++i)
            if (llvm::Error err = t.send(at::full({3}, 20.0 + i), 1, 2, "c2"))
              return err;
          for (int i = 0; i < 2; ++i)
            if (llvm::Error err = t.send(at::full({2}, 10.0 + i), 1, 1, "c1"))
              return err;
          sent = t.messagesSent();
          return t.flushSends();
        }
        // Channel 1 first, one receive posted ahead on each channel.
        at::Tensor posted = at::empty({3});
        if (llvm::Error err = t.postRecv(posted, 0, 2, "c2"))
          return err;
        for (int i = 0; i < 2; ++i) {
          at::Tensor buf = at::empty({2});
          if (llvm::Error err = t.recv(buf, 0, 1, "c1"))
            return err;
          EXPECT_EQ(buf[0].item<float>(), 10 + i);
        }
        if (llvm::Error err = t.recv(posted, 0, 2, "c2"))
          return err;
        EXPECT_EQ(posted[0].item<float>(), 20);
        for (int i = 1; i < 3; ++i) {
          at::Tensor buf = at::empty({3});
          if (llvm::Error err = t.recv(buf, 0, 2, "c2"))
            return err;
          EXPECT_EQ(buf[0].item<float>(), 20 + i);
        }
        return llvm::Error::success();
      },
      &hub);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(sent, 5);
  EXPECT_EQ(hub->messagesFrom(0), 5);
  EXPECT_EQ(hub->messagesFrom(1), 0);
}

TEST(LoopbackLinkTest, APostedReceiveTakesOnlyItsOwnBuffer) {
  auto errors = onRanks(2, std::chrono::seconds(5),
                        [](int rank, Transport &t) -> llvm::Error {
                          if (rank == 0)
                            return t.send(at::ones({2}), 1, 1, "m");
                          at::Tensor posted = at::empty({2});
                          if (llvm::Error err = t.postRecv(posted, 0, 1, "m"))
                            return err;
                          at::Tensor other = at::empty({2});
                          return t.recv(other, 0, 1, "m");
                        });
  EXPECT_EQ(errors[1], "internal error: receiving m into a buffer other than "
                       "the one posted for it");
}

TEST(LoopbackLinkTest, TagsPastInt32AreRefused) {
  auto errors = onRanks(
      2, std::chrono::seconds(5), [](int rank, Transport &t) -> llvm::Error {
        // Channel 1 of INT32_MAX: the second message's tag is past it.
        t.setChannelCount(INT32_MAX);
        // Rank 1 takes the first message before it leaves (a rank that has
        // left is a lost rank to its senders); the transport refuses the
        // second message's tag before any link sees it.
        if (rank == 1) {
          at::Tensor first = at::empty({1});
          return t.recv(first, 0, 1, "m");
        }
        if (llvm::Error err = t.send(at::ones({1}), 1, 1, "m"))
          return err;
        return t.send(at::ones({1}), 1, 1, "m");
      });
  EXPECT_EQ(errors[0], "message tag out of range (channel 1 of 2147483647, "
                       "message 1); use fewer microbatches");
}

TEST(LoopbackLinkTest, ASilentPeerIsNamedWithinTheTimeout) {
  auto start = std::chrono::steady_clock::now();
  int lost = -1;
  auto errors =
      onRanks(2, std::chrono::milliseconds(100),
              [&](int rank, Transport &t) -> llvm::Error {
                if (rank == 0) { // alive, but never sends
                  std::this_thread::sleep_for(std::chrono::milliseconds(200));
                  return llvm::Error::success();
                }
                at::Tensor buf = at::empty({1});
                llvm::Error err =
                    t.recv(buf, 0, 1, "stage 0 -> 1 of microbatch 0");
                // Recognised by its type, not its text.
                return llvm::handleErrors(
                    std::move(err),
                    [&](std::unique_ptr<LostRankError> e) -> llvm::Error {
                      lost = e->rank();
                      return llvm::Error(std::move(e));
                    });
              });
  EXPECT_EQ(errors[1], "lost rank 0 (no answer within 0.1 s while waiting for "
                       "stage 0 -> 1 of microbatch 0)");
  EXPECT_EQ(lost, 0);
  EXPECT_LT(secondsSince(start), 0.5);
}

TEST(LoopbackLinkTest, AClosedPeerIsNamedAtOnce) {
  auto start = std::chrono::steady_clock::now();
  auto errors = onRanks(
      3, std::chrono::seconds(10), [](int rank, Transport &t) -> llvm::Error {
        if (rank == 2) // leaves at once: its link closes
          return llvm::Error::success();
        at::Tensor buf = at::empty({1});
        if (rank == 0)
          return t.recv(buf, 2, 1, "stage 2 -> 0 of microbatch 0");
        // Rank 1 waits for rank 2 to be gone, then sends to it.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return t.send(buf, 2, 1, "stage 1 -> 2 of microbatch 0");
      });
  EXPECT_EQ(errors[0], "lost rank 2 (connection closed, while waiting for "
                       "stage 2 -> 0 of microbatch 0)");
  EXPECT_EQ(errors[1], "lost rank 2 (connection closed, while sending stage "
                       "1 -> 2 of microbatch 0)");
  EXPECT_EQ(errors[2], "");
  EXPECT_LT(secondsSince(start), 0.5);
}

TEST(LoopbackLinkTest, MessagesSentBeforeClosingStillArrive) {
  auto errors = onRanks(
      2, std::chrono::seconds(5), [](int rank, Transport &t) -> llvm::Error {
        if (rank == 0)
          return t.send(at::full({2}, 7.0), 1, 1, "m");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        at::Tensor buf = at::empty({2});
        if (llvm::Error err = t.recv(buf, 0, 1, "m"))
          return err;
        EXPECT_EQ(buf[1].item<float>(), 7);
        return llvm::Error::success();
      });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

TEST(LoopbackLinkTest, AgreeBroadcastGatherBarrier) {
  for (int world : {2, 3, 4}) {
    std::shared_ptr<LoopbackHub> hub;
    std::vector<std::vector<int64_t>> agreed(world);
    std::vector<std::string> received(world);
    std::vector<std::vector<std::string>> gathered(world, {"untouched"});
    std::vector<int64_t> sent(world);
    auto errors = onRanks(
        world, std::chrono::seconds(5),
        [&](int rank, Transport &t) -> llvm::Error {
          std::vector<int64_t> flags{rank == 1 ? 0 : 1, 5 - rank};
          if (llvm::Error err = agreeMin(t, flags))
            return err;
          agreed[rank] = flags;
          std::string bytes = rank == 1 ? "float32[2,4]\nfloat32[1,4]" : "";
          if (llvm::Error err = broadcastBytes(t, bytes, 1, "the signatures"))
            return err;
          received[rank] = bytes;
          std::string mine = rank == 0 ? "" : "rank " + std::to_string(rank);
          if (llvm::Error err =
                  gatherBytes(t, mine, world - 1, gathered[rank], "test bytes"))
            return err;
          if (llvm::Error err = barrier(t))
            return err;
          sent[rank] = t.messagesSent();
          return llvm::Error::success();
        },
        &hub);
    EXPECT_EQ(errors, std::vector<std::string>(world, ""));
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(agreed[r], (std::vector<int64_t>{0, 6 - world}));
      EXPECT_EQ(received[r], "float32[2,4]\nfloat32[1,4]");
    }
    std::vector<std::string> all{""};
    for (int r = 1; r < world; ++r)
      all.push_back("rank " + std::to_string(r));
    EXPECT_EQ(gathered[world - 1], all);
    EXPECT_EQ(gathered[0], std::vector<std::string>{"untouched"});
    // Per rank: agreeMin and barrier are one message to rank 0 (W-1 from
    // rank 0); the broadcast a length and the data per peer from rank 1;
    // the gather a length (and data unless empty) to the last rank.
    for (int r = 0; r < world; ++r) {
      int64_t expected = 2 * (r == 0 ? world - 1 : 1);
      if (r == 1)
        expected += 2 * (world - 1);
      if (r != world - 1)
        expected += r == 0 ? 1 : 2;
      EXPECT_EQ(sent[r], expected) << "world " << world << " rank " << r;
      EXPECT_EQ(hub->messagesFrom(r), expected);
    }
  }
}

TEST(LoopbackLinkTest, BroadcastRefusesAnOversizedLength) {
  auto errors = onRanks(
      2, std::chrono::seconds(5), [](int rank, Transport &t) -> llvm::Error {
        if (rank == 0) // a lying length header
          return t.send(at::tensor({int64_t(1) << 40}), 1, 0, "x");
        std::string bytes;
        return broadcastBytes(t, bytes, 0, "the signatures");
      });
  EXPECT_EQ(errors[1], "rank 0 sent a length of 1099511627776 bytes for the "
                       "signatures; the limit is 67108864");
}

TEST(LoopbackLinkTest, AllReduceSumGivesEveryRankTheSameSum) {
  for (int world : {2, 3, 4}) {
    std::shared_ptr<LoopbackHub> hub;
    std::vector<at::Tensor> sums(world);
    // Ranks 1..world-1 share the tensor; rank 0 stays out.
    std::vector<int> ranks;
    for (int r = 1; r < world; ++r)
      ranks.push_back(r);
    auto errors = onRanks(
        world, std::chrono::seconds(5),
        [&](int rank, Transport &t) -> llvm::Error {
          if (rank == 0)
            return llvm::Error::success();
          at::Tensor mine = at::full({4}, 0.1 * rank);
          if (llvm::Error err =
                  allReduceSum(t, mine, ranks, 2, "the gradient of 'w'"))
            return err;
          sums[rank] = mine;
          return t.flushSends();
        },
        &hub);
    EXPECT_EQ(errors, std::vector<std::string>(world, ""));
    at::Tensor expected = at::full({4}, 0.1 * ranks[0]);
    for (size_t k = 1; k < ranks.size(); ++k)
      expected.add_(at::full({4}, 0.1 * ranks[k]));
    for (int r : ranks)
      EXPECT_TRUE(at::equal(sums[r], expected)) << "rank " << r;
    // The lowest rank sends the sum to each other; each other sends once.
    EXPECT_EQ(hub->messagesFrom(0), 0);
    EXPECT_EQ(hub->messagesFrom(ranks[0]),
              static_cast<int64_t>(ranks.size()) - 1);
    for (size_t k = 1; k < ranks.size(); ++k)
      EXPECT_EQ(hub->messagesFrom(ranks[k]), 1);
  }
}
