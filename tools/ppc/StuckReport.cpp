//===- tools/ppc/StuckReport.cpp - The rank a stuck job waits on ----------===//
//
// See StuckReport.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/StuckReport.h"

#include "runtime/exec/StatusRecord.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <climits>
#include <set>

namespace ppc {

namespace {
bool intField(const llvm::json::Object &o, llvm::StringRef key, int64_t lo,
              int64_t hi, int &out) {
  auto v = o.getInteger(key);
  if (!v || *v < lo || *v > hi)
    return false;
  out = static_cast<int>(*v);
  return true;
}

/// Ends the chain from `start`: the rank reached, and the ranks walked.
int chainEnd(const std::map<int, RankReport> &reports, int start,
             std::vector<int> &walked) {
  int at = start;
  while (reports.count(at) &&
         std::find(walked.begin(), walked.end(), at) == walked.end()) {
    walked.push_back(at);
    at = reports.at(at).waitingFor;
  }
  return at;
}
} // namespace

std::optional<RankReport> parseRankReport(llvm::StringRef text, int rank,
                                          int worldSize) {
  if (text.size() > kMaxRankReportBytes)
    return std::nullopt;
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(text);
  if (!value) {
    llvm::consumeError(value.takeError());
    return std::nullopt;
  }
  const llvm::json::Object *o = value->getAsObject();
  if (!o)
    return std::nullopt;
  RankReport r;
  auto timedOut = o->getBoolean("timedOut");
  auto kind = o->getString("kind");
  // A rank waiting before a run of its schedule stands at no action.
  const bool beforeRun = kind && *kind == kBeforeRunKind;
  if (!intField(*o, "rank", rank, rank, r.rank) ||
      !intField(*o, "waitingFor", 0, worldSize - 1, r.waitingFor) ||
      r.waitingFor == rank ||
      !intField(*o, "actions", 0, beforeRun ? 0 : INT_MAX, r.actions) ||
      !intField(*o, "action", beforeRun ? 0 : 1,
                beforeRun ? 0 : int64_t(r.actions) + 1, r.action) ||
      !timedOut || !kind || kind->empty() || kind->size() > 16 ||
      kind->find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz") !=
          llvm::StringRef::npos)
    return std::nullopt;
  r.timedOut = *timedOut;
  r.kind = kind->str();
  if (r.kind != "flush" && !beforeRun &&
      (!intField(*o, "microbatch", -1, INT_MAX, r.microbatch) ||
       !intField(*o, "stage", -1, INT_MAX, r.stage)))
    return std::nullopt;
  return r;
}

std::string positionText(const RankReport &report) {
  if (report.kind == kBeforeRunKind)
    return kBeforeRunText;
  if (report.kind == "flush")
    return llvm::formatv("at the final flush of {0} actions", report.actions)
        .str();
  return llvm::formatv("at action {0} of {1} ({2} mb {3} stage {4})",
                       report.action, report.actions, report.kind,
                       report.microbatch, report.stage)
      .str();
}

StuckRank findStuckRank(const std::map<int, RankReport> &reports, int start) {
  StuckRank stuck;
  std::vector<int> walked;
  int end = chainEnd(reports, start, walked);
  if (reports.count(end)) {
    // A cycle: from `end` back to itself.
    auto from = std::find(walked.begin(), walked.end(), end);
    stuck.isCycle = true;
    stuck.cycle.assign(from, walked.end());
    std::rotate(stuck.cycle.begin(),
                std::min_element(stuck.cycle.begin(), stuck.cycle.end()),
                stuck.cycle.end());
    stuck.rank = stuck.cycle.front();
  } else {
    stuck.rank = end;
  }
  std::set<int> ends(stuck.cycle.begin(), stuck.cycle.end());
  ends.insert(stuck.rank);
  for (const auto &entry : reports) {
    std::vector<int> path;
    int e = chainEnd(reports, entry.first, path);
    bool reaches = stuck.isCycle
                       ? std::any_of(path.begin(), path.end(),
                                     [&](int r) { return ends.count(r); })
                       : e == stuck.rank;
    if (reaches && !(stuck.isCycle && ends.count(entry.first)))
      stuck.waiters.push_back(entry.first);
  }
  return stuck;
}

std::string rankList(const std::vector<int> &ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i)
      text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

} // namespace ppc
