//===- runtime/schedule/Simulate.cpp - Deadlock simulation ----------------===//
//
// This file implements the deadlock simulator (see Simulate.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Simulate.h"

#include "lib/Error.h"
#include "runtime/schedule/EdgeIndex.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <deque>
#include <string>
#include <vector>

namespace ppc {

namespace {
/// The simulator of Simulate.h. Ranks that can move are kept in a work
/// list; a rank blocked on a receive is woken by the send it waits for, so
/// the simulation costs O(actions), not O(actions x ranks).
class Simulator {
public:
  explicit Simulator(const Schedule &schedule)
      : schedule(schedule), placement(schedule.placement), index(schedule),
        channels(schedule.channelCount()), ran(placement.numStages() + 1),
        grad(placement.numStages() + 1), received(schedule.channelCount()),
        pc(placement.worldSize(), 0), waitingOn(schedule.channelCount(), -1),
        tokenQueues(placement.worldSize()), tokensHeard(placement.worldSize()),
        waitingForTokens(placement.worldSize(), false) {}

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

  static bool isTokenAction(const Action &a) {
    return a.kind == ActionKind::SendTokens || a.kind == ActionKind::RecvTokens;
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
    bool tokens = isTokenAction(a);
    bool stageOk =
        a.stage >= 0 &&
        (a.stage < n ||
         (a.stage == n &&
          (a.kind == ActionKind::Output || a.kind == ActionKind::SendTokens ||
           (a.kind == ActionKind::RecvF && !schedule.training))));
    bool edgeOk =
        !comm || tokens ||
        (a.edge >= 0 && static_cast<size_t>(a.edge) < schedule.edges.size());
    if (tokens && !schedule.tokens)
      return makeError(llvm::formatv("{0}: rank {1} action {2} returns tokens "
                                     "in a schedule that does not decode",
                                     who(), r, i)
                           .str());
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
      case ActionKind::RecvTokens:
        if (tokenQueues[r].empty()) {
          waitingForTokens[r] = true;
          return llvm::Error::success();
        }
        if (tokenQueues[r].front() != a.microbatch)
          return makeError(llvm::formatv("{0}: tokens arrive as mb={1} but "
                                         "rank {2} expects mb={3}",
                                         who(), tokenQueues[r].front(), r,
                                         a.microbatch)
                               .str());
        tokenQueues[r].pop_front();
        mark(tokensHeard[r], a.microbatch);
        break;
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
      case ActionKind::SendTokens:
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
        if (llvm::Error err = tokensReady(r, a))
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
        a.kind == ActionKind::SendF || a.kind == ActionKind::SendTokens
            ? placement.rankOf(a.stage) == r && has(ran[a.stage], a.microbatch)
            : has(grad[a.stage], a.microbatch);
    if (!ready)
      return makeError(
          llvm::formatv("{0} sends {1} on rank {2} before "
                        "it ran the stage{3}",
                        who(), a.str(schedule.edges), r,
                        a.kind == ActionKind::SendB ? "'s backward" : "")
              .str());
    if (a.kind == ActionKind::SendTokens) {
      int to = a.peerRank;
      if (to < 0 || to >= placement.worldSize() || to == r)
        return makeError(llvm::formatv("{0} sends {1} on rank {2} to rank {3}",
                                       who(), a.str(schedule.edges), r, to)
                             .str());
      tokenQueues[to].push_back(a.microbatch);
      if (waitingForTokens[to]) {
        runnable.push_back(to);
        waitingForTokens[to] = false;
      }
      return llvm::Error::success();
    }
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

  /// Decoding: whether a stage of rank r that reads the token input may
  /// run microbatch m, which reads the tokens picked from its group's
  /// previous step: picked on r (its OUT ran) or received.
  llvm::Error tokensReady(int r, const Action &a) {
    const std::optional<TokenReturn> &tokens = schedule.tokens;
    int n = placement.numStages(), m = a.microbatch;
    // Every stage hears the tokens before its F of a fed microbatch: they
    // say whether the step runs (Decode.h).
    if (!tokens || a.kind != ActionKind::Forward || !tokens->fed(m))
      return llvm::Error::success();
    int from = tokens->previous(m);
    bool ready = placement.rankOf(n) == r ? has(ran[n], from)
                                          : has(tokensHeard[r], from);
    if (!ready)
      return makeError(llvm::formatv("{0} runs {1} on rank {2} before the "
                                     "tokens of mb={3}",
                                     who(), a.str(schedule.edges), r, from)
                           .str());
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
    for (int r = 0; r < placement.worldSize(); ++r)
      if (!tokenQueues[r].empty())
        return makeError(llvm::formatv("{0}: rank {1} never receives the "
                                       "tokens of mb={2}",
                                       who(), r, tokenQueues[r].front())
                             .str());
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
    // An evaluation schedule has no collector (Schedule::evaluation).
    const int last = placement.numStages() - (schedule.evaluation ? 1 : 0);
    for (int s = 0; s <= last; ++s)
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
  /// The token channel goes from the collector to several ranks, which the
  /// transport tells apart (tags per channel and peer): per receiving rank,
  /// the microbatches whose tokens are in flight to it and those it heard,
  /// and whether it is blocked on them.
  std::vector<std::deque<int>> tokenQueues;
  std::vector<std::vector<bool>> tokensHeard;
  std::vector<bool> waitingForTokens;
};
} // namespace

llvm::Error simulateSchedule(const Schedule &schedule) {
  return Simulator(schedule).run();
}

} // namespace ppc
