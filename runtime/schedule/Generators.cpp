//===- runtime/schedule/Generators.cpp - Every kind's compute orders ------===//
//
// This file implements the generators of Schedules.def: per kind, every
// rank's compute order (see Generators.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Generators.h"

#include "lib/Error.h"
#include "runtime/schedule/UnitTimeline.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

namespace ppc {

/// Inference: rank r's forwards, and on the output rank the collector's
/// OUTs, in the order of `key(stage, microbatch)` (see Generators.h).
template <typename Key>
static Orders inferenceOrders(const Schedule &schedule, Key key) {
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
static std::vector<Action> oneFOneBStageOrder(int s, int numStages,
                                              int microbatches, bool split) {
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
static llvm::Expected<Orders>
perStageOrders(const Schedule &schedule, const EdgeIndex &index, bool split) {
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
static llvm::Error needPlacement(const Schedule &schedule) {
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
static llvm::Error needTwoStagesOnV(const Schedule &schedule) {
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

} // namespace ppc
