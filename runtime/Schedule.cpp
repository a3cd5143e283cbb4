//===- runtime/Schedule.cpp - Pipeline schedules as data ------------------===//
//
// This file implements the schedule names, placement, edge discovery, schedule
// generation, the deadlock simulator and schedule printing (see Schedule.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/Schedule.h"

#include "lib/Error.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace ppc {

llvm::StringRef scheduleName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved1F1B:
    return "interleaved-1f1b";
  case ScheduleKind::ZeroBubbleH1:
    return "zb-h1";
  }
  llvm_unreachable("unknown schedule kind");
}

std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<ScheduleKind>>(name)
      .Case("gpipe", ScheduleKind::GPipe)
      .Case("1f1b", ScheduleKind::OneFOneB)
      .Case("interleaved-1f1b", ScheduleKind::Interleaved1F1B)
      .Case("zb-h1", ScheduleKind::ZeroBubbleH1)
      .Default(std::nullopt);
}

llvm::Expected<Placement> Placement::create(int numStages, int worldSize) {
  if (worldSize < 1 || numStages < worldSize || numStages % worldSize != 0)
    return makeError(
        llvm::formatv("{0} stage{1} cannot be placed on WORLD_SIZE={2} "
                      "rank{3}: the stage count must equal WORLD_SIZE or "
                      "be a multiple of it",
                      numStages, numStages == 1 ? "" : "s", worldSize,
                      worldSize == 1 ? "" : "s")
            .str());
  return Placement{numStages, worldSize};
}

std::vector<int> Placement::stagesOf(int rank) const {
  std::vector<int> out;
  for (int s = rank; s < numStages; s += worldSize)
    out.push_back(s);
  return out;
}

std::string Placement::describe() const {
  std::string out =
      llvm::formatv("{0} stages on {1} ranks:", numStages, worldSize);
  for (int r = 0; r < worldSize; ++r) {
    out += llvm::formatv("{0} rank {1} [", r ? "," : "", r);
    std::vector<int> stages = stagesOf(r);
    for (size_t i = 0; i < stages.size(); ++i)
      out += (i ? "," : "") + std::to_string(stages[i]);
    out += "]";
  }
  return out;
}

llvm::Expected<std::vector<Edge>> boundaryEdges(const Manifest &manifest) {
  int n = static_cast<int>(manifest.stages.size());
  std::map<std::pair<int, int>, std::set<int>> edges;
  for (const StageInfo &s : manifest.stages)
    for (const StageInput &in : s.inputs)
      if (!in.source.isModelInput())
        edges[{in.source.stage, s.index}].insert(in.source.output);
  for (size_t i = 0; i < manifest.modelOutputs.size(); ++i) {
    const ValueRef &ref = manifest.modelOutputs[i];
    if (ref.isModelInput())
      return makeError(
          llvm::formatv("model output {0} is model input {1} itself; "
                        "ppc run does not pass inputs through",
                        i, ref.modelInput)
              .str());
    edges[{ref.stage, n}].insert(ref.output);
  }
  std::vector<Edge> out;
  for (auto &[key, outputs] : edges)
    out.push_back({key.first,
                   key.second,
                   {outputs.begin(), outputs.end()},
                   key.second == n});
  return out;
}

std::string Action::str(const std::vector<Edge> &edges) const {
  auto edgeText = [&] {
    const Edge &e = edges[edge];
    std::string consumer = e.collector ? "out" : std::to_string(e.consumer);
    return llvm::formatv("{0}->{1}", e.producer, consumer).str();
  };
  switch (kind) {
  case ActionKind::Forward:
    return llvm::formatv("F stage={0} mb={1}", stage, microbatch);
  case ActionKind::SendF:
    return llvm::formatv("SEND_F {0} mb={1} to={2}", edgeText(), microbatch,
                         peerRank);
  case ActionKind::RecvF:
    return llvm::formatv("RECV_F {0} mb={1} from={2}", edgeText(), microbatch,
                         peerRank);
  case ActionKind::Output:
    return llvm::formatv("OUT mb={0}", microbatch);
  case ActionKind::Backward:
    return llvm::formatv("B stage={0} mb={1}", stage, microbatch);
  case ActionKind::BackwardInput:
    return llvm::formatv("I stage={0} mb={1}", stage, microbatch);
  case ActionKind::BackwardWeight:
    return llvm::formatv("W stage={0} mb={1}", stage, microbatch);
  case ActionKind::SendB:
    return llvm::formatv("SEND_B {0} mb={1} to={2}", edgeText(), microbatch,
                         peerRank);
  case ActionKind::RecvB:
    return llvm::formatv("RECV_B {0} mb={1} from={2}", edgeText(), microbatch,
                         peerRank);
  }
  return "?";
}

namespace {
/// Per stage (0..N, N = the collector): the indices of the edges it reads
/// and of those it feeds, so that building and simulating a schedule never
/// scans every edge for every action.
struct EdgeIndex {
  std::vector<std::vector<int>> in, out;

  explicit EdgeIndex(const Schedule &schedule)
      : in(schedule.placement.numStages + 1),
        out(schedule.placement.numStages + 1) {
    for (size_t e = 0; e < schedule.edges.size(); ++e) {
      in[schedule.edges[e].consumer].push_back(static_cast<int>(e));
      out[schedule.edges[e].producer].push_back(static_cast<int>(e));
    }
  }
};

/// Rank `r`'s (stage, microbatch) items in the order of `kind` (see
/// Schedule.h); stage N is the collector.
std::vector<std::pair<int, int>> orderedItems(const Placement &placement,
                                              ScheduleKind kind,
                                              int microbatches, int r) {
  std::vector<int> stages = placement.stagesOf(r);
  if (r == placement.outputRank())
    stages.push_back(placement.numStages);
  std::vector<std::pair<int, int>> items;
  items.reserve(stages.size() * static_cast<size_t>(microbatches));
  for (int s : stages)
    for (int m = 0; m < microbatches; ++m)
      items.emplace_back(s, m);
  auto key = [kind](const std::pair<int, int> &item) {
    auto [s, m] = item;
    return kind == ScheduleKind::GPipe ? std::make_pair(s, m)
                                       : std::make_pair(s + m, -s);
  };
  std::sort(items.begin(), items.end(),
            [&](const auto &a, const auto &b) { return key(a) < key(b); });
  return items;
}
} // namespace

llvm::Expected<Schedule> buildSchedule(const Manifest &manifest,
                                       const Placement &placement,
                                       ScheduleKind kind, int microbatches) {
  if (microbatches < 1)
    return makeError("--microbatches must be at least 1");
  auto edges = boundaryEdges(manifest);
  if (!edges)
    return edges.takeError();
  Schedule schedule;
  schedule.kind = kind;
  schedule.microbatches = microbatches;
  schedule.placement = placement;
  schedule.edges = std::move(*edges);
  schedule.ranks.resize(placement.worldSize);
  int n = placement.numStages;
  EdgeIndex index(schedule);

  for (int r = 0; r < placement.worldSize; ++r) {
    std::vector<Action> &actions = schedule.ranks[r];
    for (auto [s, m] : orderedItems(placement, kind, microbatches, r)) {
      for (int e : index.in[s]) {
        int from = placement.rankOf(schedule.edges[e].producer);
        if (from != r)
          actions.push_back({ActionKind::RecvF, s, m, e, from});
      }
      actions.push_back(
          {s == n ? ActionKind::Output : ActionKind::Forward, s, m});
      if (s == n)
        continue;
      for (int e : index.out[s]) {
        int to = placement.rankOf(schedule.edges[e].consumer);
        if (to != r)
          actions.push_back({ActionKind::SendF, s, m, e, to});
      }
    }
  }
  return schedule;
}

int channelOf(const Schedule &schedule, const Action &action) {
  bool backward =
      action.kind == ActionKind::SendB || action.kind == ActionKind::RecvB;
  return 1 + action.edge +
         (backward ? static_cast<int>(schedule.edges.size()) : 0);
}

// TEMPORARY (replaced by the schedule generator): GPipe for training.
llvm::Expected<Schedule> buildTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               ScheduleKind kind,
                                               int microbatches) {
  auto all = boundaryEdges(manifest);
  if (!all)
    return all.takeError();
  Schedule schedule;
  schedule.kind = kind;
  schedule.training = true;
  schedule.microbatches = microbatches;
  schedule.placement = placement;
  for (const Edge &e : *all)
    if (!e.collector)
      schedule.edges.push_back(e);
  schedule.ranks.resize(placement.worldSize);
  int n = placement.numStages;
  for (int r = 0; r < placement.worldSize; ++r) {
    std::vector<Action> &actions = schedule.ranks[r];
    std::vector<int> stages = placement.stagesOf(r);
    for (int s : stages)
      for (int m = 0; m < microbatches; ++m) {
        for (size_t e = 0; e < schedule.edges.size(); ++e)
          if (schedule.edges[e].consumer == s &&
              placement.rankOf(schedule.edges[e].producer) != r)
            actions.push_back({ActionKind::RecvF, s, m, int(e),
                               placement.rankOf(schedule.edges[e].producer)});
        actions.push_back({ActionKind::Forward, s, m});
        for (size_t e = 0; e < schedule.edges.size(); ++e)
          if (schedule.edges[e].producer == s &&
              placement.rankOf(schedule.edges[e].consumer) != r)
            actions.push_back({ActionKind::SendF, s, m, int(e),
                               placement.rankOf(schedule.edges[e].consumer)});
      }
    for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
      int s = *it;
      for (int m = 0; m < microbatches; ++m) {
        for (size_t e = 0; e < schedule.edges.size(); ++e)
          if (schedule.edges[e].producer == s &&
              placement.rankOf(schedule.edges[e].consumer) != r)
            actions.push_back({ActionKind::RecvB, s, m, int(e),
                               placement.rankOf(schedule.edges[e].consumer)});
        if (kind == ScheduleKind::ZeroBubbleH1) {
          actions.push_back({ActionKind::BackwardInput, s, m});
        } else {
          actions.push_back({ActionKind::Backward, s, m});
        }
        for (size_t e = 0; e < schedule.edges.size(); ++e)
          if (schedule.edges[e].consumer == s &&
              placement.rankOf(schedule.edges[e].producer) != r)
            actions.push_back({ActionKind::SendB, s, m, int(e),
                               placement.rankOf(schedule.edges[e].producer)});
        if (kind == ScheduleKind::ZeroBubbleH1)
          actions.push_back({ActionKind::BackwardWeight, s, m});
      }
    }
  }
  (void)n;
  return schedule;
}

llvm::Expected<Schedule> trainingScheduleFromCSV(const Manifest &,
                                                 const Placement &,
                                                 llvm::StringRef, int,
                                                 llvm::StringRef name) {
  return makeError(name + ": not supported yet");
}

namespace {
/// The simulator of Schedule.h. Ranks that can move are kept in a work
/// list; a rank blocked on a receive is woken by the send it waits for, so
/// the simulation costs O(actions), not O(actions x ranks).
class Simulator {
public:
  explicit Simulator(const Schedule &schedule)
      : schedule(schedule), placement(schedule.placement), index(schedule),
        channels(schedule.edges.size()), ran(placement.numStages + 1),
        received(schedule.edges.size()), pc(placement.worldSize, 0),
        waitingOn(schedule.edges.size(), -1) {}

  llvm::Error run() {
    std::vector<int> runnable;
    for (int r = 0; r < placement.worldSize; ++r)
      runnable.push_back(r);
    while (!runnable.empty()) {
      int r = runnable.back();
      runnable.pop_back();
      if (llvm::Error err = advance(r, runnable))
        return err;
    }
    return checkFinished();
  }

private:
  /// Runs rank r's actions until it blocks on a receive or ends.
  llvm::Error advance(int r, std::vector<int> &runnable) {
    const std::vector<Action> &actions = schedule.ranks[r];
    for (; pc[r] < actions.size(); ++pc[r]) {
      const Action &a = actions[pc[r]];
      switch (a.kind) {
      case ActionKind::RecvF:
        if (channels[a.edge].empty()) {
          waitingOn[a.edge] = r;
          return llvm::Error::success();
        }
        if (llvm::Error err = receive(r, a))
          return err;
        break;
      case ActionKind::SendF:
        if (llvm::Error err = send(r, a, runnable))
          return err;
        break;
      case ActionKind::Forward:
      case ActionKind::Output:
        if (placement.rankOf(a.stage) != r)
          return makeError(llvm::formatv("schedule runs {0} on rank {1}, "
                                         "not on its rank {2}",
                                         a.str(schedule.edges), r,
                                         placement.rankOf(a.stage))
                               .str());
        if (llvm::Error err = inputsReady(r, a.stage, a.microbatch))
          return err;
        mark(ran[a.stage], a.microbatch);
        break;
      default:
        break;
      }
    }
    return llvm::Error::success();
  }

  llvm::Error receive(int r, const Action &a) {
    std::deque<int> &ch = channels[a.edge];
    if (ch.front() != a.microbatch)
      return makeError(
          llvm::formatv("schedule: messages on edge {0}->{1} arrive as "
                        "mb={2} but rank {3} expects mb={4}",
                        schedule.edges[a.edge].producer,
                        schedule.edges[a.edge].consumer, ch.front(), r,
                        a.microbatch)
              .str());
    ch.pop_front();
    mark(received[a.edge], a.microbatch);
    return llvm::Error::success();
  }

  llvm::Error send(int r, const Action &a, std::vector<int> &runnable) {
    if (placement.rankOf(a.stage) != r || !has(ran[a.stage], a.microbatch))
      return makeError(llvm::formatv("schedule sends {0} on rank {1} before "
                                     "it ran the stage",
                                     a.str(schedule.edges), r)
                           .str());
    channels[a.edge].push_back(a.microbatch);
    if (waitingOn[a.edge] >= 0) {
      runnable.push_back(waitingOn[a.edge]);
      waitingOn[a.edge] = -1;
    }
    return llvm::Error::success();
  }

  /// Whether every input of `stage` (or, for the collector, every model
  /// output) for microbatch m is on rank r: run there, or received.
  llvm::Error inputsReady(int r, int stage, int m) {
    for (int e : index.in[stage]) {
      int producer = schedule.edges[e].producer;
      bool ready = placement.rankOf(producer) == r ? has(ran[producer], m)
                                                   : has(received[e], m);
      if (!ready)
        return makeError(
            llvm::formatv(
                "schedule runs {0} on rank {1} before its input "
                "from stage {2}",
                stage == placement.numStages
                    ? llvm::formatv("OUT mb={0}", m).str()
                    : llvm::formatv("F stage={0} mb={1}", stage, m).str(),
                r, producer)
                .str());
    }
    return llvm::Error::success();
  }

  /// No rank is stuck, no message is left unreceived, and every stage ran
  /// every microbatch where it is placed.
  llvm::Error checkFinished() {
    std::string stuck;
    for (int r = 0; r < placement.worldSize; ++r)
      if (pc[r] < schedule.ranks[r].size())
        stuck +=
            llvm::formatv("{0}rank {1} waits at {2}", stuck.empty() ? "" : "; ",
                          r, schedule.ranks[r][pc[r]].str(schedule.edges));
    if (!stuck.empty())
      return makeError("schedule deadlocks: " + stuck);
    for (size_t e = 0; e < channels.size(); ++e)
      if (!channels[e].empty())
        return makeError(
            llvm::formatv("schedule: rank {0} never receives SEND_F {1}->{2} "
                          "mb={3}",
                          placement.rankOf(schedule.edges[e].consumer),
                          schedule.edges[e].producer,
                          schedule.edges[e].consumer, channels[e].front())
                .str());
    for (int s = 0; s <= placement.numStages; ++s)
      for (int m = 0; m < schedule.microbatches; ++m)
        if (!has(ran[s], m))
          return makeError(llvm::formatv("schedule never runs {0} mb={1}",
                                         s == placement.numStages
                                             ? std::string("OUT")
                                             : "F stage=" + std::to_string(s),
                                         m)
                               .str());
    return llvm::Error::success();
  }

  // Per stage (or edge), a bit per microbatch, allocated on first use.
  static bool has(const std::vector<bool> &bits, int m) {
    return static_cast<size_t>(m) < bits.size() && bits[m];
  }
  void mark(std::vector<bool> &bits, int m) {
    if (bits.empty())
      bits.resize(schedule.microbatches);
    bits[m] = true;
  }

  const Schedule &schedule;
  const Placement &placement;
  EdgeIndex index;
  /// Per edge: microbatches sent and not yet received, in order.
  std::vector<std::deque<int>> channels;
  /// Per stage: microbatches run (on the stage's own rank: advance()
  /// refuses any other).
  std::vector<std::vector<bool>> ran;
  /// Per edge: microbatches received (by the consumer's rank).
  std::vector<std::vector<bool>> received;
  std::vector<size_t> pc;
  /// Per edge: the rank blocked receiving from it, or -1.
  std::vector<int> waitingOn;
};
} // namespace

llvm::Error simulateSchedule(const Manifest &, const Schedule &schedule) {
  // The schedule's edges carry everything the manifest says about who
  // feeds whom.
  return Simulator(schedule).run();
}

void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os) {
  const std::vector<Action> &actions = schedule.ranks[rank];
  for (size_t i = 0; i < actions.size(); ++i)
    os << "schedule: rank=" << rank << " " << i << " "
       << actions[i].str(schedule.edges) << "\n";
}

} // namespace ppc
