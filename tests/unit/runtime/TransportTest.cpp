//===- tests/unit/runtime/TransportTest.cpp - Gloo transport --------------===//
//
// Tests that ranks meet, exchange tagged messages in any channel order,
// agree, and time out with an error naming the peer. The ranks are threads
// of this process, each with its own store client and process group.
//
//===----------------------------------------------------------------------===//
#include "runtime/Transport.h"
#include "runtime/Pipeline.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>

using namespace ppc;

namespace {
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

/// Runs `body(rank, transport)` on `world` threads; returns each rank's
/// error text ("" when it succeeded).
std::vector<std::string>
onRanks(int world, std::chrono::milliseconds timeout,
        const std::function<llvm::Error(int, Transport &)> &body) {
  int port = freePort();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      LaunchEnv env;
      env.rank = r;
      env.worldSize = world;
      env.masterAddr = "127.0.0.1";
      env.masterPort = port;
      auto t = connectTransport(env, DeviceKind::CPU, timeout);
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
        if (llvm::Error err = t.agreeMin(flags))
          return err;
        agreed[rank] = flags;
        std::string bytes = rank == 2 ? "float32[2,4]\nfloat32[1,4]" : "";
        if (llvm::Error err = t.broadcastBytes(bytes, 2))
          return err;
        received[rank] = bytes;
        return t.barrier();
      });
  EXPECT_EQ(errors, (std::vector<std::string>{"", "", ""}));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(agreed[r], (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(received[r], "float32[2,4]\nfloat32[1,4]");
  }
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

TEST(TransportTest, PeerExitNamesThePeer) {
  auto errors = onRanks(
      2, std::chrono::seconds(20), [](int rank, Transport &t) -> llvm::Error {
        if (rank == 0)
          return llvm::Error::success(); // leaves at once: its connections
                                         // close
        at::Tensor buf = at::empty({1});
        return t.recv(buf, 0, 1, "stage 0 -> 1 of microbatch 0");
      });
  EXPECT_EQ(errors[0], "");
  // "Connection closed by peer ..." or "Read error ...: Connection reset by
  // peer", depending on timing.
  EXPECT_EQ(errors[1].rfind("lost rank 0 (", 0), 0u) << errors[1];
  EXPECT_NE(errors[1].find("by peer"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("while waiting for stage 0 -> 1 of microbatch 0)"),
            std::string::npos)
      << errors[1];
}
