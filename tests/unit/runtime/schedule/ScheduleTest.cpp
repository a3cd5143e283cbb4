//===- tests/unit/runtime/schedule/ScheduleTest.cpp - Schedules as data ---===//
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/Build.h"
#include "runtime/schedule/Grid.h"
#include "runtime/schedule/ScheduleCSV.h"
#include "runtime/schedule/ScheduleStats.h"
#include "runtime/schedule/Simulate.h"
#include "tests/unit/runtime/schedule/ScheduleBuilders.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

using namespace ppc;
using ppc::test::chain;
using ppc::test::computeOrder;
using ppc::test::fixture;

namespace {
std::string errorOf(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}
} // namespace

TEST(PlacementTest, StageCountMustBeAMultipleOfWorldSize) {
  EXPECT_TRUE(static_cast<bool>(Placement::create(4, 2)));
  EXPECT_TRUE(static_cast<bool>(Placement::create(3, 3)));
  auto bad = Placement::create(4, 3);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(
      llvm::toString(bad.takeError()),
      "4 stages cannot be placed on WORLD_SIZE=3 ranks: the stage count must "
      "equal WORLD_SIZE or be a multiple of it (4 stages run on 1, 2 or 4 "
      "ranks)");
  EXPECT_EQ(rankCountsText(1), "1 rank");
  EXPECT_EQ(rankCountsText(3), "1 or 3 ranks");
  EXPECT_EQ(rankCountsText(12), "1, 2, 3, 4, 6 or 12 ranks");
  auto fewer = Placement::create(2, 4);
  ASSERT_FALSE(static_cast<bool>(fewer));
  llvm::consumeError(fewer.takeError());
}

TEST(PlacementTest, RoundRobin) {
  Placement p = *Placement::create(6, 3);
  EXPECT_EQ(p.rankOf(4), 1);
  EXPECT_EQ(p.outputRank(), 2);
  EXPECT_EQ(p.rankOf(6), 2); // the collector
  EXPECT_EQ(p.stagesOf(1), (std::vector<int>{1, 4}));
  EXPECT_EQ(p.describe(),
            "6 stages on 3 ranks: rank 0 [0,3], rank 1 [1,4], rank 2 [2,5]");
}

TEST(ScheduleTest, EdgesIncludeSkipsAndOutputs) {
  Manifest m = chain(4, {{0, 3}});
  auto edges = boundaryEdges(m);
  ASSERT_TRUE(static_cast<bool>(edges));
  ASSERT_EQ(edges->size(), 5u);
  EXPECT_EQ((*edges)[1].producer, 0);
  EXPECT_EQ((*edges)[1].consumer, 3);
  EXPECT_EQ((*edges)[1].outputs, std::vector<int>{1});
  EXPECT_TRUE((*edges)[4].collector);
}

TEST(ScheduleTest, GeneratedSchedulesSimulateCleanly) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (auto [stages, world] : std::vector<std::pair<int, int>>{
             {1, 1}, {2, 2}, {3, 3}, {4, 4}, {4, 2}, {6, 2}, {6, 3}, {8, 2}})
      for (int micro : {1, 2, 3, 8}) {
        Manifest m =
            chain(stages,
                  stages > 2 ? std::vector<std::pair<int, int>>{{0, stages - 1},
                                                                {1, 2}}
                             : std::vector<std::pair<int, int>>{});
        auto s =
            buildSchedule(m, *Placement::create(stages, world), kind, micro);
        ASSERT_TRUE(static_cast<bool>(s));
        EXPECT_EQ(errorOf(simulateSchedule(*s)), "")
            << scheduleName(kind).str() << " " << stages << "/" << world
            << " M=" << micro;
      }
}

// A model output made on another rank than the last stage's travels to the
// collector: a RECV_F of the collector pseudo-stage on the output rank.
TEST(ScheduleTest, ModelOutputsFromOtherRanksReachTheCollector) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (auto [stages, world] :
         std::vector<std::pair<int, int>>{{2, 2}, {3, 3}, {4, 2}}) {
      Manifest m = chain(stages);
      m.modelOutputs.push_back(ValueRef::fromStage(0, 1));
      auto s = buildSchedule(m, *Placement::create(stages, world), kind, 3);
      ASSERT_TRUE(static_cast<bool>(s));
      EXPECT_EQ(errorOf(simulateSchedule(*s)), "")
          << scheduleName(kind).str() << " " << stages << "/" << world;
      int out = s->placement.outputRank(), collector = stages;
      EXPECT_TRUE(llvm::any_of(s->ranks[out], [&](const Action &a) {
        return a.kind == ActionKind::RecvF && a.stage == collector;
      }));
    }
}

TEST(ScheduleTest, OneFOneBInterleavesStagesOnARank) {
  Manifest m = chain(4);
  auto s =
      buildSchedule(m, *Placement::create(4, 2), ScheduleKind::OneFOneB, 3);
  ASSERT_TRUE(static_cast<bool>(s));
  std::string text;
  llvm::raw_string_ostream os(text);
  printSchedule(*s, 0, os);
  // Rank 0 holds stages 0 and 2: stage 2 of microbatch 0 runs before
  // stage 0 of microbatch 2 (clock 2, later stage first).
  EXPECT_EQ(os.str(), "schedule: rank=0 0 F stage=0 mb=0\n"
                      "schedule: rank=0 1 SEND_F 0->1 mb=0 to=1\n"
                      "schedule: rank=0 2 F stage=0 mb=1\n"
                      "schedule: rank=0 3 SEND_F 0->1 mb=1 to=1\n"
                      "schedule: rank=0 4 RECV_F 1->2 mb=0 from=1\n"
                      "schedule: rank=0 5 F stage=2 mb=0\n"
                      "schedule: rank=0 6 SEND_F 2->3 mb=0 to=1\n"
                      "schedule: rank=0 7 F stage=0 mb=2\n"
                      "schedule: rank=0 8 SEND_F 0->1 mb=2 to=1\n"
                      "schedule: rank=0 9 RECV_F 1->2 mb=1 from=1\n"
                      "schedule: rank=0 10 F stage=2 mb=1\n"
                      "schedule: rank=0 11 SEND_F 2->3 mb=1 to=1\n"
                      "schedule: rank=0 12 RECV_F 1->2 mb=2 from=1\n"
                      "schedule: rank=0 13 F stage=2 mb=2\n"
                      "schedule: rank=0 14 SEND_F 2->3 mb=2 to=1\n");
}

TEST(ScheduleTest, GPipeRunsStageByStage) {
  Manifest m = chain(4);
  auto s = buildSchedule(m, *Placement::create(4, 2), ScheduleKind::GPipe, 2);
  ASSERT_TRUE(static_cast<bool>(s));
  std::vector<std::string> forwards;
  for (const Action &a : s->ranks[1])
    if (a.kind == ActionKind::Forward || a.kind == ActionKind::Output)
      forwards.push_back(a.str(s->edges));
  EXPECT_EQ(forwards, (std::vector<std::string>{
                          "F stage=1 mb=0", "F stage=1 mb=1", "F stage=3 mb=0",
                          "F stage=3 mb=1", "OUT mb=0", "OUT mb=1"}));
}

TEST(ScheduleTest, SimulatorFindsDeadlock) {
  Manifest m = chain(2);
  auto s = buildSchedule(m, *Placement::create(2, 2), ScheduleKind::GPipe, 1);
  ASSERT_TRUE(static_cast<bool>(s));
  // Rank 0 waits for a message from rank 1 that rank 1 only sends after
  // hearing from rank 0.
  Schedule bad = *s;
  bad.ranks[0].insert(bad.ranks[0].begin(),
                      Action{ActionKind::RecvF, 1, 0, 1, 1});
  bad.ranks[1].push_back(Action{ActionKind::SendF, 1, 0, 1, 0});
  std::string err = errorOf(simulateSchedule(bad));
  EXPECT_EQ(
      err.rfind(
          "schedule deadlocks: rank 0 waits at RECV_F 1->out mb=0 from=1; "
          "rank 1 waits at RECV_F 0->1 mb=0 from=0",
          0),
      0u)
      << err;
}

TEST(ScheduleTest, SimulatorFindsMissingInputAndOrder) {
  Manifest m = chain(2);
  auto s = buildSchedule(m, *Placement::create(2, 2), ScheduleKind::GPipe, 2);
  ASSERT_TRUE(static_cast<bool>(s));
  Schedule noRecv = *s;
  noRecv.ranks[1].erase(noRecv.ranks[1].begin()); // RECV_F 0->1 mb=0
  EXPECT_EQ(
      errorOf(simulateSchedule(noRecv)),
      "schedule runs F stage=1 mb=0 on rank 1 before its input from stage 0");

  Schedule swapped = *s;
  // Rank 1 receives microbatch 1 first.
  std::swap(swapped.ranks[1][0].microbatch, swapped.ranks[1][2].microbatch);
  EXPECT_EQ(
      errorOf(simulateSchedule(swapped)),
      "schedule: messages on edge 0->1 arrive as mb=0 but rank 1 expects mb=1");
}

// Building and simulating cost O(actions): a 100k-stage chain (100k edges)
// takes well under a second; scanning every edge per action (as an
// earlier version did) took hours.
TEST(ScheduleTest, LargeManifestsScheduleInNearLinearTime) {
  for (int stages : {1000, 10000, 100000}) {
    Manifest m = chain(stages);
    auto start = std::chrono::steady_clock::now();
    auto s = buildSchedule(m, *Placement::create(stages, 2),
                           ScheduleKind::OneFOneB, 4);
    ASSERT_TRUE(static_cast<bool>(s));
    EXPECT_EQ(errorOf(simulateSchedule(*s)), "");
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    RecordProperty("seconds_" + std::to_string(stages),
                   std::to_string(seconds));
    EXPECT_LT(seconds, 10.0) << stages << " stages";
  }
}

//===----------------------------------------------------------------------===//
// Training schedules
//===----------------------------------------------------------------------===//

namespace {
/// Three stages where stage 0's single output feeds both stage 1 and
/// stage 2 (a skip connection over stage 1).
Manifest fanOut() {
  Manifest m = chain(3);
  StageInput in;
  in.name = "skip";
  in.source = ValueRef::fromStage(0, 0);
  m.stages[2].inputs.push_back(in);
  m.stages[0].outputs[0].consumers.push_back(2);
  return m;
}

/// Every rank's compute actions as cells ("0F0 0F1 ..."), one string per
/// rank.
/// Stage s's compute actions as cells, in order.
std::vector<std::string> stageOrder(const Schedule &s, int stage) {
  std::vector<std::string> out;
  for (const Action &a : s.ranks[s.placement.rankOf(stage)])
    if (a.isCompute() && a.stage == stage)
      out.push_back(a.cell());
  return out;
}

/// Whether `kind` takes `stages` stages on `world` ranks and `micro`
/// microbatches (the refusals are tested on their own).
bool applies(ScheduleKind kind, int stages, int world, int micro) {
  switch (kind) {
  case ScheduleKind::Interleaved1F1B:
    return stages >= 2 * world;
  case ScheduleKind::InterleavedZeroBubble:
    return micro % std::max(1, micro / world) == 0;
  case ScheduleKind::ZeroBubbleV:
    return stages == 2 * world;
  case ScheduleKind::DualPipeV:
    return stages == 2 * world && micro >= stages;
  default:
    return true;
  }
}

/// The training schedule `kind` on its own placement (Schedules.def).
Schedule training(const Manifest &m, int stages, int world, ScheduleKind kind,
                  int micro) {
  auto s = buildTrainingSchedule(
      m, *Placement::create(stages, world, schedulePlacement(kind)), kind,
      micro);
  EXPECT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  return *s;
}

std::string csvError(const Manifest &m, int stages, int world,
                     llvm::StringRef text, int micro) {
  auto s = trainingScheduleFromCSV(m, *Placement::create(stages, world), text,
                                   micro, "x.csv");
  return s ? std::string() : llvm::toString(s.takeError());
}

const std::vector<std::pair<int, int>> kPlacements = {
    {1, 1}, {2, 1}, {2, 2}, {3, 1}, {3, 3}, {4, 4},
    {4, 2}, {6, 2}, {6, 3}, {8, 2}, {8, 4}};
} // namespace

TEST(ScheduleKindTest, NamesRoundTrip) {
  for (ScheduleKind kind : kAllScheduleKinds)
    EXPECT_EQ(parseScheduleName(scheduleName(kind)), kind);
  EXPECT_EQ(scheduleName(ScheduleKind::Interleaved1F1B), "interleaved-1f1b");
  EXPECT_EQ(scheduleName(ScheduleKind::ZeroBubbleH1), "zb-h1");
  EXPECT_FALSE(parseScheduleName("zb-h2").has_value());
}

TEST(ScheduleTest, InferenceRefusesTrainingKinds) {
  Manifest m = chain(2);
  for (ScheduleKind kind :
       {ScheduleKind::Interleaved1F1B, ScheduleKind::ZeroBubbleH1}) {
    auto s = buildSchedule(m, *Placement::create(2, 2), kind, 2);
    ASSERT_FALSE(static_cast<bool>(s));
    EXPECT_EQ(llvm::toString(s.takeError()),
              "schedule " + scheduleName(kind).str() +
                  " is for training (ppc train); ppc run takes gpipe, 1f1b or "
                  "looped-bfs");
  }
}

TEST(ScheduleTest, TrainingSchedulesSimulateCleanly) {
  for (ScheduleKind kind : kAllScheduleKinds)
    for (auto [stages, world] : kPlacements)
      for (int micro : {1, 2, 3, 4, 5, 7, 8, 12}) {
        if (!applies(kind, stages, world, micro))
          continue;
        Manifest m = chain(stages);
        SCOPED_TRACE(scheduleName(kind).str() + " " + std::to_string(stages) +
                     "/" + std::to_string(world) +
                     " M=" + std::to_string(micro));
        Schedule s = training(m, stages, world, kind, micro);
        EXPECT_TRUE(s.training);
        EXPECT_EQ(errorOf(simulateSchedule(s)), "");
        std::vector<int> peak = peakActivations(s);
        ASSERT_EQ(peak.size(), static_cast<size_t>(stages));
        for (int st = 0; st < stages; ++st) {
          // GPipe holds every microbatch; 1f1b at most P - s; zb-h1 keeps
          // activations until W, up to P on every stage.
          int expected = micro;
          if (kind == ScheduleKind::OneFOneB)
            expected = std::min(micro, stages - st);
          if (kind == ScheduleKind::ZeroBubbleH1)
            expected = std::min(micro, stages);
          if (kind == ScheduleKind::GPipe || kind == ScheduleKind::OneFOneB ||
              kind == ScheduleKind::ZeroBubbleH1 ||
              kind == ScheduleKind::LoopedBFS) {
            EXPECT_EQ(peak[st], expected) << "stage " << st;
          }
        }
      }
}

TEST(ScheduleTest, SkipConnectionsWorkForEveryKind) {
  for (ScheduleKind kind : kAllScheduleKinds)
    for (int world : {1, 3})
      for (int micro : {1, 2, 5}) {
        if (!applies(kind, 3, world, micro))
          continue;
        Manifest m = fanOut();
        Schedule s = training(m, 3, world, kind, micro);
        EXPECT_EQ(errorOf(simulateSchedule(s)), "")
            << scheduleName(kind).str() << " on " << world << " M=" << micro;
      }
  // Longer skips, on ranks holding two stages.
  Manifest m = chain(8, {{0, 7}, {1, 2}, {2, 6}});
  for (ScheduleKind kind : kAllScheduleKinds)
    for (int micro : {1, 3, 8}) {
      if (!applies(kind, 8, 4, micro))
        continue;
      Schedule s = training(m, 8, 4, kind, micro);
      EXPECT_EQ(errorOf(simulateSchedule(s)), "")
          << scheduleName(kind).str() << " M=" << micro;
    }
}

TEST(ScheduleTest, TrainingHasNoCollectorAndMessagesBothWays) {
  Manifest m = chain(2);
  Schedule s = training(m, 2, 2, ScheduleKind::OneFOneB, 2);
  ASSERT_EQ(s.edges.size(), 1u); // 0->1; no 1->out
  EXPECT_EQ(s.channelCount(), 3);
  std::vector<std::string> rank0;
  for (const Action &a : s.ranks[0])
    rank0.push_back(a.str(s.edges));
  EXPECT_EQ(rank0, (std::vector<std::string>{
                       "F stage=0 mb=0", "SEND_F 0->1 mb=0 to=1",
                       "F stage=0 mb=1", "SEND_F 0->1 mb=1 to=1",
                       "RECV_B 0->1 mb=0 from=1", "B stage=0 mb=0",
                       "RECV_B 0->1 mb=1 from=1", "B stage=0 mb=1"}));
  std::vector<std::string> rank1;
  for (const Action &a : s.ranks[1])
    rank1.push_back(a.str(s.edges));
  EXPECT_EQ(rank1,
            (std::vector<std::string>{
                "RECV_F 0->1 mb=0 from=0", "F stage=1 mb=0", "B stage=1 mb=0",
                "SEND_B 0->1 mb=0 to=0", "RECV_F 0->1 mb=1 from=0",
                "F stage=1 mb=1", "B stage=1 mb=1", "SEND_B 0->1 mb=1 to=0"}));
  EXPECT_EQ(channelOf(s, s.ranks[0][1]), 1); // SEND_F
  EXPECT_EQ(channelOf(s, s.ranks[0][4]), 2); // RECV_B
  EXPECT_EQ(channelOf(s, s.ranks[0][0]), -1);
  // SEND_B runs on the consumer's rank as the consumer stage, RECV_B on the
  // producer's rank as the producer stage.
  EXPECT_EQ(s.ranks[1][3].stage, 1);
  EXPECT_EQ(s.ranks[0][4].stage, 0);
}

TEST(ScheduleTest, GPipeRunsAllForwardsThenAllBackwards) {
  Schedule s = training(chain(4), 4, 2, ScheduleKind::GPipe, 2);
  EXPECT_EQ(computeOrder(s),
            (std::vector<std::string>{"0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1",
                                      "1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1"}));
}

TEST(ScheduleTest, OneFOneBIsMegatronsOrder) {
  Schedule s = training(chain(4), 4, 4, ScheduleKind::OneFOneB, 8);
  // Stage 0: 3 warm-up forwards, then F/B pairs, then the cool-down.
  EXPECT_EQ(computeOrder(s)[0],
            "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7");
  EXPECT_EQ(computeOrder(s)[3],
            "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7");
  // Fewer microbatches than stages: every forward is a warm-up one.
  Schedule few = training(chain(4), 4, 4, ScheduleKind::OneFOneB, 2);
  EXPECT_EQ(computeOrder(few)[0], "0F0 0F1 0B0 0B1");
  EXPECT_EQ(peakActivations(few), (std::vector<int>{2, 2, 2, 1}));
}

TEST(ScheduleTest, OneFOneBMergesTheStagesOfARank) {
  // Each stage keeps Megatron's order; a rank runs its stages' actions in
  // the order they start with a device per stage.
  Schedule s = training(chain(4), 4, 2, ScheduleKind::OneFOneB, 6);
  EXPECT_EQ(computeOrder(s)[0], "0F0 0F1 2F0 0F2 2F1 0F3 2B0 2F2 2B1 0B0 2F3 "
                                "2B2 0F4 0B1 2F4 2B3 0F5 0B2 2F5 2B4 0B3 2B5 "
                                "0B4 0B5");
  EXPECT_EQ(stageOrder(s, 0), (std::vector<std::string>{
                                  "0F0", "0F1", "0F2", "0F3", "0B0", "0F4",
                                  "0B1", "0F5", "0B2", "0B3", "0B4", "0B5"}));
  EXPECT_EQ(peakActivations(s), (std::vector<int>{4, 3, 2, 1}));
}

TEST(ScheduleTest, InterleavedNeedsTwoStagesPerRank) {
  Manifest m = chain(2);
  auto s = buildTrainingSchedule(m, *Placement::create(2, 2),
                                 ScheduleKind::Interleaved1F1B, 4);
  ASSERT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(llvm::toString(s.takeError()),
            "interleaved-1f1b needs at least 2 stages per rank (2 stages on 2 "
            "ranks)");
}

TEST(ScheduleTest, InterleavedIsDepthFirst) {
  // 2 ranks x 2 stages (rank 0: stages 0 and 2), M = 4 = 2 rounds of 2:
  // PyTorch's ScheduleInterleaved1F1B order.
  Schedule s = training(chain(4), 4, 2, ScheduleKind::Interleaved1F1B, 4);
  EXPECT_EQ(computeOrder(s),
            (std::vector<std::string>{
                "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 "
                "0B3",
                "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 "
                "1B3"}));
  EXPECT_EQ(peakActivations(s), (std::vector<int>{4, 3, 2, 1}));
  // M = 3 is not a multiple of the 2 ranks (PyTorch refuses it): one round
  // of 3.
  Schedule odd = training(chain(4), 4, 2, ScheduleKind::Interleaved1F1B, 3);
  EXPECT_EQ(computeOrder(odd)[0],
            "0F0 0F1 0F2 2F0 2F1 2F2 2B0 2B1 2B2 0B0 0B1 0B2");
  EXPECT_EQ(errorOf(simulateSchedule(odd)), "");
}

// PyTorch refuses M that is not a multiple of its rounds; ppc spreads the
// microbatches over the rounds. The simulator proves every case deadlock
// free.
TEST(ScheduleTest, InterleavedTakesAnyMicrobatchCount) {
  for (int stages = 2; stages <= 16; ++stages)
    for (int world = 1; world * 2 <= stages; ++world) {
      if (stages % world != 0)
        continue;
      Manifest m = chain(stages);
      for (int micro = 1; micro <= 40; ++micro) {
        Schedule s =
            training(m, stages, world, ScheduleKind::Interleaved1F1B, micro);
        ASSERT_EQ(errorOf(simulateSchedule(s)), "")
            << stages << "/" << world << " M=" << micro;
      }
    }
}

TEST(ScheduleTest, ZeroBubbleDefersWeightGradients) {
  for (int stages : {2, 4})
    for (int micro : {1, 3, 8}) {
      Manifest m = chain(stages);
      Schedule s =
          training(m, stages, stages, ScheduleKind::ZeroBubbleH1, micro);
      ASSERT_EQ(errorOf(simulateSchedule(s)), "");
      for (int st = 0; st < stages; ++st) {
        std::vector<std::string> order = stageOrder(s, st);
        // Every I before its W.
        for (int mb = 0; mb < micro; ++mb) {
          auto at = [&](char kind) {
            return std::find(order.begin(), order.end(),
                             std::to_string(st) + kind + std::to_string(mb)) -
                   order.begin();
          };
          EXPECT_LT(at('I'), at('W')) << st << " " << mb;
          EXPECT_LT(at('W'), static_cast<long>(order.size()));
        }
        // Stage s runs min(M, s+1) I's before its first W: on every stage
        // but the first, the first W's wait (they would follow their I at
        // once otherwise) ...
        auto firstW = std::find_if(order.begin(), order.end(), [](auto &c) {
          return c.find('W') != std::string::npos;
        });
        EXPECT_EQ(std::count_if(
                      order.begin(), firstW,
                      [](auto &c) { return c.find('I') != std::string::npos; }),
                  std::min(micro, st + 1))
            << "stage " << st;
        // ... till the cool-down: the stage's last min(M, s) actions are W's.
        int tail = std::min(micro, st);
        for (int k = 0; k < tail; ++k)
          EXPECT_NE(order[order.size() - 1 - k].find('W'), std::string::npos);
      }
    }
  Schedule s = training(chain(4), 4, 4, ScheduleKind::ZeroBubbleH1, 8);
  EXPECT_EQ(computeOrder(s)[3], "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 "
                                "3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 "
                                "3W6 3W7");
  EXPECT_EQ(computeOrder(s)[0], "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 "
                                "0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 "
                                "0I7 0W7");
  // Activations stay until W: every stage holds up to P microbatches.
  EXPECT_EQ(peakActivations(s), (std::vector<int>{4, 4, 4, 4}));
}

TEST(ScheduleTest, GridShowsUnitTimeSteps) {
  Schedule s = training(chain(2), 2, 2, ScheduleKind::OneFOneB, 2);
  std::string text;
  llvm::raw_string_ostream os(text);
  printGrid(s, os);
  EXPECT_EQ(os.str(), "1f1b: 2 stages on 2 ranks, 2 microbatches, 9 time steps "
                      "(F=1 B=2 I=1 W=1)\n"
                      "rank 0: 0F0 0F1 .   .   0B0 0B0 .   0B1 0B1\n"
                      "rank 1: .   1F0 1B0 1B0 1F1 1B1 1B1 .   .\n"
                      "peak activations: stage0=2 stage1=1\n");
}

TEST(ScheduleCSVTest, RoundTrips) {
  for (ScheduleKind kind : kAllScheduleKinds)
    for (auto [stages, world] : kPlacements)
      for (int micro : {1, 3, 8}) {
        if (!applies(kind, stages, world, micro))
          continue;
        Manifest m = chain(stages);
        Schedule s = training(m, stages, world, kind, micro);
        std::string csv = scheduleToCSV(s);
        auto back =
            trainingScheduleFromCSV(m, s.placement, csv, micro, "x.csv");
        ASSERT_TRUE(static_cast<bool>(back))
            << llvm::toString(back.takeError());
        EXPECT_EQ(computeOrder(*back), computeOrder(s));
        EXPECT_EQ(back->ranks.size(), s.ranks.size());
        for (size_t r = 0; r < s.ranks.size(); ++r)
          EXPECT_EQ(back->ranks[r].size(), s.ranks[r].size());
      }
}

TEST(ScheduleCSVTest, WritesPyTorchsLayout) {
  Schedule s = training(chain(2), 2, 2, ScheduleKind::ZeroBubbleH1, 2);
  EXPECT_EQ(scheduleToCSV(s), "0F0,0F1,0I0,0W0,0I1,0W1\r\n"
                              "1F0,1I0,1F1,1I1,1W0,1W1\r\n");
}

TEST(ScheduleCSVTest, ReadsPyTorchsDump) {
  // What ScheduleInterleaved1F1B's _dump_csv(format="compute_only") writes
  // for 2 ranks of one stage each and 4 microbatches: None slots as empty
  // cells, "\r\n" line ends.
  Manifest m = chain(2);
  auto s = trainingScheduleFromCSV(m, *Placement::create(2, 2),
                                   fixture("pytorch_2stages_4mb.csv"), 4,
                                   "pytorch_2stages_4mb.csv");
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(computeOrder(*s),
            (std::vector<std::string>{"0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3",
                                      "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"}));
  EXPECT_EQ(peakActivations(*s), (std::vector<int>{3, 1}));
  EXPECT_EQ(s->origin, "pytorch_2stages_4mb.csv");
  // The same with "\n" line ends, blanks and quoted cells.
  EXPECT_EQ(csvError(m, 2, 2,
                     "0F0, 0F1,\"\",0F2,\"0B0\",0F3,0B1,0B2,0B3\n"
                     "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3",
                     4),
            "");
}

TEST(ScheduleCSVTest, RejectsDeadlocksAndMissingActions) {
  Manifest m = chain(2);
  EXPECT_EQ(csvError(m, 2, 2, fixture("deadlock.csv"), 2),
            "schedule 'x.csv' deadlocks: rank 0 waits at 0B0 for the gradients "
            "of stage 0 -> 1 from rank 1; rank 1 waits at 1F1 for the outputs "
            "of stage 0 -> 1 from rank 0");
  EXPECT_EQ(csvError(m, 2, 2, fixture("missing.csv"), 2),
            "schedule 'x.csv' misses B stage=1 mb=1");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B0\r\n", 2),
            "schedule 'x.csv' runs 1B0 twice");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0F1,0B0,0I1,0W1\r\n1F0,1B0,1F1,1B1\r\n", 2),
            "");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0F1,0B0,0I1,0B1\r\n1F0,1B0,1F1,1B1\r\n", 2),
            "schedule 'x.csv' runs both 0B1 and 0I1");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0F1,0B0,0I1\r\n1F0,1B0,1F1,1B1\r\n", 2),
            "schedule 'x.csv' misses W stage=0 mb=1");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0F1,0B0,0W1,0I1\r\n1F0,1B0,1F1,1B1\r\n", 2),
            "schedule 'x.csv' runs W stage=0 mb=1 on rank 0 before I stage=0 "
            "mb=1");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0B0,0F1,0B1\r\n1B0,1F0,1F1,1B1\r\n", 2),
            "schedule 'x.csv' runs B stage=1 mb=0 on rank 1 before F stage=1 "
            "mb=0");
  // Stage 1 runs its forwards in another order than stage 0 sends them.
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0F1,0B0,0B1\r\n1F1,1F0,1B0,1B1\r\n", 2),
            "schedule 'x.csv': messages on edge 0->1 arrive as mb=0 but rank 1 "
            "expects mb=1");
  // Both stages on one rank: no messages, local order only.
  EXPECT_EQ(csvError(m, 2, 1, "0F0,0B0,1F0,1B0\r\n", 1),
            "schedule 'x.csv' runs B stage=0 mb=0 on rank 0 before its "
            "gradients from stage 1");
}

TEST(ScheduleCSVTest, RejectsMalformedText) {
  Manifest m = chain(2);
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0B0\r\n1F0,1X0\r\n", 1),
            "schedule 'x.csv' row 2 (rank 1), cell 2: '1X0' is not a compute "
            "action like 0F1, 1B0, 0I3 or 0W3, nor a compute_comms action like "
            "1RECV_F0 or 0SEND_B2");
  EXPECT_EQ(csvError(m, 2, 2, "0F1234567890\r\n", 1),
            "schedule 'x.csv' row 1 (rank 0), cell 1: '0F1234567890' is not a "
            "compute action like 0F1, 1B0, 0I3 or 0W3, nor a compute_comms "
            "action like 1RECV_F0 or 0SEND_B2");
  EXPECT_EQ(csvError(m, 2, 2, "\"0F0,0B0\"\r\n", 1),
            "schedule 'x.csv' row 1 (rank 0), cell 1: '\"0F0' is not a compute "
            "action like 0F1, 1B0, 0I3 or 0W3, nor a compute_comms action like "
            "1RECV_F0 or 0SEND_B2");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,4B0\r\n", 1),
            "schedule 'x.csv' row 1 (rank 0), cell 2: stage 4 is out of range "
            "(2 stages)");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0B1\r\n", 1),
            "schedule 'x.csv' row 1 (rank 0), cell 2: microbatch 1 is out of "
            "range (1 microbatch)");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,,1F0\r\n", 1),
            "schedule 'x.csv' row 1 (rank 0), cell 3: stage 1 runs on rank 1 "
            "(stage k on rank k mod 2), not on rank 0");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0B0\r\n1F0,1B0\r\n\r\n", 1),
            "schedule 'x.csv' has more than 2 rows; expected one per rank");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0B0\r\n", 1),
            "schedule 'x.csv' has 1 row; expected one per rank (2)");
  EXPECT_EQ(csvError(m, 2, 2, "", 1),
            "schedule 'x.csv' has 0 rows; expected one per rank (2)");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0I0,0W0,0B0\r\n", 1),
            "schedule 'x.csv' row 1 (rank 0) has more than 3 actions (3 per "
            "stage and microbatch)");
  EXPECT_EQ(csvError(m, 2, 2, "0F0,0B0\r\n1F0,1B0\r\n", 0),
            "microbatches 0 is not an integer in 1..65536");
  EXPECT_EQ(csvError(chain(3), 2, 2, "0F0,0B0\r\n1F0,1B0\r\n", 1),
            "the placement has 2 stages but the manifest 3");
}

TEST(ScheduleTest, SimulatorChecksTrainingMessages) {
  Manifest m = chain(2);
  Schedule s = training(m, 2, 2, ScheduleKind::OneFOneB, 2);
  Schedule wrongRank = s;
  // SEND_B 0->1 mb=0 moved from rank 1 to rank 0.
  wrongRank.ranks[0].insert(wrongRank.ranks[0].begin(), s.ranks[1][3]);
  wrongRank.ranks[1].erase(wrongRank.ranks[1].begin() + 3);
  EXPECT_EQ(errorOf(simulateSchedule(wrongRank)),
            "schedule: rank 0 has SEND_B 0->1 mb=0 to=0, which belongs on "
            "rank 1 with stage 1 and peer rank 0");
  Schedule noSend = s;
  noSend.ranks[1].pop_back(); // SEND_B 0->1 mb=1
  EXPECT_EQ(errorOf(simulateSchedule(noSend)),
            "schedule deadlocks: rank 0 waits at 0B1 for the gradients of "
            "stage 0 -> 1 from rank 1");
  Schedule reordered = s;
  reordered.ranks[1].erase(reordered.ranks[1].begin() + 3); // mb=0's
  EXPECT_EQ(errorOf(simulateSchedule(reordered)),
            "schedule: gradients on edge 0->1 arrive as mb=1 but rank 0 "
            "expects mb=0");
  Schedule early = s;
  // SEND_B before the B that computes it.
  std::swap(early.ranks[1][2], early.ranks[1][3]);
  EXPECT_EQ(errorOf(simulateSchedule(early)),
            "schedule sends SEND_B 0->1 mb=0 to=0 on rank 1 before it ran the "
            "stage's backward");
  Schedule extra = s;
  extra.ranks[1].push_back(s.ranks[1][3]);
  EXPECT_EQ(errorOf(simulateSchedule(extra)),
            "schedule: rank 0 never receives SEND_B 0->1 mb=0");
  Schedule out = s;
  out.ranks[1].push_back(Action{ActionKind::Output, 2, 0});
  EXPECT_EQ(errorOf(simulateSchedule(out)),
            "schedule has OUT mb=0 on rank 1; training schedules have no "
            "collector");
  Schedule range = s;
  range.ranks[1].push_back(Action{ActionKind::Forward, 5, 0});
  EXPECT_EQ(errorOf(simulateSchedule(range)),
            "schedule: rank 1 action 8 is out of range (stage 5, mb 0, edge "
            "-1; 2 stages, 2 microbatches, 1 edges)");
  Schedule inference =
      *buildSchedule(m, *Placement::create(2, 2), ScheduleKind::GPipe, 1);
  inference.ranks[1].push_back(Action{ActionKind::Backward, 1, 0});
  EXPECT_EQ(errorOf(simulateSchedule(inference)),
            "schedule: rank 1 action 3 is a training action in an inference "
            "schedule");
}

// Training schedules cost O(actions) too, even with the per-stage timing
// that orders the 1f1b and zb-h1 actions of ranks holding many stages.
TEST(ScheduleTest, LargeTrainingSchedulesAreFast) {
  Manifest m = chain(20000);
  for (ScheduleKind kind : kAllScheduleKinds) {
    if (!applies(kind, 20000, 4, 8))
      continue;
    auto start = std::chrono::steady_clock::now();
    Schedule s = training(m, 20000, 4, kind, 8);
    EXPECT_EQ(errorOf(simulateSchedule(s)), "");
    std::vector<int> peak = peakActivations(s);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    EXPECT_LT(seconds, 10.0) << scheduleName(kind).str();
  }
}

TEST(PlacementTest, VZigZagsOverTheRanks) {
  Placement v = *Placement::create(4, 2, "v");
  EXPECT_EQ(v.stagesOf(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(v.stagesOf(1), (std::vector<int>{1, 2}));
  EXPECT_EQ(v.outputRank(), 0);
  EXPECT_EQ(v.rankOf(4), 0); // the collector
  EXPECT_FALSE(v.isLoop());
  EXPECT_EQ(v.describe(), "4 stages on 2 ranks: rank 0 [0,3], rank 1 [1,2]");
  // More stages per rank continue the zig-zag.
  Placement six = *Placement::create(6, 2, "v");
  EXPECT_EQ(six.stagesOf(0), (std::vector<int>{0, 3, 4}));
  EXPECT_EQ(six.stagesOf(1), (std::vector<int>{1, 2, 5}));
  // One stage per rank: the same table as loop.
  EXPECT_TRUE(Placement::create(3, 3, "v")->isLoop());
  EXPECT_EQ(placementStyleNames(), (std::vector<llvm::StringRef>{"loop", "v"}));
  auto bad = Placement::create(4, 2, "w");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "unknown placement 'w' (expected loop or v)");
}

TEST(ScheduleTest, GPipeAndOneFOneBRunOnAVPlacement) {
  for (auto [stages, world] :
       std::vector<std::pair<int, int>>{{4, 2}, {6, 3}, {8, 2}, {8, 4}, {6, 2}})
    for (int micro : {1, 3, 8})
      for (const Manifest &m :
           {chain(stages), chain(stages, {{0, stages - 1}})}) {
        Placement v = *Placement::create(stages, world, "v");
        for (ScheduleKind kind :
             {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
          auto s = buildSchedule(m, v, kind, micro);
          ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
          EXPECT_EQ(errorOf(simulateSchedule(*s)), "")
              << scheduleName(kind).str() << " " << stages << "/" << world;
        }
        for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                  ScheduleKind::ZeroBubbleH1}) {
          auto s = buildTrainingSchedule(m, v, kind, micro);
          ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
          EXPECT_EQ(errorOf(simulateSchedule(*s)), "")
              << scheduleName(kind).str() << " " << stages << "/" << world;
        }
      }
}

TEST(ScheduleTest, InterleavedNeedsTheLoopPlacement) {
  auto s = buildTrainingSchedule(chain(4), *Placement::create(4, 2, "v"),
                                 ScheduleKind::Interleaved1F1B, 4);
  ASSERT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(llvm::toString(s.takeError()),
            "interleaved-1f1b needs the loop placement, not placement v");
}

TEST(ScheduleKindTest, NamesComeFromTheRegistry) {
  EXPECT_EQ(scheduleNames(/*inferenceOnly=*/true), "gpipe, 1f1b or looped-bfs");
  EXPECT_EQ(scheduleNames(/*inferenceOnly=*/false),
            "gpipe, 1f1b, interleaved-1f1b, zb-h1, looped-bfs, interleaved-zb, "
            "zbv or dualpipev");
  EXPECT_EQ(scheduleNames(/*inferenceOnly=*/false, "|"),
            "gpipe|1f1b|interleaved-1f1b|zb-h1|looped-bfs|interleaved-zb|zbv|"
            "dualpipev");
  EXPECT_TRUE(scheduleRunsInference(ScheduleKind::OneFOneB));
  EXPECT_FALSE(scheduleRunsInference(ScheduleKind::ZeroBubbleH1));
  EXPECT_EQ(scheduleHelp(ScheduleKind::ZeroBubbleH1), "B split into I and W");
}

TEST(ActionKindTest, TableGivesNamesLettersCategoriesAndTimes) {
  EXPECT_EQ(actionInfo(ActionKind::SendF).name, "SEND_F");
  EXPECT_EQ(actionInfo(ActionKind::RecvB).category, "recv");
  EXPECT_EQ(actionInfo(ActionKind::Output).category, "other");
  EXPECT_EQ(actionInfo(ActionKind::BackwardInput).letter, 'I');
  EXPECT_EQ(actionInfo(ActionKind::SendB).letter, 0);
  EXPECT_EQ(actionInfo(ActionKind::Backward).unitTime, 2);
  EXPECT_EQ(actionInfo(ActionKind::Forward).unitTime, 1);
  EXPECT_EQ(actionInfo(ActionKind::RecvF).unitTime, 0);
  std::vector<Edge> edges = {{0, 1, {0}, false}, {1, 2, {0}, true}};
  EXPECT_EQ((Action{ActionKind::BackwardWeight, 1, 0}.str(edges)),
            "W stage=1 mb=0");
  EXPECT_EQ((Action{ActionKind::SendB, 1, 2, 0, 0}.str(edges)),
            "SEND_B 0->1 mb=2 to=0");
  EXPECT_EQ((Action{ActionKind::RecvF, 2, 1, 1, 1}.str(edges)),
            "RECV_F 1->out mb=1 from=1");
  EXPECT_EQ((Action{ActionKind::Output, 2, 3}.str(edges)), "OUT mb=3");
  EXPECT_EQ((Action{ActionKind::BackwardInput, 3, 4}.cell()), "3I4");
  EXPECT_EQ((Action{ActionKind::SendF, 3, 4, 0, 1}.cell()), "");
}

TEST(ScheduleCSVTest, AVPlacedCSVSimulatesAndPrints) {
  Manifest m = chain(4);
  Schedule built = *buildTrainingSchedule(m, *Placement::create(4, 2, "v"),
                                          ScheduleKind::OneFOneB, 2);
  std::string csv = scheduleToCSV(built);
  auto placement = placementFromCSV(csv, 4, 2, "v.csv");
  ASSERT_TRUE(static_cast<bool>(placement))
      << llvm::toString(placement.takeError());
  EXPECT_EQ(placement->describe(),
            "4 stages on 2 ranks: rank 0 [0,3], rank 1 [1,2]");
  auto s = trainingScheduleFromCSV(m, *placement, csv, 2, "v.csv");
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(computeOrder(*s), computeOrder(built));
  std::string text;
  llvm::raw_string_ostream os(text);
  printGrid(*s, os);
  EXPECT_EQ(
      os.str(),
      "'v.csv': 4 stages on 2 ranks, 2 microbatches, 16 time steps "
      "(F=1 B=2 I=1 W=1)\n"
      "rank 0: 0F0 0F1 .   3F0 3B0 3B0 3F1 3B1 3B1 .   0B0 0B0 .   .   "
      "0B1 0B1\n"
      "rank 1: .   1F0 2F0 1F1 2F1 .   2B0 2B0 1B0 1B0 2B1 2B1 1B1 1B1 .   "
      ".\n"
      "peak activations: stage0=2 stage1=2 stage2=2 stage3=1\n");
  // The loop placement refuses the same file, naming its rule.
  EXPECT_EQ(csvError(m, 4, 2, csv, 2),
            "schedule 'x.csv' row 1 (rank 0), cell 3: stage 3 runs on rank 1 "
            "(stage k on rank k mod 2), not on rank 0");
}

TEST(ScheduleCSVTest, PlacementComesFromTheRows) {
  auto error = [](llvm::StringRef text, int stages, int world) {
    auto p = placementFromCSV(text, stages, world, "x.csv");
    return p ? p->describe() : llvm::toString(p.takeError());
  };
  EXPECT_EQ(error("1F0,1B0\r\n0F0,0B0\r\n", 2, 2),
            "2 stages on 2 ranks: rank 0 [1], rank 1 [0]");
  EXPECT_EQ(error("0F0,1F0\r\n1B0\r\n", 2, 2),
            "schedule 'x.csv' row 2 (rank 1), cell 1: stage 1 already runs on "
            "rank 0 (row 1)");
  EXPECT_EQ(error("0F0,0B0\r\n0F1\r\n", 2, 2),
            "schedule 'x.csv' row 2 (rank 1), cell 1: stage 0 already runs on "
            "rank 0 (row 1)");
  EXPECT_EQ(error("0F0,0B0\r\n\r\n", 2, 2),
            "schedule 'x.csv' runs no action of stage 1");
  EXPECT_EQ(error("0F0,1F0\r\n\r\n", 2, 2),
            "schedule 'x.csv' row 2 (rank 1) runs no stage");
  EXPECT_EQ(error("0F0\r\n1X0\r\n", 2, 2),
            "schedule 'x.csv' row 2 (rank 1), cell 1: '1X0' is not a compute "
            "action like 0F1, 1B0, 0I3 or 0W3, nor a compute_comms action like "
            "1RECV_F0 or 0SEND_B2");
  EXPECT_EQ(error("0F0\r\n5F0\r\n", 2, 2),
            "schedule 'x.csv' row 2 (rank 1), cell 1: stage 5 is out of range "
            "(2 stages)");
  EXPECT_EQ(error("0F0\r\n", 2, 2),
            "schedule 'x.csv' has 1 row; expected one per rank (2)");
}
