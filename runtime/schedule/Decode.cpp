//===- runtime/schedule/Decode.cpp - The decode schedule ------------------===//
//
// This file implements buildDecodeSchedule() (see Decode.h): the groups'
// slots and microbatches, the unit-time order of every F and OUT, the messages
// of the boundary edges (addCommunication), then the return of the picked
// tokens.
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
      // Every stage, not only the readers: each hears the tokens, which
      // say whether the step runs at all (ended groups are skipped).
      if (tokens.fed(m) && k < n)
        t = std::max(t, time[n][tokens.previous(m)]);
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

/// SEND_TOK after each returning OUT, to every other rank; RECV_TOK before
/// the first F of a fed microbatch on each of those ranks.
void addTokenReturn(Schedule &schedule) {
  const TokenReturn &tokens = *schedule.tokens;
  int n = schedule.placement.numStages();
  int collector = schedule.placement.rankOf(n);
  std::vector<int> peers = tokenReturnRanks(schedule);
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    bool hears = static_cast<int>(r) != collector;
    std::vector<Action> out;
    std::set<int> received;
    for (const Action &a : schedule.ranks[r]) {
      int m = a.microbatch;
      if (hears && a.kind == ActionKind::Forward && tokens.fed(m) &&
          received.insert(m).second)
        out.push_back({ActionKind::RecvTokens, a.stage, tokens.previous(m), -1,
                       collector});
      out.push_back(a);
      if (a.kind == ActionKind::Output && tokens.returns(m))
        for (int peer : peers)
          out.push_back({ActionKind::SendTokens, n, m, -1, peer});
    }
    schedule.ranks[r] = std::move(out);
  }
}

llvm::Error checkShape(const DecodeShape &shape) {
  bool bad = shape.groups.empty() || shape.slots < 0;
  int64_t microbatches = 0;
  for (const DecodeGroup &g : shape.groups) {
    bad |= g.promptSteps < 1 || g.newTokens < 1;
    microbatches += int64_t(g.promptSteps) + g.newTokens - 1;
  }
  if (bad)
    return makeError(llvm::formatv("internal error: a decode of {0} groups "
                                   "on {1} slots, a group without prompt "
                                   "or new tokens",
                                   shape.groups.size(), shape.slots)
                         .str());
  if (microbatches > kMaxMicrobatches)
    return makeError(llvm::formatv("{0} groups of {1} steps in all make "
                                   "more than {2} microbatches",
                                   shape.groups.size(), microbatches,
                                   kMaxMicrobatches)
                         .str());
  return llvm::Error::success();
}

/// The groups, their slots and the microbatch numbering (see Decode.h).
void planGroups(const DecodeShape &shape, TokenReturn &tokens) {
  int count = static_cast<int>(shape.groups.size());
  int slots = shape.slots > 0 ? std::min(shape.slots, count) : count;
  tokens.slots = slots;
  std::vector<int64_t> load(slots, 0);
  std::vector<std::vector<int>> queue(slots);
  for (int j = 0; j < count; ++j) {
    const DecodeGroup &in = shape.groups[j];
    TokenReturn::Group g;
    g.promptSteps = in.promptSteps;
    g.steps = in.promptSteps + in.newTokens - 1;
    g.slot = static_cast<int>(std::min_element(load.begin(), load.end()) -
                              load.begin());
    load[g.slot] += g.steps;
    queue[g.slot].push_back(j);
    tokens.groups.push_back(std::move(g));
  }
  // Round by round, slot by slot: each slot's next step.
  std::vector<size_t> at(slots, 0);
  for (bool more = true; more;) {
    more = false;
    for (int k = 0; k < slots; ++k) {
      if (at[k] == queue[k].size())
        continue;
      int j = queue[k][at[k]];
      TokenReturn::Group &g = tokens.groups[j];
      int step = static_cast<int>(g.microbatches.size());
      g.microbatches.push_back(static_cast<int>(tokens.of.size()));
      tokens.of.emplace_back(j, step);
      if (step + 1 == g.steps)
        ++at[k];
      more = true;
    }
  }
}

} // namespace

DecodeShape DecodeShape::uniform(int groups, int promptSteps, int newTokens,
                                 int tokenInput) {
  DecodeShape shape;
  shape.groups.assign(std::max(groups, 0), {promptSteps, newTokens});
  shape.tokenInput = tokenInput;
  return shape;
}

std::vector<int> tokenReturnRanks(const Schedule &schedule) {
  int collector = schedule.placement.outputRank();
  std::vector<int> ranks;
  for (int r = 0; r < schedule.placement.worldSize(); ++r)
    if (r != collector)
      ranks.push_back(r);
  return ranks;
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
  planGroups(shape, tokens);
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
  schedule.microbatches = static_cast<int>(tokens.of.size());
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
