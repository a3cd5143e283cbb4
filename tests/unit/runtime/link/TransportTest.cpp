//===- tests/unit/runtime/link/TransportTest.cpp - Gloo transport ---------===//
//
// Tests that ranks meet, exchange tagged messages in any channel order,
// agree, and time out with an error naming the peer. The ranks are threads
// of this process, each with its own store client and process group.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Collectives.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/link/Link.h"
#include "runtime/link/Rendezvous.h"
#include "tests/unit/runtime/FreePort.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>

using namespace ppc;

namespace {
/// The environment of rank `rank` of `world` meeting at `store`.
LaunchEnv rankEnv(int rank, int world, const StoreHost &store,
                  std::string token = "test") {
  LaunchEnv env;
  env.rank = rank;
  env.worldSize = world;
  env.masterAddr = "127.0.0.1";
  env.masterPort = store.port();
  env.launcherHostsStore = true;
  env.jobToken = std::move(token);
  return env;
}

/// Runs `body(rank, transport)` on the threads of ranks `ranks` (all of
/// 0..world-1 by default) meeting at a store this test serves, as ppc
/// launch does; returns each rank's error text ("" when it succeeded).
std::vector<std::string>
onRanks(int world, std::chrono::milliseconds timeout,
        const std::function<llvm::Error(int, Transport &)> &body,
        std::vector<int> ranks = {}, LinkPolicy link = LinkPolicy::Auto) {
  auto store = StoreHost::start(0);
  if (!store)
    return {llvm::toString(store.takeError())};
  if (ranks.empty())
    for (int r = 0; r < world; ++r)
      ranks.push_back(r);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      LaunchEnv env = rankEnv(r, world, **store);
      auto t = connectTransport(env, DeviceKind::CPU, timeout, link);
      if (!t) {
        errors[r] = llvm::toString(t.takeError());
        return;
      }
      (*t)->setChannelCount(3);
      if (llvm::Error err = body(r, **t))
        errors[r] = llvm::toString(std::move(err));
    });
  for (std::thread &t : threads)
    t.join();
  return errors;
}
} // namespace

TEST(TransportTest, ChannelsMatchInAnyOrder) {
  auto errors = onRanks(
      2, std::chrono::seconds(20), [](int rank, Transport &t) -> llvm::Error {
        if (rank == 0) {
          // Channel 2 first, then channel 1, twice each.
          for (int i = 0; i < 2; ++i)
            if (llvm::Error err = t.send(at::full({3}, 20.0 + i), 1, 2, "c2"))
              return err;
          for (int i = 0; i < 2; ++i)
            if (llvm::Error err = t.send(at::full({2}, 10.0 + i), 1, 1, "c1"))
              return err;
          return t.flushSends();
        }
        for (int channel : {1, 2})
          for (int i = 0; i < 2; ++i) {
            at::Tensor buf = at::empty({channel == 1 ? 2 : 3});
            if (llvm::Error err = t.recv(buf, 0, channel, "c"))
              return err;
            EXPECT_EQ(buf[0].item<float>(), channel * 10 + i);
          }
        return llvm::Error::success();
      });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

TEST(TransportTest, AgreeBroadcastBarrier) {
  std::vector<std::vector<int64_t>> agreed(3);
  std::vector<std::string> received(3);
  auto errors = onRanks(
      3, std::chrono::seconds(20), [&](int rank, Transport &t) -> llvm::Error {
        std::vector<int64_t> flags{rank == 1 ? 0 : 1, 5 - rank};
        if (llvm::Error err = agreeMin(t, flags))
          return err;
        agreed[rank] = flags;
        std::string bytes = rank == 2 ? "float32[2,4]\nfloat32[1,4]" : "";
        if (llvm::Error err =
                broadcastBytes(t, bytes, 2, "the microbatch signatures"))
          return err;
        received[rank] = bytes;
        return barrier(t);
      });
  EXPECT_EQ(errors, (std::vector<std::string>{"", "", ""}));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(agreed[r], (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(received[r], "float32[2,4]\nfloat32[1,4]");
  }
}

// Rank 1 collects every rank's bytes (empty ones too); the others' output
// stays as it was.
TEST(TransportTest, GatherBytes) {
  std::vector<std::vector<std::string>> gathered(3, {"untouched"});
  auto errors = onRanks(
      3, std::chrono::seconds(20), [&](int rank, Transport &t) -> llvm::Error {
        std::string bytes = rank == 2 ? "" : "rank " + std::to_string(rank);
        return gatherBytes(t, bytes, 1, gathered[rank], "test bytes");
      });
  EXPECT_EQ(errors, (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(gathered[1], (std::vector<std::string>{"rank 0", "rank 1", ""}));
  EXPECT_EQ(gathered[0], std::vector<std::string>{"untouched"});
  EXPECT_EQ(gathered[2], std::vector<std::string>{"untouched"});
}

TEST(TransportTest, TimeoutNamesThePeer) {
  auto errors =
      onRanks(2, std::chrono::milliseconds(3000),
              [](int rank, Transport &t) -> llvm::Error {
                if (rank == 0) { // alive, but never sends
                  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
                  return llvm::Error::success();
                }
                at::Tensor buf = at::empty({1});
                return t.recv(buf, 0, 1, "stage 0 -> 1 of microbatch 0");
              });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1],
            "lost rank 0 (no answer within 3 s while waiting for stage 0 -> "
            "1 of microbatch 0)");
}

// Gloo's: a rank that leaves closes its connections. (Ranks that are
// threads of one process share a pid, so the shared-memory link cannot see
// one leave; ShmLinkTest kills a real process.)
TEST(TransportTest, PeerExitNamesThePeer) {
  auto errors = onRanks(
      2, std::chrono::seconds(20),
      [](int rank, Transport &t) -> llvm::Error {
        if (rank == 0)
          return llvm::Error::success(); // leaves at once: its connections
                                         // close
        at::Tensor buf = at::empty({1});
        return t.recv(buf, 0, 1, "stage 0 -> 1 of microbatch 0");
      },
      {}, LinkPolicy::Gloo);
  EXPECT_EQ(errors[0], "");
  // "Connection closed by peer ..." or "Read error ...: Connection reset by
  // peer", depending on timing.
  EXPECT_EQ(errors[1].rfind("lost rank 0 (", 0), 0u) << errors[1];
  EXPECT_NE(errors[1].find("by peer"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("while waiting for stage 0 -> 1 of microbatch 0)"),
            std::string::npos)
      << errors[1];
}

TEST(TransportTest, MissingRankIsNamedWithinTheTimeout) {
  auto start = std::chrono::steady_clock::now();
  auto errors =
      onRanks(3, std::chrono::milliseconds(1500),
              [](int, Transport &) { return llvm::Error::success(); }, {0, 2});
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (int r : {0, 2})
    EXPECT_EQ(errors[r].rfind("lost rank 1 (never reached the rendezvous at "
                              "127.0.0.1:",
                              0),
              0u)
        << errors[r];
  EXPECT_LT(seconds, 4.0);
}

TEST(TransportTest, AnotherJobsRanksAreRefused) {
  auto store = StoreHost::start(0);
  ASSERT_TRUE(static_cast<bool>(store));
  std::string mine, theirs, twice;
  // Job "a" claims the store with its rank 0; it waits for its rank 1.
  std::thread a0([&] {
    auto t = connectTransport(rankEnv(0, 2, **store, "a"), DeviceKind::CPU,
                              std::chrono::milliseconds(2500));
    mine = t ? "" : llvm::toString(t.takeError());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto b1 = connectTransport(rankEnv(1, 2, **store, "b"), DeviceKind::CPU,
                             std::chrono::milliseconds(1000));
  theirs = b1 ? "" : llvm::toString(b1.takeError());
  auto a0again = connectTransport(rankEnv(0, 2, **store, "a"), DeviceKind::CPU,
                                  std::chrono::milliseconds(1000));
  twice = a0again ? "" : llvm::toString(a0again.takeError());
  a0.join();
  std::string where = "127.0.0.1:" + std::to_string((*store)->port());
  EXPECT_EQ(theirs, "another job (job token 'a') holds the rendezvous at " +
                        where + "; give each job its own MASTER_PORT");
  EXPECT_EQ(
      twice.rfind("RANK=0 joined the rendezvous at " + where + " twice", 0), 0u)
      << twice;
  EXPECT_EQ(mine.rfind("lost rank 1 (never reached the rendezvous", 0), 0u)
      << mine;
}

TEST(TransportTest, TakenPortIsOneClearLine) {
  auto store = StoreHost::start(0);
  ASSERT_TRUE(static_cast<bool>(store));
  auto second = StoreHost::start((*store)->port());
  ASSERT_FALSE(static_cast<bool>(second));
  // A PortTakenError, recognised by its type.
  int port = -1;
  std::string text;
  llvm::handleAllErrors(
      second.takeError(),
      [&](const PortTakenError &e) {
        port = e.port();
        text = e.message();
      },
      [&](const llvm::ErrorInfoBase &e) { text = "other: " + e.message(); });
  EXPECT_EQ(port, (*store)->port());
  EXPECT_EQ(text, "MASTER_PORT " + std::to_string((*store)->port()) +
                      " is taken on this machine (another job?); choose "
                      "another port");
}

// Over Gloo, whose sends complete as the receiver takes them (the
// shared-memory ring would hold all eight small messages at once).
TEST(TransportTest, FlushWaitsOneTimeoutForAllPendingSends) {
  // Rank 1 takes 0.4 s per message: each send alone would finish within
  // the 1 s timeout, but all eight take 3.2 s. flushSends() has one
  // deadline for all of them, so a peer that drains too slowly cannot
  // stretch it to a timeout per message.
  double flushSeconds = 0;
  auto errors = onRanks(
      2, std::chrono::milliseconds(1000),
      [&](int rank, Transport &t) -> llvm::Error {
        if (rank == 1) {
          for (int i = 0; i < 8; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(400));
            at::Tensor buf = at::empty({4});
            if (llvm::Error err = t.recv(buf, 0, 1, "m"))
              return err;
          }
          return llvm::Error::success();
        }
        for (int i = 0; i < 8; ++i)
          if (llvm::Error err = t.send(at::full({4}, 1.0), 1, 1, "m"))
            return err;
        auto start = std::chrono::steady_clock::now();
        llvm::Error err = t.flushSends();
        flushSeconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
        return err;
      },
      {}, LinkPolicy::Gloo);
  EXPECT_EQ(errors[0],
            "lost rank 1 (no answer within 1 s while waiting for m)");
  EXPECT_LT(flushSeconds, 2.0);
}

// LibTorch 1.13's store server reads each request to its end without a
// timeout, and its destructor joins the thread doing so: a rank stopped
// (SIGSTOP) between two writes of one request held rank 0's exit for ever,
// after rank 0 had reported the lost rank. The transport drops the store
// within a bound instead (LibTorch 2.x's server never blocks on a client).
TEST(TransportTest, AStoreClientStoppedMidRequestDoesNotHoldTheExit) {
  LaunchEnv env;
  env.worldSize = 1;
  env.masterAddr = "127.0.0.1";
  env.masterPort = ppc::testing::freePort();
  env.jobToken = "test";
  auto t = connectTransport(env, DeviceKind::CPU, std::chrono::seconds(30));
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  // Half a request: a query type (0 is 1.13's SET), and never its key.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(env.masterPort));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(send(fd, "\0", 1, 0), 1);
  // Time for the server to take the byte and wait for the rest.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto gone = std::make_shared<std::promise<void>>();
  std::future<void> done = gone->get_future();
  std::thread([transport = std::move(*t), gone]() mutable {
    transport.reset();
    gone->set_value();
  }).detach();
  EXPECT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the transport's destructor waited on a store client that stopped "
         "mid-request";
  // Either way, the server's thread ends once the client closes.
  close(fd);
  done.wait();
}
