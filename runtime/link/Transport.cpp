//===- runtime/link/Transport.cpp - Point-to-point messages between ranks -===//
//
// This file implements the transport: it finds its links through Links.def,
// routes each message to one of them, and owns what is the same on every
// link (tags, posted receives, message counts).
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Transport.h"

#include "lib/Error.h"
#include "runtime/link/Link.h"
#include "runtime/platform/Duration.h"

#include "llvm/Support/FormatVariadic.h"

#include <future>
#include <system_error>
#include <thread>

namespace ppc {

namespace {
enum class LinkRole { Control, Payload };

/// A link kind of Links.def.
struct LinkKind {
  const char *name;
  LinkRole role;
  llvm::Expected<std::unique_ptr<Link>> (*make)(const LinkSetup &);
};

constexpr LinkKind kLinkKinds[] = {
#define PPC_LINK(NAME, ROLE, FACTORY) {#NAME, LinkRole::ROLE, &FACTORY},
#include "runtime/link/Links.def"
};
} // namespace

Transport::Transport(int rank, int worldSize, std::chrono::milliseconds timeout)
    : rank_(rank), worldSize_(worldSize), timeout_(timeout) {}

namespace {
/// Drops `held` on a thread of its own, waiting at most `bound` for it to
/// finish; past that the thread is left to finish with the process.
void dropWithin(std::shared_ptr<const void> held,
                std::chrono::milliseconds bound) {
  if (!held)
    return;
  auto gone = std::make_shared<std::promise<void>>();
  std::future<void> done = gone->get_future();
  try {
    std::thread([held = std::move(held), gone]() mutable {
      held.reset();
      gone->set_value();
    }).detach();
  } catch (const std::system_error &) {
    return; // no thread: `held` went with the lambda, here
  }
  done.wait_for(bound);
}
} // namespace

Transport::~Transport() {
  if (linkFailed_) {
    for (std::unique_ptr<Link> &link : payload_)
      link->abandon();
    if (control_)
      control_->abandon();
  }
  payload_.clear();
  control_.reset();
  dropWithin(std::move(store_), std::min(timeout_, kStoreDropBound));
}

llvm::Expected<std::unique_ptr<Transport>>
Transport::create(const LinkSetup &setup) {
  std::unique_ptr<Transport> t(
      new Transport(setup.rank, setup.worldSize, setup.timeout));
  if (static_cast<int>(setup.globalRanks.size()) == setup.worldSize)
    t->globalRanks_ = setup.globalRanks;
  if (setup.store)
    t->store_ =
        std::make_shared<const c10::intrusive_ptr<c10d::Store>>(setup.store);
  for (const LinkKind &kind : kLinkKinds) {
    if (kind.role == LinkRole::Control && t->control_)
      continue;
    auto link = kind.make(setup);
    if (!link)
      return t->named(link.takeError());
    if (!*link)
      continue;
    if (kind.role == LinkRole::Control) {
      t->control_ = std::move(*link);
      t->controlName_ = kind.name;
    } else {
      t->payload_.push_back(std::move(*link));
      t->payloadNames_.push_back(kind.name);
      t->payloadUsed_.push_back(false);
    }
  }
  if (!t->control_)
    return makeError("internal error: no link connects rank " +
                     std::to_string(setup.rank) + " to its peers");
  return t;
}

int Transport::globalRank(int rank) const {
  return rank >= 0 && rank < static_cast<int>(globalRanks_.size())
             ? globalRanks_[rank]
             : rank;
}

llvm::Error Transport::named(llvm::Error err) {
  if (!err)
    return err;
  linkFailed_ = true;
  if (globalRanks_.empty())
    return err;
  return llvm::handleErrors(
      std::move(err), [&](const LostRankError &lost) -> llvm::Error {
        int global = globalRank(lost.rank());
        // lostRank() wrote "lost rank R (DETAIL)": keep the detail.
        std::string message = lost.describe();
        llvm::StringRef text(message);
        std::string prefix = "lost rank " + std::to_string(lost.rank()) + " ";
        if (!text.consume_front(prefix))
          return llvm::make_error<LostRankError>(global, text.str(),
                                                 lost.timedOut());
        return llvm::make_error<LostRankError>(
            global, "lost rank " + std::to_string(global) + " " + text.str(),
            lost.timedOut());
      });
}

int Transport::payloadIndexFor(const at::Tensor &tensor, int peer) const {
  // Payload links first (a CUDA tensor: NCCL; a co-located peer: shared
  // memory), in Links.def order; the control link carries the rest.
  for (size_t i = 0; i < payload_.size(); ++i)
    if (payload_[i]->carries(tensor, peer))
      return static_cast<int>(i);
  return -1;
}

Link &Transport::linkFor(const at::Tensor &tensor, int peer) {
  int i = payloadIndexFor(tensor, peer);
  return i < 0 ? *control_ : *payload_[i];
}

Link &Transport::useLinkFor(const at::Tensor &tensor, int peer) {
  int i = payloadIndexFor(tensor, peer);
  if (i < 0) {
    controlUsed_ = true;
    return *control_;
  }
  payloadUsed_[i] = true;
  return *payload_[i];
}

llvm::StringRef Transport::linkName(const at::Tensor &tensor, int peer) const {
  int i = payloadIndexFor(tensor, peer);
  return i < 0 ? controlName_ : payloadNames_[i];
}

std::string Transport::linksUsed() const {
  std::string names;
  for (size_t i = 0; i < payload_.size(); ++i)
    if (payloadUsed_[i])
      names += (names.empty() ? "" : "+") + std::string(payloadNames_[i]);
  if (controlUsed_)
    names += (names.empty() ? "" : "+") + std::string(controlName_);
  return names;
}

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

llvm::Error Transport::send(const at::Tensor &tensor, int peer, int channel,
                            const llvm::Twine &what) {
  auto tag = nextTag(true, peer, channel);
  if (!tag)
    return tag.takeError();
  ++messagesSent_;
  return named(
      useLinkFor(tensor, peer).send(tensor, {peer, channel, *tag}, what));
}

llvm::Error Transport::postRecv(const at::Tensor &tensor, int peer, int channel,
                                const llvm::Twine &what) {
  auto tag = nextTag(false, peer, channel);
  if (!tag)
    return tag.takeError();
  if (llvm::Error err = named(
          linkFor(tensor, peer).postRecv(tensor, {peer, channel, *tag}, what)))
    return err;
  posted_[{peer, channel}].push_back({*tag, tensor});
  return llvm::Error::success();
}

llvm::Error Transport::recv(at::Tensor &tensor, int peer, int channel,
                            const llvm::Twine &what) {
  int tag = 0;
  auto posted = posted_.find({peer, channel});
  if (posted != posted_.end() && !posted->second.empty()) {
    Posted first = std::move(posted->second.front());
    posted->second.pop_front();
    if (!first.tensor.is_same(tensor))
      return makeError(
          llvm::formatv("internal error: receiving {0} into a buffer other "
                        "than the one posted for it",
                        what)
              .str());
    tag = first.tag;
  } else {
    auto next = nextTag(false, peer, channel);
    if (!next)
      return next.takeError();
    tag = *next;
  }
  return named(
      useLinkFor(tensor, peer).recv(tensor, {peer, channel, tag}, what));
}

llvm::Error Transport::flushSends() {
  auto deadline = deadlineAfter(timeout_);
  if (llvm::Error err = named(control_->flushSends(deadline)))
    return err;
  for (const std::unique_ptr<Link> &link : payload_)
    if (llvm::Error err = named(link->flushSends(deadline)))
      return err;
  return llvm::Error::success();
}

llvm::Error Transport::connectRoutes(const std::vector<Route> &routes) {
  if (llvm::Error err = named(control_->connect(routes)))
    return err;
  for (const std::unique_ptr<Link> &link : payload_)
    if (llvm::Error err = named(link->connect(routes)))
      return err;
  return llvm::Error::success();
}

} // namespace ppc
