//===- runtime/schedule/Decode.cpp - The decode schedule ------------------===//
//
// This file implements buildDecodeSchedule() (see Decode.h): the unit-time
// order of every F and OUT, the messages of the boundary edges
// (addCommunication), then the return of the picked tokens.
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Decode.h"

#include "lib/Error.h"
#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/Lowering.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace ppc {

namespace {

/// Start times in the unit-time model: time[k][m] for stage k (the
/// collector's is the time of its pick).
std::vector<std::vector<int64_t>> startTimes(const Schedule &schedule,
                                             const EdgeIndex &index) {
  const TokenReturn &tokens = *schedule.tokens;
  int n = schedule.placement.numStages(), total = schedule.microbatches;
  std::vector<std::vector<int64_t>> time(n + 1, std::vector<int64_t>(total, 0));
  for (int m = 0; m < total; ++m)
    for (int k = 0; k <= n; ++k) {
      int64_t t = m > 0 && k < n ? time[k][m - 1] + 1 : 0;
      for (int e : index.in[k])
        t = std::max(t, time[schedule.edges[e].producer][m] + 1);
      if (tokens.fed(m) && llvm::is_contained(tokens.readers, k))
        t = std::max(t, time[n][m - tokens.groups]);
      time[k][m] = t;
    }
  return time;
}

/// Every rank's F and OUT in start-time order; on a tie, a pick comes
/// before the forwards that may read it.
Orders computeOrders(const Schedule &schedule, const EdgeIndex &index) {
  auto time = startTimes(schedule, index);
  int n = schedule.placement.numStages();
  std::vector<std::vector<std::tuple<int64_t, int, int>>> keyed(
      schedule.placement.worldSize());
  for (int k = 0; k <= n; ++k)
    for (int m = 0; m < schedule.microbatches; ++m)
      keyed[schedule.placement.rankOf(k)].emplace_back(time[k][m],
                                                       k == n ? -1 : k, m);
  Orders orders(keyed.size());
  for (size_t r = 0; r < keyed.size(); ++r) {
    std::sort(keyed[r].begin(), keyed[r].end());
    for (auto [t, k, m] : keyed[r])
      orders[r].push_back(k < 0 ? Action{ActionKind::Output, n, m}
                                : Action{ActionKind::Forward, k, m});
  }
  return orders;
}

/// SEND_TOK after each returning OUT, to every other reader rank; RECV_TOK
/// before the first F of a reader stage of a fed microbatch on such a rank.
void addTokenReturn(Schedule &schedule) {
  const TokenReturn &tokens = *schedule.tokens;
  int n = schedule.placement.numStages();
  int collector = schedule.placement.rankOf(n);
  std::vector<int> readers = tokenReaderRanks(schedule, collector);
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    bool reads = llvm::is_contained(readers, static_cast<int>(r));
    if (static_cast<int>(r) != collector && !reads)
      continue;
    std::vector<Action> out;
    std::set<int> received;
    for (const Action &a : schedule.ranks[r]) {
      int m = a.microbatch;
      bool readsHere = a.kind == ActionKind::Forward &&
                       llvm::is_contained(tokens.readers, a.stage);
      if (reads && readsHere && tokens.fed(m) && received.insert(m).second)
        out.push_back({ActionKind::RecvTokens, a.stage, m - tokens.groups, -1,
                       collector});
      out.push_back(a);
      if (a.kind == ActionKind::Output && tokens.returns(m))
        for (int peer : readers)
          out.push_back({ActionKind::SendTokens, n, m, -1, peer});
    }
    schedule.ranks[r] = std::move(out);
  }
}

llvm::Error checkShape(const DecodeShape &shape) {
  auto below1 = [](int v) { return v < 1; };
  if (below1(shape.groups) || below1(shape.promptSteps) ||
      below1(shape.newTokens))
    return makeError(llvm::formatv("internal error: a decode of {0} groups, "
                                   "{1} prompt tokens and {2} new tokens",
                                   shape.groups, shape.promptSteps,
                                   shape.newTokens)
                         .str());
  int64_t steps = int64_t(shape.promptSteps) + shape.newTokens - 1;
  if (steps * shape.groups > kMaxMicrobatches)
    return makeError(llvm::formatv("{0} groups of {1} steps each make more "
                                   "than {2} microbatches",
                                   shape.groups, steps, kMaxMicrobatches)
                         .str());
  return llvm::Error::success();
}

} // namespace

std::vector<int> tokenReaderRanks(const Schedule &schedule, int except) {
  std::set<int> ranks;
  for (int k : schedule.tokens->readers)
    if (schedule.placement.rankOf(k) != except)
      ranks.insert(schedule.placement.rankOf(k));
  return {ranks.begin(), ranks.end()};
}

llvm::Expected<Schedule> buildDecodeSchedule(const Manifest &manifest,
                                             const Placement &placement,
                                             const DecodeShape &shape) {
  if (llvm::Error err = checkShape(shape))
    return err;
  auto edges = boundaryEdges(manifest);
  if (!edges)
    return edges.takeError();
  TokenReturn tokens;
  tokens.input = shape.tokenInput;
  tokens.groups = shape.groups;
  tokens.promptSteps = shape.promptSteps;
  tokens.steps = shape.promptSteps + shape.newTokens - 1;
  for (const StageInfo &s : manifest.stages)
    if (llvm::any_of(s.inputs, [&](const StageInput &in) {
          return in.source.modelInput == shape.tokenInput;
        }))
      tokens.readers.push_back(s.index);
  if (tokens.readers.empty())
    return makeError(
        llvm::formatv("no stage reads model input {0}", shape.tokenInput)
            .str());
  Schedule schedule;
  schedule.origin = "decode";
  schedule.microbatches = shape.groups * tokens.steps;
  schedule.placement = placement;
  schedule.edges = std::move(*edges);
  schedule.tokens = std::move(tokens);
  schedule.ranks.assign(placement.worldSize(), {});
  EdgeIndex index(schedule);
  addCommunication(schedule, index, computeOrders(schedule, index));
  addTokenReturn(schedule);
  return schedule;
}

} // namespace ppc
