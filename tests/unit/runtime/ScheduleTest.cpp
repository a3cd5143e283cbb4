//===- tests/unit/runtime/ScheduleTest.cpp - Schedules as data ------------===//
#include "runtime/Schedule.h"

#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <chrono>

using namespace ppc;

namespace {
/// A chain of `n` stages (stage s takes output 0 of stage s-1), plus skip
/// edges (from, to): stage `to` also takes output 1 of stage `from`.
Manifest chain(int n, std::vector<std::pair<int, int>> skips = {}) {
  Manifest m;
  m.modelInputs.push_back({"x", ValueKind::Tensor});
  for (int s = 0; s < n; ++s) {
    StageInfo info;
    info.index = s;
    info.file = "stage_" + std::to_string(s) + ".pt";
    StageInput in;
    in.name = "x";
    in.source =
        s == 0 ? ValueRef::fromModelInput(0) : ValueRef::fromStage(s - 1, 0);
    info.inputs.push_back(in);
    info.outputs.push_back({"y", ValueKind::Tensor, {}});
    info.outputs.push_back({"skip", ValueKind::Tensor, {}});
    if (s + 1 < n)
      info.outputs[0].consumers.push_back(s + 1);
    m.stages.push_back(info);
  }
  for (auto [from, to] : skips) {
    StageInput in;
    in.name = "skip";
    in.source = ValueRef::fromStage(from, 1);
    m.stages[to].inputs.push_back(in);
    m.stages[from].outputs[1].consumers.push_back(to);
  }
  m.modelOutputs.push_back(ValueRef::fromStage(n - 1, 0));
  return m;
}

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
      "equal WORLD_SIZE or be a multiple of it");
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
        EXPECT_EQ(errorOf(simulateSchedule(m, *s)), "")
            << scheduleName(kind).str() << " " << stages << "/" << world
            << " M=" << micro;
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
  std::string err = errorOf(simulateSchedule(m, bad));
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
      errorOf(simulateSchedule(m, noRecv)),
      "schedule runs F stage=1 mb=0 on rank 1 before its input from stage 0");

  Schedule swapped = *s;
  // Rank 1 receives microbatch 1 first.
  std::swap(swapped.ranks[1][0].microbatch, swapped.ranks[1][2].microbatch);
  EXPECT_EQ(
      errorOf(simulateSchedule(m, swapped)),
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
    EXPECT_EQ(errorOf(simulateSchedule(m, *s)), "");
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    RecordProperty("seconds_" + std::to_string(stages),
                   std::to_string(seconds));
    EXPECT_LT(seconds, 10.0) << stages << " stages";
  }
}
