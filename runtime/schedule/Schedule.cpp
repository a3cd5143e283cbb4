//===- runtime/schedule/Schedule.cpp - Pipeline schedules as data ---------===//
//
// This file implements the schedule and action tables (Schedules.def,
// Actions.def), edge discovery, the schedule generators and the one pass
// that adds their communication, the deadlock simulator, the CSV reader
// (schedule and placement) and writer, and schedule printing (see
// Schedule.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Schedule.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

namespace ppc {

//===----------------------------------------------------------------------===//
// The tables
//===----------------------------------------------------------------------===//

namespace {
struct ScheduleInfo {
  llvm::StringRef name;
  bool inference;
  llvm::StringRef placement;
  llvm::StringRef help;
};

constexpr ScheduleInfo kSchedules[] = {
#define SCHEDULE(Enum, Name, Inference, Placement, Help, Generator)            \
  {Name, Inference, Placement, Help},
#include "runtime/schedule/Schedules.def"
};

constexpr ActionInfo kActions[] = {
#define ACTION(Enum, Name, Letter, Category, UnitTime)                         \
  {Name, Letter, Category, UnitTime},
#include "runtime/schedule/Actions.def"
};

const ScheduleInfo &scheduleInfo(ScheduleKind kind) {
  return kSchedules[static_cast<size_t>(kind)];
}
} // namespace

llvm::StringRef scheduleName(ScheduleKind kind) {
  return scheduleInfo(kind).name;
}

llvm::StringRef scheduleHelp(ScheduleKind kind) {
  return scheduleInfo(kind).help;
}

bool scheduleRunsInference(ScheduleKind kind) {
  return scheduleInfo(kind).inference;
}

llvm::StringRef schedulePlacement(ScheduleKind kind) {
  return scheduleInfo(kind).placement;
}

std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name) {
  for (ScheduleKind kind : kAllScheduleKinds)
    if (scheduleName(kind) == name)
      return kind;
  return std::nullopt;
}

std::string scheduleNames(bool inferenceOnly, llvm::StringRef separator) {
  std::vector<llvm::StringRef> names;
  for (ScheduleKind kind : kAllScheduleKinds)
    if (!inferenceOnly || scheduleRunsInference(kind))
      names.push_back(scheduleName(kind));
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0)
      out += !separator.empty()      ? separator.str()
             : i + 1 == names.size() ? " or "
                                     : ", ";
    out += names[i].str();
  }
  return out;
}

const ActionInfo &actionInfo(ActionKind kind) {
  return kActions[static_cast<size_t>(kind)];
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
  const ActionInfo &info = actionInfo(kind);
  if (isCompute())
    return llvm::formatv("{0} stage={1} mb={2}", info.name, stage, microbatch);
  if (info.category != "send" && info.category != "recv")
    return llvm::formatv("{0} mb={1}", info.name, microbatch);
  const Edge &e = edges[edge];
  std::string consumer = e.collector ? "out" : std::to_string(e.consumer);
  return llvm::formatv("{0} {1}->{2} mb={3} {4}={5}", info.name, e.producer,
                       consumer, microbatch,
                       info.category == "send" ? "to" : "from", peerRank);
}

bool Action::isCompute() const { return actionInfo(kind).letter != 0; }

std::string Action::cell() const {
  char letter = actionInfo(kind).letter;
  if (letter == 0)
    return "";
  return std::to_string(stage) + letter + std::to_string(microbatch);
}

int Schedule::channelCount() const {
  int n = static_cast<int>(edges.size());
  return 1 + (training ? 2 * n : n);
}

int channelOf(const Schedule &schedule, const Action &action) {
  switch (action.kind) {
  case ActionKind::SendF:
  case ActionKind::RecvF:
    return action.edge + 1;
  case ActionKind::SendB:
  case ActionKind::RecvB:
    return 1 + static_cast<int>(schedule.edges.size()) + action.edge;
  default:
    return -1;
  }
}

//===----------------------------------------------------------------------===//
// Generators: every rank's compute order
//===----------------------------------------------------------------------===//

namespace {
/// Per stage (0..N, N = the collector): the indices of the edges it reads
/// and of those it feeds, so that building and simulating a schedule never
/// scans every edge for every action.
struct EdgeIndex {
  std::vector<std::vector<int>> in, out;

  explicit EdgeIndex(const Schedule &schedule)
      : in(schedule.placement.numStages() + 1),
        out(schedule.placement.numStages() + 1) {
    for (size_t e = 0; e < schedule.edges.size(); ++e) {
      in[schedule.edges[e].consumer].push_back(static_cast<int>(e));
      out[schedule.edges[e].producer].push_back(static_cast<int>(e));
    }
  }
};

/// Per rank, its compute actions in order (F, B, I, W; OUT in inference).
using Orders = std::vector<std::vector<Action>>;

/// Start times of compute actions when every device runs its list in order,
/// each action as soon as the device is free and its inputs exist, with
/// free communication and each action as long as its stage's StageCost
/// says (the unit-time model when `costs` is empty). A device is a rank
/// (printGrid), or a stage (ordering 1f1b and zb-h1). Inputs are the
/// simulator's: F(s,m) needs F(p,m) of every producer p, B/I(s,m) needs F(s,m)
/// and B/I(c,m) of every consumer c, W(s,m) needs I(s,m). A blocked device
/// waits on one event and is woken by it, so a run costs O(actions x inputs).
class UnitTimeline {
public:
  UnitTimeline(const std::vector<Edge> &edges, const EdgeIndex &index,
               int numStages, int microbatches,
               std::vector<StageCost> costs = {})
      : edges(edges), index(index), numStages(numStages),
        microbatches(microbatches), costs(std::move(costs)) {}

  /// How long `a` takes.
  double duration(const Action &a) const {
    if (costs.empty() || a.stage < 0 || a.stage >= numStages)
      return actionInfo(a.kind).unitTime;
    const StageCost &c = costs[a.stage];
    switch (a.kind) {
    case ActionKind::Forward:
      return c.forward;
    case ActionKind::Backward:
      return c.input + c.weight;
    case ActionKind::BackwardInput:
      return c.input;
    case ActionKind::BackwardWeight:
      return c.weight;
    default:
      return 0;
    }
  }

  /// Fills `start` (per device, per action) and `length`. Errors: a device
  /// never gets to run an action ("stage 2 waits at 2B0").
  llvm::Error run(const std::vector<std::vector<Action>> &devices,
                  llvm::StringRef deviceName) {
    size_t n = devices.size();
    std::vector<double> end(2 * static_cast<size_t>(numStages) * microbatches,
                            -1);
    std::unordered_map<size_t, std::vector<int>> waiters;
    std::vector<size_t> pc(n, 0);
    std::vector<double> freeAt(n, 0);
    start.assign(n, {});
    std::vector<int> runnable;
    for (size_t d = 0; d < n; ++d) {
      start[d].assign(devices[d].size(), -1);
      runnable.push_back(static_cast<int>(n - 1 - d));
    }
    std::vector<size_t> inputs;
    while (!runnable.empty()) {
      int d = runnable.back();
      runnable.pop_back();
      for (; pc[d] < devices[d].size(); ++pc[d]) {
        const Action &a = devices[d][pc[d]];
        inputs.clear();
        inputsOf(a, inputs);
        double at = freeAt[d];
        bool blocked = false;
        for (size_t ev : inputs) {
          if (end[ev] < 0) {
            waiters[ev].push_back(d);
            blocked = true;
            break;
          }
          at = std::max(at, end[ev]);
        }
        if (blocked)
          break;
        start[d][pc[d]] = at;
        freeAt[d] = at + duration(a);
        length = std::max(length, freeAt[d]);
        if (a.kind == ActionKind::BackwardWeight)
          continue;
        size_t ev = event(a.kind == ActionKind::Forward, a.stage, a.microbatch);
        end[ev] = freeAt[d];
        auto it = waiters.find(ev);
        if (it != waiters.end()) {
          runnable.insert(runnable.end(), it->second.begin(), it->second.end());
          waiters.erase(it);
        }
      }
    }
    for (size_t d = 0; d < n; ++d)
      if (pc[d] < devices[d].size())
        return makeError(llvm::formatv("{0} {1} waits at {2}", deviceName, d,
                                       devices[d][pc[d]].cell())
                             .str());
    return llvm::Error::success();
  }

  std::vector<std::vector<double>> start;
  double length = 0;

private:
  /// The event "F(s,m) done" or "B/I(s,m) done".
  size_t event(bool forward, int s, int m) const {
    return (static_cast<size_t>(forward ? 0 : 1) * numStages + s) *
               microbatches +
           m;
  }

  void inputsOf(const Action &a, std::vector<size_t> &out) const {
    switch (a.kind) {
    case ActionKind::Forward:
      for (int e : index.in[a.stage])
        out.push_back(event(true, edges[e].producer, a.microbatch));
      break;
    case ActionKind::Backward:
    case ActionKind::BackwardInput:
      out.push_back(event(true, a.stage, a.microbatch));
      for (int e : index.out[a.stage])
        if (!edges[e].collector)
          out.push_back(event(false, edges[e].consumer, a.microbatch));
      break;
    case ActionKind::BackwardWeight:
      out.push_back(event(false, a.stage, a.microbatch));
      break;
    default:
      break;
    }
  }

  const std::vector<Edge> &edges;
  const EdgeIndex &index;
  int numStages, microbatches;
  std::vector<StageCost> costs;
};

/// Inference: rank r's forwards, and on the output rank the collector's
/// OUTs, in the order of `key(stage, microbatch)` (see Schedule.h).
template <typename Key>
Orders inferenceOrders(const Schedule &schedule, Key key) {
  const Placement &placement = schedule.placement;
  int n = placement.numStages();
  Orders orders(placement.worldSize());
  for (int r = 0; r < placement.worldSize(); ++r) {
    std::vector<int> stages = placement.stagesOf(r);
    if (r == placement.outputRank())
      stages.push_back(n);
    std::vector<std::pair<int, int>> items;
    items.reserve(stages.size() * static_cast<size_t>(schedule.microbatches));
    for (int s : stages)
      for (int m = 0; m < schedule.microbatches; ++m)
        items.emplace_back(s, m);
    std::sort(items.begin(), items.end(), [&](const auto &a, const auto &b) {
      return key(a.first, a.second) < key(b.first, b.second);
    });
    for (auto [s, m] : items)
      orders[r].push_back(
          {s == n ? ActionKind::Output : ActionKind::Forward, s, m});
  }
  return orders;
}

/// GPipe. Inference: a rank runs all microbatches through its first stage,
/// then through its next, ... Training: those forwards, then all
/// backwards, later stages first, microbatches in order.
llvm::Expected<Orders> gpipeOrders(const Schedule &schedule,
                                   const EdgeIndex &) {
  if (!schedule.training)
    return inferenceOrders(schedule,
                           [](int s, int m) { return std::make_pair(s, m); });
  const Placement &placement = schedule.placement;
  Orders orders(placement.worldSize());
  for (int r = 0; r < placement.worldSize(); ++r) {
    std::vector<int> stages = placement.stagesOf(r);
    for (int s : stages)
      for (int m = 0; m < schedule.microbatches; ++m)
        orders[r].push_back({ActionKind::Forward, s, m});
    for (auto it = stages.rbegin(); it != stages.rend(); ++it)
      for (int m = 0; m < schedule.microbatches; ++m)
        orders[r].push_back({ActionKind::Backward, *it, m});
  }
  return orders;
}

/// Megatron's 1F1B order of stage s of P (PipeDream-flush): min(P-s-1, M)
/// warm-up forwards, then one F and one B while forwards remain, then the
/// cool-down backwards. Stage s never holds more than P-s microbatches.
/// With `split` (zb-h1) every B is an I, and the W of microbatch k follows
/// the I of microbatch k+s: the first s steps send their gradients without
/// waiting for a W, and the last s W's fill the cool-down, where the stage
/// would otherwise idle (PyTorch's ScheduleInterleavedZeroBubble with one
/// stage per rank).
std::vector<Action> oneFOneBStageOrder(int s, int numStages, int microbatches,
                                       bool split) {
  int warmup = std::min(numStages - s - 1, microbatches);
  ActionKind backward =
      split ? ActionKind::BackwardInput : ActionKind::Backward;
  std::vector<Action> order;
  order.reserve(static_cast<size_t>(microbatches) * (split ? 3 : 2));
  int f = 0, b = 0, w = 0;
  while (f < warmup)
    order.push_back({ActionKind::Forward, s, f++});
  for (int k = 0; k < microbatches; ++k) {
    if (f < microbatches)
      order.push_back({ActionKind::Forward, s, f++});
    order.push_back({backward, s, b++});
    if (split && k >= s)
      order.push_back({ActionKind::BackwardWeight, s, w++});
  }
  while (split && w < microbatches)
    order.push_back({ActionKind::BackwardWeight, s, w++});
  return order;
}

/// 1f1b and zb-h1: every stage's order, and for a rank holding several
/// stages their actions in the order they start when every stage has a
/// device of its own (later stage first on ties). Dependencies start
/// strictly after what they depend on, so the ranks' orders are deadlock
/// free whenever the per-stage ones are.
llvm::Expected<Orders> perStageOrders(const Schedule &schedule,
                                      const EdgeIndex &index, bool split) {
  const Placement &placement = schedule.placement;
  int n = placement.numStages();
  std::vector<std::vector<Action>> stages(n);
  for (int s = 0; s < n; ++s)
    stages[s] = oneFOneBStageOrder(s, n, schedule.microbatches, split);
  UnitTimeline timeline(schedule.edges, index, n, schedule.microbatches);
  if (llvm::Error err = timeline.run(stages, "stage"))
    return withContext(std::move(err),
                       "cannot order " + scheduleName(schedule.kind));
  std::vector<std::vector<Action>> orders(placement.worldSize());
  for (int r = 0; r < placement.worldSize(); ++r) {
    std::vector<std::tuple<double, int, size_t>> keyed;
    for (int s : placement.stagesOf(r))
      for (size_t i = 0; i < stages[s].size(); ++i)
        keyed.emplace_back(timeline.start[s][i], -s, i);
    std::sort(keyed.begin(), keyed.end());
    for (auto &[at, negStage, i] : keyed)
      orders[r].push_back(stages[-negStage][i]);
  }
  return orders;
}

/// 1F1B. Inference (no backward): the items in the order of an ideal
/// synchronous pipeline's clock, key (stage + microbatch, -stage), later
/// stages first on ties. Training: Megatron's order per stage, merged per
/// rank (perStageOrders).
llvm::Expected<Orders> oneFOneBOrders(const Schedule &schedule,
                                      const EdgeIndex &index) {
  if (!schedule.training)
    return inferenceOrders(
        schedule, [](int s, int m) { return std::make_pair(s + m, -s); });
  return perStageOrders(schedule, index, /*split=*/false);
}

/// ZB-H1: 1F1B with every B split into I and W (oneFOneBStageOrder).
llvm::Expected<Orders> zeroBubbleOrders(const Schedule &schedule,
                                        const EdgeIndex &index) {
  return perStageOrders(schedule, index, /*split=*/true);
}

/// Whether the schedule's placement is the one its kind needs (Schedules.def):
/// the generators below name rank r's stages as that style places them.
llvm::Error needPlacement(const Schedule &schedule) {
  llvm::StringRef style = schedulePlacement(schedule.kind);
  if (schedule.placement.is(style))
    return llvm::Error::success();
  return makeError(llvm::formatv("{0} needs the {1} placement, not {2}",
                                 scheduleName(schedule.kind), style,
                                 schedule.placement.rule())
                       .str());
}

/// zbv and dualpipev: the V placement with exactly 2 stages per rank, rank
/// r holding stages r and 2R-1-r.
llvm::Error needTwoStagesOnV(const Schedule &schedule) {
  const Placement &placement = schedule.placement;
  if (placement.numStages() != 2 * placement.worldSize())
    return makeError(
        llvm::formatv("{0} needs exactly 2 stages per rank ({1} stage{2} on "
                      "{3} rank{4})",
                      scheduleName(schedule.kind), placement.numStages(),
                      placement.numStages() == 1 ? "" : "s",
                      placement.worldSize(),
                      placement.worldSize() == 1 ? "" : "s")
            .str());
  return needPlacement(schedule);
}

/// Interleaved 1F1B (PyTorch's ScheduleInterleaved1F1B, Megatron-LM's
/// interleaved schedule): rank r holds the v stages r, r+R, ...; forwards go
/// depth first in rounds: a round's microbatches through the rank's first
/// stage, then its second, ...; backwards likewise from the last stage. The
/// rank runs (v-1) * (first round's size) + 2 * (R-1-r) warm-up forwards,
/// then one F one B, then the remaining backwards. PyTorch needs M to be a
/// multiple of its rounds (max(1, M / R) of them); here the M microbatches
/// are spread over the rounds as evenly as possible (the first M % rounds
/// rounds take one more), which is PyTorch's order whenever PyTorch
/// accepts M.
llvm::Expected<Orders> interleavedOrders(const Schedule &schedule,
                                         const EdgeIndex &) {
  const Placement &placement = schedule.placement;
  if (placement.numStages() < 2 * placement.worldSize())
    return makeError(
        llvm::formatv(
            "interleaved-1f1b needs at least 2 stages per rank "
            "({0} stage{1} on {2} rank{3})",
            placement.numStages(), placement.numStages() == 1 ? "" : "s",
            placement.worldSize(), placement.worldSize() == 1 ? "" : "s")
            .str());
  // Rank r's stages are r, r+R, ...: the rounds below name them so.
  if (llvm::Error err = needPlacement(schedule))
    return err;
  int microbatches = schedule.microbatches;
  int ranks = placement.worldSize();
  int local = placement.numStages() / ranks;
  int rounds = std::max(1, microbatches / ranks);
  std::vector<int> sizes(rounds, microbatches / rounds);
  for (int g = 0; g < microbatches % rounds; ++g)
    ++sizes[g];
  Orders orders(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action> forwards, backwards;
    int first = 0;
    for (int size : sizes) {
      for (int c = 0; c < local; ++c)
        for (int m = first; m < first + size; ++m)
          forwards.push_back({ActionKind::Forward, c * ranks + r, m});
      for (int c = local - 1; c >= 0; --c)
        for (int m = first; m < first + size; ++m)
          backwards.push_back({ActionKind::Backward, c * ranks + r, m});
      first += size;
    }
    size_t total = forwards.size();
    size_t warmup =
        std::min<size_t>((local - 1) * sizes[0] + 2 * (ranks - 1 - r), total);
    std::vector<Action> &order = orders[r];
    order.assign(forwards.begin(), forwards.begin() + warmup);
    size_t b = 0;
    for (size_t f = warmup; f < total; ++f) {
      order.push_back(forwards[f]);
      order.push_back(backwards[b++]);
    }
    order.insert(order.end(), backwards.begin() + b, backwards.end());
  }
  return orders;
}

/// Looped BFS (Lamy-Poirier 2023, PyTorch's ScheduleLoopedBFS): rank r runs
/// every microbatch through its first stage, then through its next, ...;
/// then the backwards from its last stage to its first, each stage's
/// microbatches in reverse order. Inference: the forwards alone, gpipe's
/// order.
llvm::Expected<Orders> loopedBFSOrders(const Schedule &schedule,
                                       const EdgeIndex &index) {
  if (llvm::Error err = needPlacement(schedule))
    return err;
  if (!schedule.training)
    return gpipeOrders(schedule, index);
  const Placement &placement = schedule.placement;
  Orders orders(placement.worldSize());
  for (int r = 0; r < placement.worldSize(); ++r) {
    std::vector<int> stages = placement.stagesOf(r);
    for (int s : stages)
      for (int m = 0; m < schedule.microbatches; ++m)
        orders[r].push_back({ActionKind::Forward, s, m});
    for (auto it = stages.rbegin(); it != stages.rend(); ++it)
      for (int m = schedule.microbatches - 1; m >= 0; --m)
        orders[r].push_back({ActionKind::Backward, *it, m});
  }
  return orders;
}

/// Interleaved zero bubble, ZB1P of Qi et al. 2023 over several stages per
/// rank (PyTorch's ScheduleInterleavedZeroBubble): the microbatches go in
/// rounds of M / max(1, M / R); rank r runs (v-1) x (round size) + R-1-r
/// warm-up forwards, its local stages taking turns by round; then one F and
/// one I per step, backwards taking the local stages in reverse; from its
/// (r+1)-th I on, each I is followed by the W of the oldest I without one;
/// the remaining I's and W's end it. M must be a multiple of the round
/// count, as PyTorch requires.
llvm::Expected<Orders> interleavedZeroBubbleOrders(const Schedule &schedule,
                                                   const EdgeIndex &) {
  if (llvm::Error err = needPlacement(schedule))
    return err;
  const Placement &placement = schedule.placement;
  int ranks = placement.worldSize(), microbatches = schedule.microbatches;
  int local = placement.numStages() / ranks;
  int rounds = std::max(1, microbatches / ranks);
  if (microbatches % rounds != 0)
    return makeError(
        llvm::formatv("interleaved-zb runs the microbatches in rounds of "
                      "max(1, microbatches / ranks) = {0}; {1} microbatches "
                      "are not a multiple of it (try {2} or {3})",
                      rounds, microbatches, microbatches / rounds * rounds,
                      (microbatches / rounds + 1) * rounds)
            .str());
  int perRound = microbatches / rounds;
  int total = local * microbatches;
  Orders orders(ranks);
  for (int r = 0; r < ranks; ++r) {
    int warmup = std::min((local - 1) * perRound + (ranks - 1 - r), total);
    auto forwardStage = [&](int step) {
      return (step / perRound) % local * ranks + r;
    };
    auto backwardStage = [&](int step) {
      return (local - 1 - (step - warmup) / perRound % local) * ranks + r;
    };
    std::vector<int> nextF(placement.numStages()), nextI(nextF), nextW(nextF);
    std::vector<int> backwardSteps;
    size_t weights = 0;
    std::vector<Action> &order = orders[r];
    auto weight = [&] {
      int s = backwardStage(backwardSteps[weights++]);
      order.push_back({ActionKind::BackwardWeight, s, nextW[s]++});
    };
    for (int step = 0; step < total + warmup; ++step) {
      if (step < total) {
        int s = forwardStage(step);
        order.push_back({ActionKind::Forward, s, nextF[s]++});
      }
      if (step < warmup)
        continue;
      int s = backwardStage(step);
      order.push_back({ActionKind::BackwardInput, s, nextI[s]++});
      backwardSteps.push_back(step);
      if (step - warmup >= r)
        weight();
    }
    while (weights < backwardSteps.size())
      weight();
  }
  return orders;
}

/// ZB-V (Qi et al. 2023, section 6; PyTorch's ScheduleZBVZeroBubble): rank
/// r holds chunk 0 = stage r and chunk 1 = stage 2R-1-r. Warm-up: 2(R-r)-1
/// forwards of chunk 0; r pairs F1 F0; R-r steps F1 I1 W1. Steady: F0 I0
/// W0 F1 I1 W1 until every forward ran. Cool-down: r pairs I0 I1, R-r pairs
/// I0 W0, then the remaining W's of chunk 1 and chunk 0. Its counts assume
/// at least 2R-1 microbatches; with fewer, the actions of microbatches that
/// do not exist are left out.
llvm::Expected<Orders> zeroBubbleVOrders(const Schedule &schedule,
                                         const EdgeIndex &) {
  if (llvm::Error err = needTwoStagesOnV(schedule))
    return err;
  int ranks = schedule.placement.worldSize();
  int microbatches = schedule.microbatches;
  int n = std::max(2 * ranks - 1, microbatches);
  Orders orders(ranks);
  for (int r = 0; r < ranks; ++r) {
    int chunk0 = r, chunk1 = 2 * ranks - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::vector<Action> &order = orders[r];
    auto add = [&](ActionKind kind, int s, int m) {
      if (m < microbatches)
        order.push_back({kind, s, m});
    };
    for (int i = 0; i < 2 * (ranks - r) - 1; ++i)
      add(ActionKind::Forward, chunk0, f0++);
    for (int i = 0; i < r; ++i) {
      add(ActionKind::Forward, chunk1, f1++);
      add(ActionKind::Forward, chunk0, f0++);
    }
    auto forwardAndBackward = [&](int s, int &f, int &b) {
      add(ActionKind::Forward, s, f++);
      add(ActionKind::BackwardInput, s, b);
      add(ActionKind::BackwardWeight, s, b++);
    };
    for (int i = 0; i < ranks - r; ++i)
      forwardAndBackward(chunk1, f1, b1);
    while (f1 < f0 || f0 < n) {
      if (f0 < n)
        add(ActionKind::Forward, chunk0, f0++);
      add(ActionKind::BackwardInput, chunk0, b0);
      add(ActionKind::BackwardWeight, chunk0, b0++);
      forwardAndBackward(chunk1, f1, b1);
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; ++i) {
      add(ActionKind::BackwardInput, chunk0, b0++);
      add(ActionKind::BackwardInput, chunk1, b1++);
    }
    for (int i = 0; i < ranks - r; ++i) {
      add(ActionKind::BackwardInput, chunk0, b0++);
      add(ActionKind::BackwardWeight, chunk0, w0++);
    }
    while (w1 < b1)
      add(ActionKind::BackwardWeight, chunk1, w1++);
    while (w0 < b0)
      add(ActionKind::BackwardWeight, chunk0, w0++);
  }
  return orders;
}

/// DualPipeV (DeepSeek-V3's DualPipe cut in half; PyTorch's
/// ScheduleDualPipeV, after deepseek-ai/DualPipe): rank r holds stage r
/// (chunk 0) and stage 2R-1-r (chunk 1). Eight phases: 2(R-r-1) F0; r+1
/// pairs F0 F1; R-r-1 steps I1 W F1; M-2R+r+1 steps F0 B1 F1 B0 (the pairs
/// PyTorch overlaps, run one after the other here); R-r-1 steps B1 F1 B0;
/// r+1 pairs B1 B0, the second half as I's; R-r-1 steps W B0 (or W I0);
/// r+1 W's. A W is the oldest I's without one. Needs M >= 2R.
llvm::Expected<Orders> dualPipeVOrders(const Schedule &schedule,
                                       const EdgeIndex &) {
  if (llvm::Error err = needTwoStagesOnV(schedule))
    return err;
  int ranks = schedule.placement.worldSize();
  int microbatches = schedule.microbatches;
  if (microbatches < 2 * ranks)
    return makeError(llvm::formatv("dualpipev needs at least as many "
                                   "microbatches as stages ({0}), got {1}",
                                   2 * ranks, microbatches)
                         .str());
  Orders orders(ranks);
  for (int r = 0; r < ranks; ++r) {
    int chunk0 = r, chunk1 = 2 * ranks - 1 - r;
    std::vector<Action> &order = orders[r];
    std::vector<int> nextF(2 * ranks), nextB(2 * ranks);
    std::deque<std::pair<int, int>> weights;
    auto add = [&](ActionKind kind, int s) {
      int m = kind == ActionKind::Forward ? nextF[s]++ : nextB[s]++;
      order.push_back({kind, s, m});
      if (kind == ActionKind::BackwardInput)
        weights.emplace_back(s, m);
    };
    auto weight = [&] {
      if (weights.empty())
        return;
      order.push_back({ActionKind::BackwardWeight, weights.front().first,
                       weights.front().second});
      weights.pop_front();
    };
    for (int i = 0; i < 2 * (ranks - r - 1); ++i)
      add(ActionKind::Forward, chunk0);
    for (int i = 0; i < r + 1; ++i) {
      add(ActionKind::Forward, chunk0);
      add(ActionKind::Forward, chunk1);
    }
    for (int i = 0; i < ranks - r - 1; ++i) {
      add(ActionKind::BackwardInput, chunk1);
      weight();
      add(ActionKind::Forward, chunk1);
    }
    for (int i = 0; i < microbatches - 2 * ranks + r + 1; ++i) {
      add(ActionKind::Forward, chunk0);
      add(ActionKind::Backward, chunk1);
      add(ActionKind::Forward, chunk1);
      add(ActionKind::Backward, chunk0);
    }
    for (int i = 0; i < ranks - r - 1; ++i) {
      add(ActionKind::Backward, chunk1);
      add(ActionKind::Forward, chunk1);
      add(ActionKind::Backward, chunk0);
    }
    bool split = false;
    int half = (r + 1) / 2;
    for (int i = 0; i < r + 1; ++i) {
      if (i == half && r % 2 == 1)
        split = true;
      add(split ? ActionKind::BackwardInput : ActionKind::Backward, chunk1);
      if (i == half && r % 2 == 0)
        split = true;
      add(split ? ActionKind::BackwardInput : ActionKind::Backward, chunk0);
    }
    for (int i = 0; i < ranks - r - 1; ++i) {
      weight();
      add(split ? ActionKind::BackwardInput : ActionKind::Backward, chunk0);
    }
    for (int i = 0; i < r + 1; ++i)
      weight();
  }
  return orders;
}

using OrderGenerator = llvm::Expected<Orders> (*)(const Schedule &,
                                                  const EdgeIndex &);

/// Schedules.def's generators, in the order of ScheduleKind.
constexpr OrderGenerator kGenerators[] = {
#define SCHEDULE(Enum, Name, Inference, Placement, Help, Gen) Gen,
#include "runtime/schedule/Schedules.def"
};

/// Fills schedule.ranks from every rank's compute order: RECV_F of every
/// remote input edge before an F or OUT and SEND_F of every remote output
/// edge after it; RECV_B of every remote output edge before a B or I and SEND_B
/// of every remote input edge after it. A stage runs its forwards (and its
/// backwards) in microbatch order in every generated schedule, so each
/// channel's messages are sent and received in the same order.
void addCommunication(Schedule &schedule, const EdgeIndex &index,
                      const Orders &orders) {
  const Placement &placement = schedule.placement;
  for (size_t r = 0; r < orders.size(); ++r) {
    std::vector<Action> &actions = schedule.ranks[r];
    int rank = static_cast<int>(r);
    for (const Action &a : orders[r]) {
      int s = a.stage, m = a.microbatch;
      auto remote = [&](int e, bool toConsumer) {
        const Edge &edge = schedule.edges[e];
        int peer = placement.rankOf(toConsumer ? edge.consumer : edge.producer);
        return peer == rank ? -1 : peer;
      };
      switch (a.kind) {
      case ActionKind::Forward:
      case ActionKind::Output:
        for (int e : index.in[s])
          if (int peer = remote(e, false); peer >= 0)
            actions.push_back({ActionKind::RecvF, s, m, e, peer});
        actions.push_back(a);
        for (int e : index.out[s])
          if (int peer = remote(e, true); peer >= 0)
            actions.push_back({ActionKind::SendF, s, m, e, peer});
        break;
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
        for (int e : index.out[s])
          if (int peer = remote(e, true); peer >= 0)
            actions.push_back({ActionKind::RecvB, s, m, e, peer});
        actions.push_back(a);
        for (int e : index.in[s])
          if (int peer = remote(e, false); peer >= 0)
            actions.push_back({ActionKind::SendB, s, m, e, peer});
        break;
      default:
        actions.push_back(a);
        break;
      }
    }
  }
}

/// Fills schedule.ranks (edges, placement and kind set) with the actions of
/// its kind: the generator's compute orders and their communication.
llvm::Error generate(Schedule &schedule) {
  EdgeIndex index(schedule);
  auto orders =
      kGenerators[static_cast<size_t>(schedule.kind)](schedule, index);
  if (!orders)
    return orders.takeError();
  schedule.ranks.assign(schedule.placement.worldSize(), {});
  addCommunication(schedule, index, *orders);
  return llvm::Error::success();
}

/// A training schedule without actions: placement, microbatches and the
/// edges between stages.
llvm::Expected<Schedule> emptyTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               int microbatches) {
  if (llvm::Error err =
          checkOption("microbatches",
                      IntegerRule{1, kMaxMicrobatches}.problem(microbatches)))
    return err;
  if (static_cast<size_t>(placement.numStages()) != manifest.stages.size())
    return makeError(llvm::formatv("the placement has {0} stages but the "
                                   "manifest {1}",
                                   placement.numStages(),
                                   manifest.stages.size())
                         .str());
  auto edges = boundaryEdges(manifest);
  if (!edges)
    return edges.takeError();
  Schedule schedule;
  schedule.training = true;
  schedule.microbatches = microbatches;
  schedule.placement = placement;
  for (Edge &e : *edges)
    if (!e.collector)
      schedule.edges.push_back(std::move(e));
  schedule.ranks.resize(placement.worldSize());
  return schedule;
}
} // namespace

llvm::Expected<Schedule> buildSchedule(const Manifest &manifest,
                                       const Placement &placement,
                                       ScheduleKind kind, int microbatches) {
  if (llvm::Error err =
          checkOption("microbatches",
                      IntegerRule{1, kMaxMicrobatches}.problem(microbatches)))
    return err;
  if (!scheduleRunsInference(kind))
    return makeError(llvm::formatv("schedule {0} is for training (ppc train); "
                                   "ppc run takes {1}",
                                   scheduleName(kind),
                                   scheduleNames(/*inferenceOnly=*/true))
                         .str());
  auto edges = boundaryEdges(manifest);
  if (!edges)
    return edges.takeError();
  Schedule schedule;
  schedule.kind = kind;
  schedule.microbatches = microbatches;
  schedule.placement = placement;
  schedule.edges = std::move(*edges);
  if (llvm::Error err = generate(schedule))
    return err;
  return schedule;
}

llvm::Expected<Schedule> buildTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               ScheduleKind kind,
                                               int microbatches) {
  auto schedule = emptyTrainingSchedule(manifest, placement, microbatches);
  if (!schedule)
    return schedule.takeError();
  schedule->kind = kind;
  if (llvm::Error err = generate(*schedule))
    return err;
  return schedule;
}

llvm::Expected<Schedule>
buildSimulatedTrainingSchedule(const Manifest &manifest, ScheduleKind kind,
                               int worldSize, int microbatches,
                               llvm::StringRef style) {
  auto placement =
      Placement::create(static_cast<int>(manifest.stages.size()), worldSize,
                        style.empty() ? schedulePlacement(kind) : style);
  if (!placement)
    return placement.takeError();
  auto schedule =
      buildTrainingSchedule(manifest, *placement, kind, microbatches);
  if (!schedule)
    return schedule.takeError();
  if (llvm::Error err = simulateSchedule(*schedule))
    return err;
  return schedule;
}

//===----------------------------------------------------------------------===//
// Simulation
//===----------------------------------------------------------------------===//

namespace {
/// The simulator of Schedule.h. Ranks that can move are kept in a work
/// list; a rank blocked on a receive is woken by the send it waits for, so
/// the simulation costs O(actions), not O(actions x ranks).
class Simulator {
public:
  explicit Simulator(const Schedule &schedule)
      : schedule(schedule), placement(schedule.placement), index(schedule),
        channels(schedule.channelCount()), ran(placement.numStages() + 1),
        grad(placement.numStages() + 1), received(schedule.channelCount()),
        pc(placement.worldSize(), 0), waitingOn(schedule.channelCount(), -1) {}

  llvm::Error run() {
    if (schedule.training)
      if (llvm::Error err = checkTrainingActions())
        return err;
    std::vector<int> runnable;
    for (int r = 0; r < placement.worldSize(); ++r)
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
  /// "schedule", or "schedule 'x.csv'" for a schedule read from a file.
  std::string who() const {
    return schedule.origin.empty() ? std::string("schedule")
                                   : "schedule '" + schedule.origin + "'";
  }

  bool isBackwardChannel(int channel) const {
    return channel > static_cast<int>(schedule.edges.size());
  }

  /// The ranges every action must respect, so that no bad index reaches the
  /// simulator's tables.
  llvm::Error checkRanges(int r, size_t i, const Action &a) {
    int n = placement.numStages();
    bool comm = channelOf(schedule, a) >= 0;
    bool backward = a.kind == ActionKind::Backward ||
                    a.kind == ActionKind::BackwardInput ||
                    a.kind == ActionKind::BackwardWeight ||
                    a.kind == ActionKind::SendB || a.kind == ActionKind::RecvB;
    if (backward && !schedule.training)
      return makeError(llvm::formatv("{0}: rank {1} action {2} is a training "
                                     "action in an inference schedule",
                                     who(), r, i)
                           .str());
    // The collector (stage n) collects model outputs and receives the ones
    // produced on other ranks (a training schedule with an OUT is refused
    // below, naming it).
    bool stageOk = a.stage >= 0 &&
                   (a.stage < n ||
                    (a.stage == n &&
                     (a.kind == ActionKind::Output ||
                      (a.kind == ActionKind::RecvF && !schedule.training))));
    bool edgeOk = !comm || (a.edge >= 0 && static_cast<size_t>(a.edge) <
                                               schedule.edges.size());
    if (!stageOk || !edgeOk || a.microbatch < 0 ||
        a.microbatch >= schedule.microbatches)
      return makeError(
          llvm::formatv("{0}: rank {1} action {2} is out of range (stage {3}, "
                        "mb {4}, edge {5}; {6} stages, {7} microbatches, {8} "
                        "edges)",
                        who(), r, i, a.stage, a.microbatch, a.edge, n,
                        schedule.microbatches, schedule.edges.size())
              .str());
    return llvm::Error::success();
  }

  /// Training: before running anything, every action is in range and on its
  /// rank, and every (stage, microbatch) has one F and one B, or one I and
  /// one W. Checked up front so that a missing action is named as such
  /// rather than as the deadlock it causes.
  llvm::Error checkTrainingActions() {
    int n = placement.numStages(), mbs = schedule.microbatches;
    enum : uint8_t { kF = 1, kB = 2, kI = 4, kW = 8 };
    std::vector<uint8_t> seen(static_cast<size_t>(n) * mbs, 0);
    for (int r = 0; r < placement.worldSize(); ++r)
      for (size_t i = 0; i < schedule.ranks[r].size(); ++i) {
        const Action &a = schedule.ranks[r][i];
        if (llvm::Error err = checkRanges(r, i, a))
          return err;
        if (a.kind == ActionKind::Output)
          return makeError(llvm::formatv("{0} has OUT mb={1} on rank {2}; "
                                         "training schedules have no "
                                         "collector",
                                         who(), a.microbatch, r)
                               .str());
        if (channelOf(schedule, a) >= 0) {
          if (llvm::Error err = checkMessageAction(r, a))
            return err;
          continue;
        }
        if (placement.rankOf(a.stage) != r)
          return makeError(llvm::formatv("{0} runs {1} on rank {2}, not on "
                                         "its rank {3}",
                                         who(), a.str(schedule.edges), r,
                                         placement.rankOf(a.stage))
                               .str());
        uint8_t bit = a.kind == ActionKind::Forward         ? kF
                      : a.kind == ActionKind::Backward      ? kB
                      : a.kind == ActionKind::BackwardInput ? kI
                                                            : kW;
        uint8_t &flags =
            seen[static_cast<size_t>(a.stage) * mbs + a.microbatch];
        if (flags & bit)
          return makeError(who() + " runs " + a.cell() + " twice");
        flags |= bit;
      }
    for (int s = 0; s < n; ++s)
      for (int m = 0; m < mbs; ++m) {
        uint8_t flags = seen[static_cast<size_t>(s) * mbs + m];
        auto cell = [&](ActionKind kind) { return Action{kind, s, m}.cell(); };
        auto misses = [&](char letter) {
          return makeError(llvm::formatv("{0} misses {1} stage={2} mb={3}",
                                         who(), letter, s, m)
                               .str());
        };
        if (!(flags & kF))
          return misses('F');
        if (flags & kB) {
          if (flags & (kI | kW))
            return makeError(who() + " runs both " +
                             cell(ActionKind::Backward) + " and " +
                             cell(flags & kI ? ActionKind::BackwardInput
                                             : ActionKind::BackwardWeight));
        } else if (!(flags & (kI | kW))) {
          return misses('B');
        } else if (!(flags & kI)) {
          return misses('I');
        } else if (!(flags & kW)) {
          return misses('W');
        }
      }
    return llvm::Error::success();
  }

  /// A SEND/RECV runs on the rank of its side of the edge and names the
  /// other side's rank, which must be another rank.
  llvm::Error checkMessageAction(int r, const Action &a) {
    const Edge &e = schedule.edges[a.edge];
    bool atProducer =
        a.kind == ActionKind::SendF || a.kind == ActionKind::RecvB;
    int stage = atProducer ? e.producer : e.consumer;
    int home = placement.rankOf(stage);
    int peer = placement.rankOf(atProducer ? e.consumer : e.producer);
    if (home == peer)
      return makeError(llvm::formatv("{0}: rank {1} has {2}, but stages {3} "
                                     "and {4} are both on rank {5}",
                                     who(), r, a.str(schedule.edges),
                                     e.producer, e.consumer, home)
                           .str());
    if (a.stage != stage || home != r || a.peerRank != peer)
      return makeError(llvm::formatv("{0}: rank {1} has {2}, which belongs "
                                     "on rank {3} with stage {4} and peer "
                                     "rank {5}",
                                     who(), r, a.str(schedule.edges), home,
                                     stage, peer)
                           .str());
    return llvm::Error::success();
  }

  /// Runs rank r's actions until it blocks on a receive or ends.
  llvm::Error advance(int r, std::vector<int> &runnable) {
    const std::vector<Action> &actions = schedule.ranks[r];
    for (; pc[r] < actions.size(); ++pc[r]) {
      const Action &a = actions[pc[r]];
      if (!schedule.training)
        if (llvm::Error err = checkRanges(r, pc[r], a))
          return err;
      switch (a.kind) {
      case ActionKind::RecvF:
      case ActionKind::RecvB: {
        int channel = channelOf(schedule, a);
        if (channels[channel].empty()) {
          waitingOn[channel] = r;
          return llvm::Error::success();
        }
        if (llvm::Error err = receive(r, a, channel))
          return err;
        break;
      }
      case ActionKind::SendF:
      case ActionKind::SendB:
        if (llvm::Error err = send(r, a, runnable))
          return err;
        break;
      case ActionKind::Forward:
      case ActionKind::Output:
        if (placement.rankOf(a.stage) != r)
          return makeError(llvm::formatv("{0} runs {1} on rank {2}, "
                                         "not on its rank {3}",
                                         who(), a.str(schedule.edges), r,
                                         placement.rankOf(a.stage))
                               .str());
        if (llvm::Error err = inputsReady(r, a.stage, a.microbatch))
          return err;
        mark(ran[a.stage], a.microbatch);
        break;
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
        if (llvm::Error err = gradientsReady(r, a))
          return err;
        mark(grad[a.stage], a.microbatch);
        break;
      case ActionKind::BackwardWeight:
        if (!has(grad[a.stage], a.microbatch))
          return makeError(llvm::formatv("{0} runs {1} on rank {2} before I "
                                         "stage={3} mb={4}",
                                         who(), a.str(schedule.edges), r,
                                         a.stage, a.microbatch)
                               .str());
        break;
      }
    }
    return llvm::Error::success();
  }

  llvm::Error receive(int r, const Action &a, int channel) {
    std::deque<int> &ch = channels[channel];
    if (ch.front() != a.microbatch)
      return makeError(
          llvm::formatv(
              "{0}: {1} on edge {2}->{3} arrive as "
              "mb={4} but rank {5} expects mb={6}",
              who(), isBackwardChannel(channel) ? "gradients" : "messages",
              schedule.edges[a.edge].producer, schedule.edges[a.edge].consumer,
              ch.front(), r, a.microbatch)
              .str());
    ch.pop_front();
    mark(received[channel], a.microbatch);
    return llvm::Error::success();
  }

  llvm::Error send(int r, const Action &a, std::vector<int> &runnable) {
    bool ready =
        a.kind == ActionKind::SendF
            ? placement.rankOf(a.stage) == r && has(ran[a.stage], a.microbatch)
            : has(grad[a.stage], a.microbatch);
    if (!ready)
      return makeError(
          llvm::formatv("{0} sends {1} on rank {2} before "
                        "it ran the stage{3}",
                        who(), a.str(schedule.edges), r,
                        a.kind == ActionKind::SendB ? "'s backward" : "")
              .str());
    int channel = channelOf(schedule, a);
    channels[channel].push_back(a.microbatch);
    if (waitingOn[channel] >= 0) {
      runnable.push_back(waitingOn[channel]);
      waitingOn[channel] = -1;
    }
    return llvm::Error::success();
  }

  /// Whether every input of `stage` (or, for the collector, every model
  /// output) for microbatch m is on rank r: run there, or received.
  llvm::Error inputsReady(int r, int stage, int m) {
    for (int e : index.in[stage]) {
      int producer = schedule.edges[e].producer;
      bool ready = placement.rankOf(producer) == r ? has(ran[producer], m)
                                                   : has(received[e + 1], m);
      if (!ready)
        return makeError(
            llvm::formatv(
                "{0} runs {1} on rank {2} before its input "
                "from stage {3}",
                who(),
                stage == placement.numStages()
                    ? llvm::formatv("OUT mb={0}", m).str()
                    : llvm::formatv("F stage={0} mb={1}", stage, m).str(),
                r, producer)
                .str());
    }
    return llvm::Error::success();
  }

  /// Whether B/I(s,m) may run on rank r: F(s,m) ran and the gradients of
  /// every consumer are there (computed on r, or received).
  llvm::Error gradientsReady(int r, const Action &a) {
    int s = a.stage, m = a.microbatch;
    if (!has(ran[s], m))
      return makeError(llvm::formatv("{0} runs {1} on rank {2} before F "
                                     "stage={3} mb={4}",
                                     who(), a.str(schedule.edges), r, s, m)
                           .str());
    int edges = static_cast<int>(schedule.edges.size());
    for (int e : index.out[s]) {
      int consumer = schedule.edges[e].consumer;
      bool ready = placement.rankOf(consumer) == r
                       ? has(grad[consumer], m)
                       : has(received[1 + edges + e], m);
      if (!ready)
        return makeError(llvm::formatv("{0} runs {1} on rank {2} before its "
                                       "gradients from stage {3}",
                                       who(), a.str(schedule.edges), r,
                                       consumer)
                             .str());
    }
    return llvm::Error::success();
  }

  /// Rank r's stuck action, in training named by the compute action it is
  /// on its way to and the message it waits for.
  std::string stuckAt(int r) const {
    const std::vector<Action> &actions = schedule.ranks[r];
    const Action &at = actions[pc[r]];
    if (!schedule.training ||
        (at.kind != ActionKind::RecvF && at.kind != ActionKind::RecvB))
      return llvm::formatv("rank {0} waits at {1}", r, at.str(schedule.edges));
    std::string target = at.str(schedule.edges);
    for (size_t i = pc[r]; i < actions.size(); ++i)
      if (actions[i].isCompute()) {
        target = actions[i].cell();
        break;
      }
    const Edge &e = schedule.edges[at.edge];
    bool forward = at.kind == ActionKind::RecvF;
    return llvm::formatv("rank {0} waits at {1} for the {2} of stage {3} -> "
                         "{4} from rank {5}",
                         r, target, forward ? "outputs" : "gradients",
                         e.producer, e.consumer,
                         placement.rankOf(forward ? e.producer : e.consumer));
  }

  /// No rank is stuck, no message is left unreceived, and every stage ran
  /// every microbatch where it is placed.
  llvm::Error checkFinished() {
    std::string stuck;
    for (int r = 0; r < placement.worldSize(); ++r)
      if (pc[r] < schedule.ranks[r].size())
        stuck += (stuck.empty() ? "" : "; ") + stuckAt(r);
    if (!stuck.empty())
      return makeError(who() + " deadlocks: " + stuck);
    int edges = static_cast<int>(schedule.edges.size());
    for (size_t c = 1; c < channels.size(); ++c) {
      if (channels[c].empty())
        continue;
      bool backward = isBackwardChannel(static_cast<int>(c));
      const Edge &e = schedule.edges[backward ? c - 1 - edges : c - 1];
      return makeError(
          llvm::formatv("{0}: rank {1} never receives {2} {3}->{4} mb={5}",
                        who(),
                        placement.rankOf(backward ? e.producer : e.consumer),
                        backward ? "SEND_B" : "SEND_F", e.producer, e.consumer,
                        channels[c].front())
              .str());
    }
    if (schedule.training) // checkTrainingActions() saw every action
      return llvm::Error::success();
    for (int s = 0; s <= placement.numStages(); ++s)
      for (int m = 0; m < schedule.microbatches; ++m)
        if (!has(ran[s], m))
          return makeError(llvm::formatv("{0} never runs {1} mb={2}", who(),
                                         s == placement.numStages()
                                             ? std::string("OUT")
                                             : "F stage=" + std::to_string(s),
                                         m)
                               .str());
    return llvm::Error::success();
  }

  // Per stage (or channel), a bit per microbatch, allocated on first use.
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
  /// Per channel: microbatches sent and not yet received, in order.
  std::vector<std::deque<int>> channels;
  /// Per stage: microbatches whose F (or OUT) ran (on the stage's own rank:
  /// advance() refuses any other), and whose B or I ran.
  std::vector<std::vector<bool>> ran, grad;
  /// Per channel: microbatches received.
  std::vector<std::vector<bool>> received;
  std::vector<size_t> pc;
  /// Per channel: the rank blocked receiving from it, or -1.
  std::vector<int> waitingOn;
};
} // namespace

llvm::Error simulateSchedule(const Schedule &schedule) {
  return Simulator(schedule).run();
}

//===----------------------------------------------------------------------===//
// CSV
//===----------------------------------------------------------------------===//

namespace {
/// The non-compute cells of PyTorch's compute_comms layout
/// (torch.distributed.pipelining's _ComputationType): what each maps to.
enum class CommCell { SendF, RecvF, SendB, RecvB, WaitSendF, WaitSendB, FSDP };

struct CommCellInfo {
  llvm::StringRef name;
  CommCell kind;
  /// Whether the cell names a microbatch ("1SEND_F0"); the FSDP cells
  /// ("0UNSHARD") do not.
  bool microbatch;
};

constexpr CommCellInfo kCommCells[] = {
    {"SEND_F", CommCell::SendF, true},
    {"RECV_F", CommCell::RecvF, true},
    {"SEND_B", CommCell::SendB, true},
    {"RECV_B", CommCell::RecvB, true},
    {"WAIT_SEND_F", CommCell::WaitSendF, true},
    {"WAIT_SEND_B", CommCell::WaitSendB, true},
    {"UNSHARD", CommCell::FSDP, false},
    {"RESHARD", CommCell::FSDP, false},
    {"REDUCE_GRAD", CommCell::FSDP, false},
    {"WAIT_REDUCE_GRAD", CommCell::FSDP, false},
};

const CommCellInfo &commCellInfo(CommCell kind) {
  for (const CommCellInfo &info : kCommCells)
    if (info.kind == kind)
      return info;
  return kCommCells[0];
}

/// One cell of either layout.
struct Cell {
  /// The compute actions: one, or an OVERLAP_F_B's parts in order; none
  /// for a communication or FSDP cell.
  std::vector<Action> compute;
  std::optional<CommCell> comm;
  int stage = 0, microbatch = 0;
};

/// A cell as messages show it: at most 40 bytes, escaped (printable()).
std::string printableCell(llvm::StringRef raw) { return printable(raw, 40); }

/// Parses a non-empty run of at most 9 digits at the front of `text`.
std::optional<int> takeNumber(llvm::StringRef &text) {
  size_t n = 0;
  while (n < text.size() && llvm::isDigit(text[n]))
    ++n;
  if (n == 0 || n > 9)
    return std::nullopt;
  int value = 0;
  for (char c : text.take_front(n))
    value = value * 10 + (c - '0');
  text = text.drop_front(n);
  return value;
}

/// {stage}{NAME}{microbatch} as _Action.from_str reads it: NAME a compute
/// letter of Actions.def or a name of kCommCells (the FSDP names take no
/// microbatch).
std::optional<Cell> parseSimpleCell(llvm::StringRef text) {
  std::optional<int> stage = takeNumber(text);
  if (!stage)
    return std::nullopt;
  size_t n = 0;
  while (n < text.size() &&
         ((text[n] >= 'A' && text[n] <= 'Z') || text[n] == '_'))
    ++n;
  llvm::StringRef name = text.take_front(n);
  text = text.drop_front(n);
  Cell cell;
  cell.stage = *stage;
  if (name.size() == 1) {
    const ActionInfo *found = std::find_if(
        std::begin(kActions), std::end(kActions),
        [&](const ActionInfo &info) { return info.letter == name[0]; });
    std::optional<int> microbatch = takeNumber(text);
    if (found == std::end(kActions) || !microbatch || !text.empty())
      return std::nullopt;
    cell.microbatch = *microbatch;
    cell.compute.push_back(
        {static_cast<ActionKind>(found - std::begin(kActions)), *stage,
         *microbatch});
    return cell;
  }
  const CommCellInfo *found =
      std::find_if(std::begin(kCommCells), std::end(kCommCells),
                   [&](const CommCellInfo &info) { return info.name == name; });
  if (found == std::end(kCommCells))
    return std::nullopt;
  cell.comm = found->kind;
  if (found->microbatch) {
    std::optional<int> microbatch = takeNumber(text);
    if (!microbatch)
      return std::nullopt;
    cell.microbatch = *microbatch;
  }
  if (!text.empty())
    return std::nullopt;
  return cell;
}

/// A cell of either layout: a simple cell, or "(0F3;1B2)OVERLAP_F_B",
/// whose compute parts run in order (ppc does not overlap them).
std::optional<Cell> parseCell(llvm::StringRef text) {
  if (!text.consume_front("("))
    return parseSimpleCell(text);
  auto [inside, rest] = text.split(')');
  if (rest != "OVERLAP_F_B" || inside.empty())
    return std::nullopt;
  Cell cell;
  llvm::SmallVector<llvm::StringRef, 2> parts;
  inside.split(parts, ';');
  for (llvm::StringRef part : parts) {
    std::optional<Cell> sub = parseSimpleCell(part.trim(" \t"));
    if (!sub || sub->comm)
      return std::nullopt;
    cell.compute.push_back(sub->compute[0]);
  }
  cell.stage = cell.compute[0].stage;
  cell.microbatch = cell.compute[0].microbatch;
  return cell;
}

/// Reads the rows of a schedule CSV, expecting `ranks` of them, and hands
/// every cell whose stages are below `numStages` to `onCell` with its row
/// and the "schedule 'x.csv' row 1 (rank 0), cell 2: " that names it; `who`
/// is "schedule 'x.csv'". A UTF-8 byte order mark before the first cell is
/// skipped. Errors: the row count, a cell that is no action of either
/// layout or names a stage out of range, and onCell's.
llvm::Error
readCSVRows(llvm::StringRef text, int ranks, int numStages, llvm::StringRef who,
            llvm::function_ref<llvm::Error(int row, const std::string &where,
                                           const Cell &cell)>
                onCell) {
  text.consume_front("\xEF\xBB\xBF");
  int row = 0;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    line.consume_back("\r");
    if (row == ranks)
      return makeError(llvm::formatv("{0} has more than {1} row{2}; expected "
                                     "one per rank",
                                     who, ranks, ranks == 1 ? "" : "s")
                           .str());
    llvm::SmallVector<llvm::StringRef, 0> cells;
    if (!line.empty())
      line.split(cells, ',');
    for (size_t c = 0; c < cells.size(); ++c) {
      llvm::StringRef raw = cells[c].trim(" \t");
      llvm::StringRef text = raw;
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"')
        text = text.drop_front().drop_back().trim(" \t");
      if (text.empty())
        continue;
      std::string where =
          llvm::formatv("{0} row {1} (rank {2}), cell {3}: ", who, row + 1, row,
                        c + 1)
              .str();
      std::optional<Cell> cell = parseCell(text);
      if (!cell)
        return makeError(where + "'" + printableCell(raw) +
                         "' is not a compute action like 0F1, 1B0, 0I3 or "
                         "0W3, nor a compute_comms action like 1RECV_F0 or "
                         "0SEND_B2");
      std::vector<int> stages{cell->stage};
      for (const Action &a : cell->compute)
        stages.push_back(a.stage);
      for (int s : stages)
        if (s >= numStages)
          return makeError(where + llvm::formatv("stage {0} is out of range "
                                                 "({1} stage{2})",
                                                 s, numStages,
                                                 numStages == 1 ? "" : "s")
                                       .str());
      if (llvm::Error err = onCell(row, where, *cell))
        return err;
    }
    ++row;
  }
  if (row != ranks)
    return makeError(llvm::formatv("{0} has {1} row{2}; expected one per rank "
                                   "({3})",
                                   who, row, row == 1 ? "" : "s", ranks)
                         .str());
  return llvm::Error::success();
}

/// Writes rank `r`'s actions as compute_comms cells: compute actions as
/// they are; a run of SEND_F (RECV_F, ...) of one stage and microbatch, one
/// per edge, as one cell; and, as PyTorch's _add_wait_send places them, a
/// WAIT_SEND_F after the local B or I that proves the forward send was
/// consumed, every other wait at the end.
void writeCommsRow(const Schedule &schedule, int r, std::string &out) {
  std::vector<std::string> cells;
  // Pending sends by (is backward, stage, microbatch), in send order.
  std::vector<std::tuple<bool, int, int>> pending;
  const std::vector<Action> &actions = schedule.ranks[r];
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action &a = actions[i];
    if (a.isCompute()) {
      cells.push_back(a.cell());
      if (a.kind != ActionKind::Backward && a.kind != ActionKind::BackwardInput)
        continue;
      auto it = std::find(pending.begin(), pending.end(),
                          std::make_tuple(false, a.stage, a.microbatch));
      if (it != pending.end()) {
        cells.push_back(std::to_string(a.stage) + "WAIT_SEND_F" +
                        std::to_string(a.microbatch));
        pending.erase(it);
      }
      continue;
    }
    if (i > 0 && actions[i - 1].kind == a.kind &&
        actions[i - 1].stage == a.stage &&
        actions[i - 1].microbatch == a.microbatch)
      continue; // one cell for every edge of the stage
    llvm::StringRef name = actionInfo(a.kind).name;
    cells.push_back(std::to_string(a.stage) + name.str() +
                    std::to_string(a.microbatch));
    if (actionInfo(a.kind).category == "send")
      pending.emplace_back(a.kind == ActionKind::SendB, a.stage, a.microbatch);
  }
  for (auto [backward, stage, microbatch] : pending)
    cells.push_back(std::to_string(stage) +
                    (backward ? "WAIT_SEND_B" : "WAIT_SEND_F") +
                    std::to_string(microbatch));
  out += llvm::join(cells, ",");
  out += "\r\n";
}
} // namespace

llvm::StringRef csvLayoutName(CSVLayout layout) {
  return layout == CSVLayout::ComputeOnly ? "compute_only" : "compute_comms";
}

std::string scheduleToCSV(const Schedule &schedule, CSVLayout layout) {
  std::string out;
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    if (layout == CSVLayout::ComputeComms) {
      writeCommsRow(schedule, static_cast<int>(r), out);
      continue;
    }
    std::vector<std::string> cells;
    for (const Action &a : schedule.ranks[r])
      if (a.isCompute())
        cells.push_back(a.cell());
    out += llvm::join(cells, ",");
    out += "\r\n";
  }
  return out;
}

llvm::Expected<Placement> placementFromCSV(llvm::StringRef text, int numStages,
                                           int worldSize,
                                           llvm::StringRef name) {
  std::string who = "schedule '" + name.str() + "'";
  std::vector<int> ranks(std::max(numStages, 0), -1);
  if (llvm::Error err = readCSVRows(
          text, worldSize, numStages, who,
          [&](int row, const std::string &where,
              const Cell &cell) -> llvm::Error {
            for (const Action &a : cell.compute) {
              int &rank = ranks[a.stage];
              if (rank >= 0 && rank != row)
                return makeError(where +
                                 llvm::formatv("stage {0} already runs on "
                                               "rank {1} (row {2})",
                                               a.stage, rank, rank + 1)
                                     .str());
              rank = row;
            }
            return llvm::Error::success();
          }))
    return err;
  std::vector<bool> used(worldSize, false);
  for (int s = 0; s < numStages; ++s) {
    if (ranks[s] < 0)
      return makeError(
          llvm::formatv("{0} runs no action of stage {1}", who, s).str());
    used[ranks[s]] = true;
  }
  for (int r = 0; r < worldSize; ++r)
    if (!used[r])
      return makeError(
          llvm::formatv("{0} row {1} (rank {2}) runs no stage", who, r + 1, r)
              .str());
  return Placement::fromRanks(std::move(ranks), worldSize, "csv");
}

namespace {
/// Turns the compute_comms cell `cell` of row `row` into ppc's actions: a
/// SEND_F of stage s is a SEND_F on every edge from s to another rank,
/// RECV_F one on every edge into s from another rank, and likewise SEND_B
/// (edges into s) and RECV_B (edges out of s). Waits are checked against
/// the row's sends (`pending`) and dropped: ppc's links retire sends
/// themselves and the step ends by flushing them. FSDP cells are dropped.
llvm::Error addCommCell(Schedule &schedule, const EdgeIndex &index, int row,
                        const std::string &where, const Cell &cell,
                        std::set<std::tuple<CommCell, int, int>> &pending) {
  const Placement &placement = schedule.placement;
  CommCell kind = *cell.comm;
  llvm::StringRef name = commCellInfo(kind).name;
  std::string text =
      std::to_string(cell.stage) + name.str() +
      (commCellInfo(kind).microbatch ? std::to_string(cell.microbatch)
                                     : std::string());
  if (placement.rankOf(cell.stage) != row)
    return makeError(where + llvm::formatv("{0}: stage {1} runs on rank {2} "
                                           "({3}), not on rank {4}",
                                           text, cell.stage,
                                           placement.rankOf(cell.stage),
                                           placement.rule(), row)
                                 .str());
  if (kind == CommCell::FSDP)
    return llvm::Error::success();
  if (cell.microbatch >= schedule.microbatches)
    return makeError(where +
                     llvm::formatv("{0}: microbatch {1} is out of "
                                   "range ({2} microbatch{3})",
                                   text, cell.microbatch, schedule.microbatches,
                                   schedule.microbatches == 1 ? "" : "es")
                         .str());
  if (kind == CommCell::WaitSendF || kind == CommCell::WaitSendB) {
    CommCell send =
        kind == CommCell::WaitSendF ? CommCell::SendF : CommCell::SendB;
    if (!pending.erase({send, cell.stage, cell.microbatch}))
      return makeError(where + llvm::formatv("{0} waits for no earlier {1}{2}"
                                             "{3} on its row",
                                             text, cell.stage,
                                             commCellInfo(send).name,
                                             cell.microbatch)
                                   .str());
    return llvm::Error::success();
  }
  bool forward = kind == CommCell::SendF || kind == CommCell::RecvF;
  bool send = kind == CommCell::SendF || kind == CommCell::SendB;
  // SEND_F and RECV_B use the stage's output edges, RECV_F and SEND_B its
  // input edges.
  bool outputs = kind == CommCell::SendF || kind == CommCell::RecvB;
  ActionKind action = kind == CommCell::SendF   ? ActionKind::SendF
                      : kind == CommCell::RecvF ? ActionKind::RecvF
                      : kind == CommCell::SendB ? ActionKind::SendB
                                                : ActionKind::RecvB;
  size_t before = schedule.ranks[row].size();
  for (int e : outputs ? index.out[cell.stage] : index.in[cell.stage]) {
    const Edge &edge = schedule.edges[e];
    int peer = placement.rankOf(outputs ? edge.consumer : edge.producer);
    if (peer != row)
      schedule.ranks[row].push_back(
          {action, cell.stage, cell.microbatch, e, peer});
  }
  if (schedule.ranks[row].size() == before)
    return makeError(
        where + llvm::formatv("{0}: stage {1} {2} no {3} {4} another rank",
                              text, cell.stage, send ? "sends" : "receives",
                              forward ? "outputs" : "gradients",
                              send ? "to" : "from")
                    .str());
  if (send && !pending.insert({kind, cell.stage, cell.microbatch}).second)
    return makeError(where + text + " is sent twice");
  return llvm::Error::success();
}
} // namespace

llvm::Expected<Schedule> trainingScheduleFromCSV(const Manifest &manifest,
                                                 const Placement &placement,
                                                 llvm::StringRef text,
                                                 int microbatches,
                                                 llvm::StringRef name) {
  auto schedule = emptyTrainingSchedule(manifest, placement, microbatches);
  if (!schedule)
    return schedule.takeError();
  schedule->origin = name.str();
  std::string who = "schedule '" + name.str() + "'";
  EdgeIndex index(*schedule);
  Orders orders(placement.worldSize());
  // A rank runs F, I and W at most once per stage and microbatch; a
  // compute_comms row adds a RECV, a SEND and a WAIT each way per stage and
  // microbatch, and FSDP cells (PyTorch writes about two per compute
  // action): kMaxCommCells per stage and microbatch, 4 more per stage.
  constexpr size_t kMaxCommCells = 12;
  std::vector<size_t> maxActions(placement.worldSize()),
      maxCommCells(placement.worldSize());
  for (int r = 0; r < placement.worldSize(); ++r) {
    size_t stages = placement.stagesOf(r).size();
    maxActions[r] = 3 * stages * static_cast<size_t>(microbatches);
    maxCommCells[r] = kMaxCommCells * stages * microbatches + 4 * stages;
  }
  std::vector<size_t> actions(placement.worldSize(), 0),
      commCells(placement.worldSize(), 0);
  // The layout: compute_comms when any cell is communication (a first pass
  // that only parses), and then the file gives every message.
  // Its errors come again, in file order, from the pass that reads.
  bool comms = false;
  llvm::consumeError(
      readCSVRows(text, placement.worldSize(), placement.numStages(), who,
                  [&](int, const std::string &, const Cell &cell) {
                    comms = comms || cell.comm.has_value();
                    return llvm::Error::success();
                  }));
  std::vector<std::set<std::tuple<CommCell, int, int>>> pending(
      placement.worldSize());
  if (llvm::Error err = readCSVRows(
          text, placement.worldSize(), placement.numStages(), who,
          [&](int row, const std::string &where,
              const Cell &cell) -> llvm::Error {
            if (cell.comm && ++commCells[row] > maxCommCells[row])
              return makeError(llvm::formatv("{0} row {1} (rank {2}) has "
                                             "more than {3} communication "
                                             "cells ({4} per stage and "
                                             "microbatch, 4 more per stage)",
                                             who, row + 1, row,
                                             maxCommCells[row], kMaxCommCells)
                                   .str());
            actions[row] += cell.compute.size();
            if (actions[row] > maxActions[row])
              return makeError(llvm::formatv("{0} row {1} (rank {2}) has "
                                             "more than {3} actions (3 per "
                                             "stage and microbatch)",
                                             who, row + 1, row, maxActions[row])
                                   .str());
            if (cell.comm)
              return addCommCell(*schedule, index, row, where, cell,
                                 pending[row]);
            for (const Action &a : cell.compute) {
              if (a.microbatch >= microbatches)
                return makeError(where +
                                 llvm::formatv("microbatch {0} is out of "
                                               "range ({1} microbatch{2})",
                                               a.microbatch, microbatches,
                                               microbatches == 1 ? "" : "es")
                                     .str());
              if (placement.rankOf(a.stage) != row)
                return makeError(
                    where + llvm::formatv("stage {0} runs on rank {1} "
                                          "({2}), not on rank {3}",
                                          a.stage, placement.rankOf(a.stage),
                                          placement.rule(), row)
                                .str());
              (comms ? schedule->ranks[row] : orders[row]).push_back(a);
            }
            return llvm::Error::success();
          }))
    return err;
  for (int r = 0; r < placement.worldSize(); ++r)
    if (!pending[r].empty()) {
      auto [kind, stage, microbatch] = *pending[r].begin();
      return makeError(llvm::formatv("{0} row {1} (rank {2}): {3}{4}{5} has "
                                     "no {3}WAIT_{4}{5} after it",
                                     who, r + 1, r, stage,
                                     commCellInfo(kind).name, microbatch)
                           .str());
    }
  if (!comms)
    addCommunication(*schedule, index, orders);
  if (llvm::Error err = simulateSchedule(*schedule))
    return err;
  return schedule;
}

//===----------------------------------------------------------------------===//
// Activations and the grid
//===----------------------------------------------------------------------===//

std::vector<int> peakActivations(const Schedule &schedule) {
  int n = schedule.placement.numStages();
  std::vector<int> peak(n, 0), held(n, 0);
  for (const std::vector<Action> &actions : schedule.ranks)
    for (const Action &a : actions) {
      if (a.stage < 0 || a.stage >= n)
        continue;
      if (a.kind == ActionKind::Forward)
        peak[a.stage] = std::max(peak[a.stage], ++held[a.stage]);
      else if (a.kind == ActionKind::Backward ||
               a.kind == ActionKind::BackwardWeight)
        --held[a.stage];
    }
  return peak;
}

/// `x` with 4 significant digits as printf's %g prints it: "-1", "0.5",
/// "9.657e+07".
static std::string shortNumber(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", x);
  return text;
}

/// Every rank's compute actions, in order.
static std::vector<std::vector<Action>>
computeActions(const Schedule &schedule) {
  std::vector<std::vector<Action>> devices(schedule.ranks.size());
  for (size_t r = 0; r < schedule.ranks.size(); ++r)
    for (const Action &a : schedule.ranks[r])
      if (a.isCompute())
        devices[r].push_back(a);
  return devices;
}

llvm::Expected<ScheduleStats>
scheduleStats(const Schedule &schedule, const std::vector<StageCost> &costs) {
  const Placement &placement = schedule.placement;
  if (!costs.empty() &&
      costs.size() != static_cast<size_t>(placement.numStages()))
    return makeError(llvm::formatv("{0} stage cost{1} for {2} stage{3}",
                                   costs.size(), costs.size() == 1 ? "" : "s",
                                   placement.numStages(),
                                   placement.numStages() == 1 ? "" : "s")
                         .str());
  for (size_t s = 0; s < costs.size(); ++s)
    for (double c : {costs[s].forward, costs[s].input, costs[s].weight})
      if (!(c >= 0) || !std::isfinite(c))
        return makeError(llvm::formatv("stage {0}'s cost {1} is not a finite "
                                       "number >= 0",
                                       s, shortNumber(c))
                             .str());
  std::vector<std::vector<Action>> devices = computeActions(schedule);
  EdgeIndex index(schedule);
  UnitTimeline timeline(schedule.edges, index, placement.numStages(),
                        schedule.microbatches, costs);
  if (llvm::Error err = timeline.run(devices, "rank"))
    return err;
  ScheduleStats stats;
  stats.makespan = timeline.length;
  double busy = 0;
  for (size_t r = 0; r < devices.size(); ++r) {
    double mine = 0;
    for (const Action &a : devices[r])
      mine += timeline.duration(a);
    stats.busy.push_back(mine);
    busy += mine;
    int held = 0, peak = 0, messages = 0;
    for (const Action &a : schedule.ranks[r]) {
      if (a.kind == ActionKind::Forward)
        peak = std::max(peak, ++held);
      else if (a.kind == ActionKind::Backward ||
               a.kind == ActionKind::BackwardWeight)
        --held;
      else if (actionInfo(a.kind).category == "send")
        ++messages;
    }
    stats.peakActivations.push_back(peak);
    stats.messages.push_back(messages);
  }
  stats.bubble =
      stats.makespan > 0
          ? 1 - busy / (stats.makespan * static_cast<double>(devices.size()))
          : 0;
  return stats;
}

std::vector<StageCost> manifestStageCosts(const Manifest &manifest) {
  std::vector<StageCost> costs;
  bool predicted = false;
  for (const StageInfo &s : manifest.stages) {
    costs.push_back({s.predictedCost, s.predictedCost, s.predictedCost});
    predicted = predicted || s.predictedCost > 0;
  }
  return predicted ? costs : std::vector<StageCost>{};
}

std::string manifestCostsSource(const Manifest &manifest) {
  if (manifestStageCosts(manifest).empty())
    return "unit costs (the manifest predicts none)";
  if (manifest.costModel == "profile")
    return "the manifest's measured (profile) stage costs";
  return "the manifest's " + manifest.costModel +
         " stage costs (estimates; ppc split --cost profile measures them)";
}

llvm::Expected<ScheduleChoice>
chooseSchedule(const Manifest &manifest, int worldSize, int microbatches,
               const std::vector<StageCost> &costs, llvm::StringRef costsFrom,
               std::optional<int> maxActivations) {
  // What every kind would refuse alike is the caller's error, said once.
  int numStages = static_cast<int>(manifest.stages.size());
  if (llvm::Error err =
          checkOption("microbatches",
                      IntegerRule{1, kMaxMicrobatches}.problem(microbatches)))
    return err;
  if (auto edges = boundaryEdges(manifest); !edges)
    return edges.takeError();
  if (auto loop = Placement::create(numStages, worldSize); !loop)
    return loop.takeError();
  auto peakOf = [](const ScheduleStats &stats) {
    return *std::max_element(stats.peakActivations.begin(),
                             stats.peakActivations.end());
  };
  ScheduleChoice choice;
  std::optional<size_t> best;
  for (ScheduleKind kind : kAllScheduleKinds) {
    ScheduleCandidate candidate{kind, "", {}};
    auto schedule =
        buildSimulatedTrainingSchedule(manifest, kind, worldSize, microbatches);
    llvm::Expected<ScheduleStats> stats =
        schedule ? scheduleStats(*schedule, costs)
                 : llvm::Expected<ScheduleStats>(schedule.takeError());
    if (!stats) {
      candidate.refusal = llvm::toString(stats.takeError());
    } else {
      candidate.stats = *stats;
      int peak = peakOf(*stats);
      if (maxActivations && peak > *maxActivations)
        candidate.refusal = llvm::formatv("{0} activations > --max-activations "
                                          "{1}",
                                          peak, *maxActivations)
                                .str();
      else if (!best ||
               stats->makespan < choice.candidates[*best].stats.makespan) {
        best = choice.candidates.size();
        choice.schedule = std::move(*schedule);
      }
    }
    choice.candidates.push_back(std::move(candidate));
  }
  std::string others;
  for (size_t i = 0; i < choice.candidates.size(); ++i) {
    const ScheduleCandidate &c = choice.candidates[i];
    if (best && i == *best)
      continue;
    others += (others.empty() ? "" : ", ") + scheduleName(c.kind).str() + " ";
    others += c.refusal.empty() ? shortNumber(c.stats.makespan) + " (" +
                                      std::to_string(peakOf(c.stats)) + ")"
                                : "n/a (" + c.refusal + ")";
  }
  if (!best)
    return makeError("--schedule auto: no schedule fits: " + others);
  const ScheduleCandidate &picked = choice.candidates[*best];
  choice.explanation =
      llvm::formatv(
          "--schedule auto picked {0}: simulated step {1} (bubble "
          "{2:f1}%, at most {3} microbatches' activations per rank) "
          "with {4}; the others (step, activations): {5}",
          scheduleName(picked.kind), shortNumber(picked.stats.makespan),
          100 * picked.stats.bubble, peakOf(picked.stats), costsFrom, others)
          .str();
  return choice;
}

void printGrid(const Schedule &schedule, llvm::raw_ostream &os) {
  const Placement &placement = schedule.placement;
  std::vector<std::vector<Action>> devices = computeActions(schedule);
  size_t width = 1;
  for (const std::vector<Action> &actions : devices)
    for (const Action &a : actions)
      width = std::max(width, a.cell().size());
  EdgeIndex index(schedule);
  UnitTimeline timeline(schedule.edges, index, placement.numStages(),
                        schedule.microbatches);
  llvm::Error err = timeline.run(devices, "rank");
  std::string title = schedule.origin.empty()
                          ? scheduleName(schedule.kind).str()
                          : "'" + schedule.origin + "'";
  os << llvm::formatv("{0}{1}: {2} stages on {3} ranks, {4} microbatches, {5} "
                      "time steps (F=1 B=2 I=1 W=1)\n",
                      title, schedule.training ? "" : " (inference)",
                      placement.numStages(), placement.worldSize(),
                      schedule.microbatches,
                      static_cast<int64_t>(timeline.length));
  if (err) {
    os << "no grid: " << llvm::toString(std::move(err)) << "\n";
    return;
  }
  std::string lastLabel = "rank " + std::to_string(placement.worldSize() - 1);
  for (int r = 0; r < placement.worldSize(); ++r) {
    // Unit times are whole numbers, exact in a double.
    std::vector<std::string> cells(static_cast<size_t>(timeline.length), ".");
    for (size_t i = 0; i < devices[r].size(); ++i)
      for (int t = 0; t < actionInfo(devices[r][i].kind).unitTime; ++t)
        cells[static_cast<size_t>(timeline.start[r][i]) + t] =
            devices[r][i].cell();
    std::string line = "rank " + std::to_string(r) + ":";
    line.resize(lastLabel.size() + 1, ' ');
    for (const std::string &cell : cells) {
      line += ' ';
      line += cell;
      line.append(width - cell.size(), ' ');
    }
    os << llvm::StringRef(line).rtrim(' ') << "\n";
  }
  if (!schedule.training)
    return;
  os << "peak activations:";
  std::vector<int> peak = peakActivations(schedule);
  for (size_t s = 0; s < peak.size(); ++s)
    os << " stage" << s << "=" << peak[s];
  os << "\n";
}

void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os) {
  const std::vector<Action> &actions = schedule.ranks[rank];
  for (size_t i = 0; i < actions.size(); ++i)
    os << "schedule: rank=" << rank << " " << i << " "
       << actions[i].str(schedule.edges) << "\n";
}

} // namespace ppc
