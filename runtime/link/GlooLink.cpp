//===- runtime/link/GlooLink.cpp - Tensors over a Gloo process group ------===//
//
// This file implements the Gloo link: CPU tensors, tagged send/recv on the
// job's Gloo group (connected by the rendezvous, runtime/link/Rendezvous.h). It
// is the control link of every multi-process run, and carries every message of
// a CPU run. Receives posted ahead are started at once and finished by their
// recv(), so a message can arrive while this rank computes.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/C10dWork.h"
#include "runtime/link/Link.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"

#include <map>

namespace ppc {

namespace {

class GlooLink : public Link {
public:
  GlooLink(std::chrono::milliseconds timeout,
           c10::intrusive_ptr<compat::GlooGroup> group)
      : timeout_(timeout), group_(std::move(group)),
        sends_(timeout, WorkWait::Blocking) {}

  ~GlooLink() override {
    // Abandoned receives (after an error) must not block the exit.
    for (auto &entry : posted_)
      PendingSends::abortWork(entry.second);
  }

  bool carries(const at::Tensor &, int) const override { return true; }

  llvm::Error send(const at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    std::vector<at::Tensor> tensors{tensor};
    return sends_.start(m.peer, what,
                        [&] { return group_->send(tensors, m.peer, m.tag); });
  }

  llvm::Error postRecv(const at::Tensor &tensor, const Message &m,
                       const llvm::Twine &what) override {
    std::vector<at::Tensor> tensors{tensor};
    compat::WorkPtr work;
    if (llvm::Error err = guardPeer(m.peer, timeout_, what, [&] {
          work = group_->recv(tensors, m.peer, m.tag);
        }))
      return err;
    posted_.emplace(std::make_pair(m.peer, m.tag), std::move(work));
    return llvm::Error::success();
  }

  llvm::Error recv(at::Tensor &tensor, const Message &m,
                   const llvm::Twine &what) override {
    auto posted = posted_.find({m.peer, m.tag});
    if (posted != posted_.end()) {
      compat::WorkPtr work = std::move(posted->second);
      posted_.erase(posted);
      return finishRecv(m.peer, timeout_, what, WorkWait::Blocking,
                        [&] { return work; });
    }
    std::vector<at::Tensor> tensors{tensor};
    return finishRecv(m.peer, timeout_, what, WorkWait::Blocking,
                      [&] { return group_->recv(tensors, m.peer, m.tag); });
  }

  llvm::Error
  flushSends(std::chrono::steady_clock::time_point deadline) override {
    return sends_.flush(deadline);
  }

private:
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<compat::GlooGroup> group_;
  PendingSends sends_;
  /// Receives posted ahead of their recv(), by (peer, tag).
  std::map<std::pair<int, int>, compat::WorkPtr> posted_;
};

} // namespace

llvm::Expected<std::unique_ptr<Link>> makeGlooLink(const LinkSetup &setup) {
  if (!setup.glooGroup)
    return nullptr;
  return std::make_unique<GlooLink>(setup.timeout, setup.glooGroup);
}

} // namespace ppc
