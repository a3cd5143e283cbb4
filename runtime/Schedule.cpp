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
#include <tuple>

namespace ppc {

llvm::StringRef scheduleName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  }
  llvm_unreachable("unknown schedule kind");
}

std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<ScheduleKind>>(name)
      .Case("gpipe", ScheduleKind::GPipe)
      .Case("1f1b", ScheduleKind::OneFOneB)
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
  case ActionKind::SendB:
    return llvm::formatv("SEND_B {0} mb={1} to={2}", edgeText(), microbatch,
                         peerRank);
  case ActionKind::RecvB:
    return llvm::formatv("RECV_B {0} mb={1} from={2}", edgeText(), microbatch,
                         peerRank);
  }
  return "?";
}

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

  for (int r = 0; r < placement.worldSize; ++r) {
    // Items: (stage, microbatch); stage n is the collector.
    std::vector<int> stages = placement.stagesOf(r);
    if (r == placement.outputRank())
      stages.push_back(n);
    std::vector<std::tuple<int, int, int, int>> items; // key1, key2, stage, mb
    for (int s : stages)
      for (int m = 0; m < microbatches; ++m) {
        if (kind == ScheduleKind::GPipe)
          items.emplace_back(s, m, s, m);
        else
          items.emplace_back(s + m, -s, s, m);
      }
    std::sort(items.begin(), items.end());

    std::vector<Action> &actions = schedule.ranks[r];
    for (const auto &[k1, k2, s, m] : items) {
      for (size_t e = 0; e < schedule.edges.size(); ++e) {
        const Edge &edge = schedule.edges[e];
        int from = placement.rankOf(edge.producer);
        if (edge.consumer == s && from != r)
          actions.push_back(
              {ActionKind::RecvF, s, m, static_cast<int>(e), from});
      }
      actions.push_back(
          {s == n ? ActionKind::Output : ActionKind::Forward, s, m});
      if (s == n)
        continue;
      for (size_t e = 0; e < schedule.edges.size(); ++e) {
        const Edge &edge = schedule.edges[e];
        int to = placement.rankOf(edge.consumer);
        if (edge.producer == s && to != r)
          actions.push_back({ActionKind::SendF, s, m, static_cast<int>(e), to});
      }
    }
  }
  return schedule;
}

llvm::Error simulateSchedule(const Manifest &manifest,
                             const Schedule &schedule) {
  const Placement &placement = schedule.placement;
  int n = placement.numStages;
  int world = placement.worldSize;
  // Per edge: microbatches sent and not yet received, in order.
  std::vector<std::deque<int>> channels(schedule.edges.size());
  // Per rank: (stage, mb) run, and (edge, mb) received.
  std::vector<std::set<std::pair<int, int>>> ran(world), received(world);
  std::vector<size_t> pc(world, 0);

  auto inputsReady = [&](int r, int stage, int m) -> llvm::Error {
    auto ready = [&](int producer, int consumer) {
      if (placement.rankOf(producer) == r)
        return ran[r].count({producer, m}) > 0;
      for (size_t e = 0; e < schedule.edges.size(); ++e)
        if (schedule.edges[e].producer == producer &&
            schedule.edges[e].consumer == consumer)
          return received[r].count({static_cast<int>(e), m}) > 0;
      return false;
    };
    std::vector<int> producers;
    if (stage == n) {
      for (const ValueRef &ref : manifest.modelOutputs)
        producers.push_back(ref.stage);
    } else {
      for (const StageInput &in : manifest.stages[stage].inputs)
        if (!in.source.isModelInput())
          producers.push_back(in.source.stage);
    }
    for (int p : producers)
      if (!ready(p, stage))
        return makeError(
            llvm::formatv(
                "schedule runs {0} on rank {1} before its input "
                "from stage {2}",
                stage == n
                    ? llvm::formatv("OUT mb={0}", m).str()
                    : llvm::formatv("F stage={0} mb={1}", stage, m).str(),
                r, p)
                .str());
    return llvm::Error::success();
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < world; ++r) {
      const std::vector<Action> &actions = schedule.ranks[r];
      while (pc[r] < actions.size()) {
        const Action &a = actions[pc[r]];
        if (a.kind == ActionKind::RecvF) {
          std::deque<int> &ch = channels[a.edge];
          if (ch.empty())
            break;
          if (ch.front() != a.microbatch)
            return makeError(
                llvm::formatv("schedule: messages on edge {0}->{1} arrive "
                              "as mb={2} but rank {3} expects mb={4}",
                              schedule.edges[a.edge].producer,
                              schedule.edges[a.edge].consumer, ch.front(), r,
                              a.microbatch)
                    .str());
          ch.pop_front();
          received[r].insert({a.edge, a.microbatch});
        } else if (a.kind == ActionKind::SendF) {
          if (!ran[r].count({a.stage, a.microbatch}))
            return makeError(
                llvm::formatv("schedule sends {0} on rank {1} before it "
                              "ran the stage",
                              a.str(schedule.edges), r)
                    .str());
          channels[a.edge].push_back(a.microbatch);
        } else if (a.kind == ActionKind::Forward ||
                   a.kind == ActionKind::Output) {
          if (llvm::Error err = inputsReady(r, a.stage, a.microbatch))
            return err;
          ran[r].insert({a.stage, a.microbatch});
        }
        ++pc[r];
        progress = true;
      }
    }
  }

  std::string stuck;
  for (int r = 0; r < world; ++r)
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
                        schedule.edges[e].producer, schedule.edges[e].consumer,
                        channels[e].front())
              .str());
  // Every stage and microbatch must run exactly where it is placed.
  for (int s = 0; s <= n; ++s)
    for (int m = 0; m < schedule.microbatches; ++m)
      if (!ran[placement.rankOf(s)].count({s, m}))
        return makeError(llvm::formatv("schedule never runs {0} mb={1}",
                                       s == n ? std::string("OUT")
                                              : "F stage=" + std::to_string(s),
                                       m)
                             .str());
  return llvm::Error::success();
}

void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os) {
  const std::vector<Action> &actions = schedule.ranks[rank];
  for (size_t i = 0; i < actions.size(); ++i)
    os << "schedule: rank=" << rank << " " << i << " "
       << actions[i].str(schedule.edges) << "\n";
}

} // namespace ppc
