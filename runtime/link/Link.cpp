//===- runtime/link/Link.cpp - What every link shares ---------------------===//
//
// This file implements LostRankError and the helpers that make it (every
// "lost rank R (...)" of the runtime is built by lostRank()), and the link
// policies' names, from Links.def.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Link.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <iterator>
#include <string_view>

namespace ppc {

namespace {
/// Whether `name` is a link of Links.def.
constexpr bool isLinkName(std::string_view name) {
#define PPC_LINK(NAME, ROLE, FACTORY)                                          \
  if (name == #NAME)                                                           \
    return true;
#include "runtime/link/Links.def"
  return false;
}

#define PPC_LINK_POLICY(ENUMERATOR, NAME, HELP)                                \
  static_assert(isLinkName(#NAME), "link policy " #NAME " names no link");
#include "runtime/link/Links.def"

struct PolicyInfo {
  LinkPolicy policy;
  const char *name;
  const char *help;
};

constexpr PolicyInfo kPolicies[] = {
    {LinkPolicy::Auto, "auto",
     "shared memory between ranks on one host, Gloo across hosts"},
#define PPC_LINK_POLICY(ENUMERATOR, NAME, HELP)                                \
  {LinkPolicy::ENUMERATOR, #NAME, HELP},
#include "runtime/link/Links.def"
};

/// "a, b or c" of the policies, each as `item` writes it.
template <typename Fn> std::string joinPolicies(Fn item) {
  std::string out;
  size_t count = std::size(kPolicies);
  for (size_t i = 0; i < count; ++i) {
    out += i == 0 ? "" : i + 1 == count ? " or " : ", ";
    out += item(kPolicies[i]);
  }
  return out;
}
} // namespace

std::optional<LinkPolicy> linkPolicyNamed(llvm::StringRef name) {
  for (const PolicyInfo &info : kPolicies)
    if (name == info.name)
      return info.policy;
  return std::nullopt;
}

llvm::StringRef linkPolicyName(LinkPolicy policy) {
  for (const PolicyInfo &info : kPolicies)
    if (info.policy == policy)
      return info.name;
  return "auto";
}

std::vector<std::string> linkPolicyNames() {
  std::vector<std::string> names;
  for (const PolicyInfo &info : kPolicies)
    names.push_back(info.name);
  return names;
}

std::string linkPolicyList() {
  return joinPolicies([](const PolicyInfo &info) { return info.name; });
}

std::string linkPolicyHelp() {
  return joinPolicies([](const PolicyInfo &info) {
    return std::string(info.name) + " (" + info.help + ")";
  });
}

char LostRankError::ID = 0;

/// "lost rank R (DETAIL)".
static std::string lostRankText(int rank, const llvm::Twine &detail) {
  return llvm::formatv("lost rank {0} ({1})", rank, detail.str()).str();
}

llvm::Error lostRank(int rank, const llvm::Twine &detail) {
  return llvm::make_error<LostRankError>(rank, lostRankText(rank, detail));
}

std::string secondsText(std::chrono::milliseconds timeout) {
  return timeout.count() % 1000 == 0
             ? std::to_string(timeout.count() / 1000)
             : llvm::formatv("{0:f1}", timeout.count() / 1000.0).str();
}

llvm::Error lostRankTimedOut(int peer, std::chrono::milliseconds timeout,
                             const llvm::Twine &what) {
  return llvm::make_error<LostRankError>(
      peer,
      lostRankText(peer, llvm::formatv("no answer within {0} s while waiting "
                                       "for {1}",
                                       secondsText(timeout), what.str())),
      /*timedOut=*/true);
}

llvm::Error lostRankFrom(int peer, std::chrono::milliseconds timeout,
                         const llvm::Twine &what, const std::exception &e) {
  const auto *c10 = dynamic_cast<const c10::Error *>(&e);
  std::string cause = firstLine(c10 ? c10->what_without_backtrace() : e.what());
  // Gloo's and c10d's timeouts are plain c10::Error / std::runtime_error in
  // every LibTorch ppc supports (no exception type of their own), so their
  // text is the only sign of one.
  if (cause.find("Timed out") != std::string::npos ||
      cause.find("timed out") != std::string::npos)
    return lostRankTimedOut(peer, timeout, what);
  // Gloo prefixes its messages with "[file.cc:line] ".
  llvm::StringRef text(cause);
  if (text.startswith("[") && text.contains("] "))
    text = text.split("] ").second;
  return lostRank(
      peer, llvm::formatv("{0}, while waiting for {1}", text, what.str()));
}

} // namespace ppc
