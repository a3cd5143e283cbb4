//===- runtime/Transport.cpp - Point-to-point messages between ranks ------===//
//
// This file implements the rendezvous (a c10d::TCPStore served by rank 0),
// the Gloo transport, the NCCL transport (only with PPC_HAVE_NCCL), and the
// small agreement protocols built from point-to-point messages.
//
// The agreement protocols (agreeMin, broadcastBytes, barrier) deliberately
// avoid Gloo collectives: a collective that fails cannot say which rank it
// lost, a point-to-point message can.
//
//===----------------------------------------------------------------------===//
#include "runtime/Transport.h"

#include "lib/Error.h"
#include "lib/TorchCompat.h"
#include "runtime/Pipeline.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace ppc {

llvm::Expected<int> Transport::nextTag(bool sending, int peer, int channel) {
  int64_t seq = sequence_[{sending, peer, channel}]++;
  int64_t tag = seq * channelCount_ + channel;
  if (channel < 0 || channel >= channelCount_ || tag > INT32_MAX)
    return makeError(
        llvm::formatv("message tag out of range (channel {0} of {1}, "
                      "message {2}); use fewer microbatches",
                      channel, channelCount_, seq)
            .str());
  return static_cast<int>(tag);
}

llvm::Error Transport::agreeMin(std::vector<int64_t> &values) {
  if (worldSize_ == 1)
    return llvm::Error::success();
  auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor mine = at::tensor(values, opts).to(device());
  if (rank_ == 0) {
    at::Tensor acc = mine.clone();
    for (int peer = 1; peer < worldSize_; ++peer) {
      at::Tensor theirs = at::empty_like(mine);
      if (llvm::Error err = recv(theirs, peer, 0, "the start-up agreement"))
        return err;
      acc = at::minimum(acc, theirs);
    }
    for (int peer = 1; peer < worldSize_; ++peer)
      if (llvm::Error err = send(acc, peer, 0, "the start-up agreement"))
        return err;
    mine = acc;
  } else {
    if (llvm::Error err = send(mine, 0, 0, "the start-up agreement"))
      return err;
    if (llvm::Error err = recv(mine, 0, 0, "the start-up agreement"))
      return err;
  }
  if (llvm::Error err = flushSends())
    return err;
  at::Tensor host = mine.cpu();
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = host[i].item<int64_t>();
  return llvm::Error::success();
}

llvm::Error Transport::broadcastBytes(std::string &bytes, int root) {
  if (worldSize_ == 1)
    return llvm::Error::success();
  auto longs = at::TensorOptions().dtype(at::kLong);
  auto chars = at::TensorOptions().dtype(at::kByte);
  const char *what = "the microbatch signatures";
  if (rank_ == root) {
    at::Tensor size =
        at::tensor({static_cast<int64_t>(bytes.size())}, longs).to(device());
    at::Tensor data = at::empty({static_cast<int64_t>(bytes.size())}, chars);
    std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
    data = data.to(device());
    for (int peer = 0; peer < worldSize_; ++peer) {
      if (peer == root)
        continue;
      if (llvm::Error err = send(size, peer, 0, what))
        return err;
      if (!bytes.empty())
        if (llvm::Error err = send(data, peer, 0, what))
          return err;
    }
    return flushSends();
  }
  at::Tensor size = at::empty({1}, longs.device(device()));
  if (llvm::Error err = recv(size, root, 0, what))
    return err;
  int64_t n = size.cpu().item<int64_t>();
  bytes.assign(static_cast<size_t>(n), '\0');
  if (n > 0) {
    at::Tensor data = at::empty({n}, chars.device(device()));
    if (llvm::Error err = recv(data, root, 0, what))
      return err;
    data = data.cpu();
    std::memcpy(bytes.data(), data.data_ptr(), bytes.size());
  }
  return llvm::Error::success();
}

llvm::Error Transport::barrier() {
  std::vector<int64_t> token{0};
  return agreeMin(token);
}

namespace {

/// Wraps a failed wait on `peer` as "lost rank P (...)".
llvm::Error lostRank(int peer, std::chrono::milliseconds timeout,
                     const llvm::Twine &what, const std::string &cause) {
  bool timedOut = cause.find("Timed out") != std::string::npos ||
                  cause.find("timed out") != std::string::npos;
  if (timedOut) {
    std::string seconds =
        timeout.count() % 1000 == 0
            ? std::to_string(timeout.count() / 1000)
            : llvm::formatv("{0:f1}", timeout.count() / 1000.0).str();
    return makeError(
        llvm::formatv("lost rank {0} (no answer within {1} s while "
                      "waiting for {2})",
                      peer, seconds, what.str())
            .str());
  }
  // Gloo prefixes its messages with "[file.cc:line] ".
  llvm::StringRef text(cause);
  if (text.startswith("[") && text.contains("] "))
    text = text.split("] ").second;
  return makeError(llvm::formatv("lost rank {0} ({1}, while waiting for {2})",
                                 peer, text, what.str())
                       .str());
}

/// Runs `fn` and turns an exception into "lost rank P (...)".
template <typename Fn>
llvm::Error guardPeer(int peer, std::chrono::milliseconds timeout,
                      const llvm::Twine &what, Fn &&fn) {
  try {
    fn();
    return llvm::Error::success();
  } catch (const c10::Error &e) {
    return lostRank(peer, timeout, what, firstLine(e.what_without_backtrace()));
  } catch (const std::exception &e) {
    return lostRank(peer, timeout, what, firstLine(e.what()));
  }
}

/// A transport over a c10d process group (Gloo or NCCL): both offer tagged
/// send/recv returning Work handles.
template <typename Group> class GroupTransport : public Transport {
public:
  GroupTransport(int rank, int worldSize, std::chrono::milliseconds timeout,
                 c10::intrusive_ptr<c10d::Store> store,
                 c10::intrusive_ptr<Group> group, c10::Device device)
      : Transport(rank, worldSize, timeout), store_(std::move(store)),
        group_(std::move(group)), device_(device) {}

  ~GroupTransport() override {
    // Abandoned sends (after an error) must not block the exit.
    for (Pending &p : pending_)
      try {
        p.work->abort();
      } catch (...) {
      }
  }

  c10::Device device() const override { return device_; }

  llvm::Error send(const at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what) override {
    if (llvm::Error err = reapSends())
      return err;
    auto tagOr = nextTag(true, peer, channel);
    if (!tagOr)
      return tagOr.takeError();
    int tag = *tagOr;
    ++messagesSent_;
    std::vector<at::Tensor> tensors{tensor};
    return guardPeer(peer, timeout_, what, [&] {
      pending_.push_back({group_->send(tensors, peer, tag), peer, what.str()});
    });
  }

  llvm::Error recv(at::Tensor &tensor, int peer, int channel,
                   const llvm::Twine &what) override {
    auto tagOr = nextTag(false, peer, channel);
    if (!tagOr)
      return tagOr.takeError();
    int tag = *tagOr;
    std::vector<at::Tensor> tensors{tensor};
    bool done = false;
    if (llvm::Error err = guardPeer(peer, timeout_, what, [&] {
          compat::WorkPtr work = group_->recv(tensors, peer, tag);
          done = compat::waitWork(work, timeout_);
        }))
      return err;
    if (!done)
      return lostRank(peer, timeout_, what, "timed out");
    return llvm::Error::success();
  }

  llvm::Error flushSends() override {
    for (Pending &p : pending_) {
      bool done = false;
      if (llvm::Error err = guardPeer(p.peer, timeout_, p.what, [&] {
            done = compat::waitWork(p.work, timeout_);
          }))
        return err;
      if (!done)
        return lostRank(p.peer, timeout_, p.what, "timed out");
    }
    pending_.clear();
    return llvm::Error::success();
  }

private:
  struct Pending {
    compat::WorkPtr work;
    int peer;
    std::string what;
  };

  /// Drops completed sends so the list stays short; reports failed ones.
  llvm::Error reapSends() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending &p = pending_[i];
      if (p.work->isCompleted()) {
        if (llvm::Error err = guardPeer(p.peer, timeout_, p.what, [&] {
              compat::waitWork(p.work, timeout_);
            }))
          return err;
        continue;
      }
      if (kept != i)
        pending_[kept] = std::move(p);
      ++kept;
    }
    pending_.resize(kept);
    return llvm::Error::success();
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Group> group_;
  c10::Device device_;
  std::vector<Pending> pending_;
};

/// The local address this machine uses to reach `host` (found by
/// "connecting" a UDP socket, which sends nothing): Gloo must listen on an
/// address the other ranks can reach, and the host name may resolve to one
/// they cannot (e.g. in a network namespace).
llvm::Expected<std::string> localAddressTowards(const std::string &host,
                                                int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *found = nullptr;
  int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || !found)
    return makeError(llvm::formatv("cannot resolve MASTER_ADDR '{0}': {1}",
                                   host, gai_strerror(rc))
                         .str());
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string result;
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)))
      result = text;
  }
  if (fd >= 0)
    close(fd);
  freeaddrinfo(found);
  if (result.empty())
    return makeError(
        llvm::formatv("no local address reaches MASTER_ADDR '{0}'", host)
            .str());
  return result;
}

} // namespace

llvm::Expected<std::unique_ptr<Transport>>
connectTransport(const LaunchEnv &env, DeviceKind device,
                 std::chrono::milliseconds timeout) {
  std::string where = llvm::formatv("rendezvous at {0}:{1} failed",
                                    env.masterAddr, env.masterPort);
#ifndef PPC_HAVE_NCCL
  if (device == DeviceKind::CUDA)
    return makeError(
        "--device cuda needs a ppc built against a LibTorch with CUDA "
        "(this one has none); use --device cpu");
#endif
  auto store = torchCall(where, [&] {
    return compat::makeTCPStore(env.masterAddr,
                                static_cast<uint16_t>(env.masterPort),
                                env.rank == 0, env.worldSize, timeout);
  });
  if (!store)
    return store.takeError();

  if (device == DeviceKind::CPU) {
    std::shared_ptr<::gloo::transport::Device> glooDevice;
    if (const char *ifname = std::getenv("GLOO_SOCKET_IFNAME");
        ifname && *ifname) {
      std::string first = llvm::StringRef(ifname).split(',').first.str();
      auto dev = torchCall(
          where, [&] { return compat::makeGlooDeviceForInterface(first); });
      if (!dev)
        return dev.takeError();
      glooDevice = *dev;
    } else {
      auto address = localAddressTowards(env.masterAddr, env.masterPort);
      if (!address)
        return withContext(address.takeError(), where);
      auto dev = torchCall(
          where, [&] { return compat::makeGlooDeviceForHost(*address); });
      if (!dev)
        return dev.takeError();
      glooDevice = *dev;
    }
    auto group = torchCall(where, [&] {
      return compat::makeGlooGroup(*store, env.rank, env.worldSize, timeout,
                                   glooDevice);
    });
    if (!group)
      return group.takeError();
    return std::make_unique<GroupTransport<compat::GlooGroup>>(
        env.rank, env.worldSize, timeout, *store, *group,
        c10::Device(c10::kCPU));
  }
#ifdef PPC_HAVE_NCCL
  auto group = torchCall(where, [&] {
    return compat::makeNcclGroup(*store, env.rank, env.worldSize, timeout);
  });
  if (!group)
    return group.takeError();
  return std::make_unique<GroupTransport<compat::NcclGroup>>(
      env.rank, env.worldSize, timeout, *store, *group,
      c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.localRank)));
#else
  return makeError("unreachable: no CUDA transport");
#endif
}

} // namespace ppc
