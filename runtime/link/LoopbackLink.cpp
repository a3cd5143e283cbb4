//===- runtime/link/LoopbackLink.cpp - Ranks as threads of one process ----===//
//
// This file implements the loopback hub and the link over it (the control
// link when a LinkSetup names a hub).
//
//===----------------------------------------------------------------------===//
#include "runtime/link/LoopbackLink.h"

#include "lib/Error.h"
#include "runtime/platform/Duration.h"

#include "llvm/Support/FormatVariadic.h"

namespace ppc {

LoopbackHub::LoopbackHub(int worldSize)
    : closed_(worldSize, false), sent_(worldSize, 0) {}

void LoopbackHub::close(int rank) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_.at(rank) = true;
  }
  arrived_.notify_all();
}

int64_t LoopbackHub::messagesFrom(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sent_.at(rank);
}

llvm::Error LoopbackHub::deliver(int from, const Message &m,
                                 const at::Tensor &tensor,
                                 const llvm::Twine &what) {
  at::Tensor copy = tensor.detach().clone(at::MemoryFormat::Contiguous);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_.at(m.peer))
      return lostRank(m.peer, "connection closed, while sending " + what);
    ++sent_.at(from);
    mail_.emplace(std::make_tuple(from, m.peer, m.tag), std::move(copy));
  }
  arrived_.notify_all();
  return llvm::Error::success();
}

llvm::Error LoopbackHub::take(int to, const Message &m, at::Tensor &tensor,
                              std::chrono::milliseconds timeout,
                              const llvm::Twine &what) {
  auto key = std::make_tuple(m.peer, to, m.tag);
  at::Tensor got;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    bool ready = arrived_.wait_until(lock, deadlineAfter(timeout), [&] {
      return mail_.count(key) != 0 || closed_.at(m.peer);
    });
    auto it = mail_.find(key);
    if (it == mail_.end()) {
      if (!ready)
        return lostRankTimedOut(m.peer, timeout, what);
      return lostRank(m.peer, "connection closed, while waiting for " + what);
    }
    got = std::move(it->second);
    mail_.erase(it);
  }
  if (got.scalar_type() != tensor.scalar_type() ||
      got.numel() != tensor.numel())
    return makeError(llvm::formatv("rank {0} sent {1} elements of {2} for "
                                   "{3}; expected {4} of {5}",
                                   m.peer, got.numel(),
                                   c10::toString(got.scalar_type()), what.str(),
                                   tensor.numel(),
                                   c10::toString(tensor.scalar_type()))
                         .str());
  return torchCall("cannot receive " + what,
                   [&] { tensor.view(got.sizes()).copy_(got); });
}

namespace {

class LoopbackLink : public Link {
public:
  LoopbackLink(std::shared_ptr<LoopbackHub> hub, int rank,
               std::chrono::milliseconds timeout)
      : hub_(std::move(hub)), rank_(rank), timeout_(timeout) {}

  /// A rank's transport going away is its connections closing.
  ~LoopbackLink() override { hub_->close(rank_); }

  bool carries(const at::Tensor &, int) const override { return true; }

  llvm::Error send(const at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    return hub_->deliver(rank_, m, tensor, what);
  }

  llvm::Error recv(at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    return hub_->take(rank_, m, tensor, timeout_, what);
  }

  /// Sends were copied into the hub when they started.
  llvm::Error flushSends(std::chrono::steady_clock::time_point) override {
    return llvm::Error::success();
  }

private:
  std::shared_ptr<LoopbackHub> hub_;
  int rank_;
  std::chrono::milliseconds timeout_;
};

} // namespace

llvm::Expected<std::unique_ptr<Link>> makeLoopbackLink(const LinkSetup &setup) {
  if (!setup.loopback)
    return nullptr;
  return std::make_unique<LoopbackLink>(setup.loopback, setup.rank,
                                        setup.timeout);
}

} // namespace ppc
