//===- tests/unit/runtime/schedule/ScheduleFamiliesTest.cpp ---------------===//
//
// The schedules ported from torch.distributed.pipelining (looped-bfs,
// interleaved-zb, zbv, dualpipev): their compute orders equal PyTorch's own
// generators' (fixtures written by fixtures/schedule/make_pytorch_csv.py with
// a PyTorch 2.x Python), both CSV layouts read and write, the simulated bubbles
// equal the published formulas at unit costs, every kind's evaluation
// schedule is its forwards alone, and what a schedule cannot run is refused
// in one line.
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/AutoSchedule.h"
#include "runtime/schedule/Build.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleCSV.h"
#include "runtime/schedule/ScheduleStats.h"
#include "runtime/schedule/Simulate.h"
#include "tests/unit/runtime/schedule/ScheduleBuilders.h"

#include <gtest/gtest.h>

using namespace ppc;
using ppc::test::chain;
using ppc::test::computeOrder;
using ppc::test::fixture;

namespace {
/// The kind on its own placement, simulated (`stages` is the manifest's).
llvm::Expected<Schedule> build(const Manifest &m, ScheduleKind kind, int stages,
                               int ranks, int micro) {
  EXPECT_EQ(m.stages.size(), static_cast<size_t>(stages));
  return buildSimulatedTrainingSchedule(m, kind, ranks, micro);
}

Schedule built(const Manifest &m, ScheduleKind kind, int stages, int ranks,
               int micro) {
  auto s = build(m, kind, stages, ranks, micro);
  EXPECT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  return s ? std::move(*s) : Schedule();
}

std::string buildError(ScheduleKind kind, int stages, int ranks, int micro,
                       llvm::StringRef style = "") {
  Manifest m = chain(stages);
  auto placement = Placement::create(
      stages, ranks, style.empty() ? schedulePlacement(kind) : style);
  if (!placement)
    return llvm::toString(placement.takeError());
  auto s = buildTrainingSchedule(m, *placement, kind, micro);
  return s ? std::string() : llvm::toString(s.takeError());
}

/// Reads a CSV as ppc train --schedule-csv does: placement from the file.
llvm::Expected<Schedule> readCSV(const Manifest &m, const std::string &text,
                                 int ranks, int micro,
                                 const std::string &name = "x.csv") {
  auto placement =
      placementFromCSV(text, static_cast<int>(m.stages.size()), ranks, name);
  if (!placement)
    return placement.takeError();
  return trainingScheduleFromCSV(m, *placement, text, micro, name);
}

std::string csvError(const Manifest &m, const std::string &text, int ranks,
                     int micro) {
  auto s = readCSV(m, text, ranks, micro);
  return s ? std::string() : llvm::toString(s.takeError());
}

struct Fixture {
  ScheduleKind kind;
  int stages, ranks, micro;
  std::string file() const {
    return "pytorch_" + scheduleName(kind).str() + "_" +
           std::to_string(stages) + "s_" + std::to_string(ranks) + "r_" +
           std::to_string(micro) + "mb";
  }
};

/// The cases make_pytorch_csv.py writes (interleaved-1f1b's is there to
/// show where ppc's order is PyTorch's too).
const Fixture kFixtures[] = {
    {ScheduleKind::LoopedBFS, 4, 2, 4},
    {ScheduleKind::InterleavedZeroBubble, 4, 2, 4},
    {ScheduleKind::InterleavedZeroBubble, 8, 4, 8},
    {ScheduleKind::Interleaved1F1B, 4, 2, 4},
    {ScheduleKind::ZeroBubbleV, 4, 2, 4},
    {ScheduleKind::ZeroBubbleV, 8, 4, 8},
    {ScheduleKind::ZeroBubbleV, 8, 4, 3},
    {ScheduleKind::DualPipeV, 4, 2, 4},
    {ScheduleKind::DualPipeV, 8, 4, 10},
};
} // namespace

TEST(ScheduleFamiliesTest, OrdersArePyTorchsOwn) {
  for (const Fixture &f : kFixtures) {
    SCOPED_TRACE(f.file());
    Manifest m = chain(f.stages);
    Schedule ours = built(m, f.kind, f.stages, f.ranks, f.micro);
    for (const char *layout : {".compute_only.csv", ".compute_comms.csv"}) {
      SCOPED_TRACE(layout);
      auto theirs = readCSV(m, fixture(f.file() + layout), f.ranks, f.micro,
                            f.file() + layout);
      ASSERT_TRUE(static_cast<bool>(theirs))
          << llvm::toString(theirs.takeError());
      // The file's rows place the stages as the kind's placement does.
      EXPECT_EQ(theirs->placement.describe(), ours.placement.describe());
      EXPECT_EQ(computeOrder(*theirs), computeOrder(ours));
    }
  }
}

TEST(ScheduleFamiliesTest, PyTorchsMessagesAreKept) {
  // compute_comms: the file's RECV_F 1->2 posts where PyTorch put it, before
  // stage 2's rank runs anything of microbatch 0 (here: rank 1 of the loop
  // placement receives 1F0's outputs only after its own 1F0... on the V the
  // local edge 1->2 has no message at all).
  Manifest m = chain(4);
  auto s = readCSV(m, fixture("pytorch_zbv_4s_2r_4mb.compute_comms.csv"), 2, 4);
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  std::vector<std::string> rank0;
  for (size_t i = 0; i < 8; ++i)
    rank0.push_back(s->ranks[0][i].str(s->edges));
  // "0UNSHARD,3UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,0F2,0SEND_F2,3F0":
  // FSDP cells dropped, RECV_F of stage 3 early, as in the file.
  EXPECT_EQ(rank0,
            (std::vector<std::string>{
                "F stage=0 mb=0", "SEND_F 0->1 mb=0 to=1", "F stage=0 mb=1",
                "SEND_F 0->1 mb=1 to=1", "RECV_F 2->3 mb=0 from=1",
                "F stage=0 mb=2", "SEND_F 0->1 mb=2 to=1", "F stage=3 mb=0"}));
}

TEST(ScheduleFamiliesTest, BothLayoutsRoundTrip) {
  for (ScheduleKind kind : kAllScheduleKinds)
    for (auto [stages, ranks, micro] : std::vector<std::tuple<int, int, int>>{
             {2, 2, 3}, {4, 2, 4}, {4, 2, 8}, {8, 4, 8}, {2, 1, 2}}) {
      Manifest m =
          chain(stages, stages >= 4 ? std::vector<std::pair<int, int>>{{0, 3}}
                                    : std::vector<std::pair<int, int>>{});
      auto s = build(m, kind, stages, ranks, micro);
      if (!s) {
        llvm::consumeError(s.takeError()); // refusals: tested below
        continue;
      }
      SCOPED_TRACE(scheduleName(kind).str() + " " + std::to_string(stages) +
                   "/" + std::to_string(ranks) + " M=" + std::to_string(micro));
      for (CSVLayout layout :
           {CSVLayout::ComputeOnly, CSVLayout::ComputeComms}) {
        std::string text = scheduleToCSV(*s, layout);
        auto back = readCSV(m, text, ranks, micro);
        ASSERT_TRUE(static_cast<bool>(back))
            << csvLayoutName(layout).str() << ": "
            << llvm::toString(back.takeError()) << "\n"
            << text;
        // Every action, messages included, comes back where it was.
        ASSERT_EQ(back->ranks.size(), s->ranks.size());
        for (size_t r = 0; r < s->ranks.size(); ++r) {
          ASSERT_EQ(back->ranks[r].size(), s->ranks[r].size()) << "rank " << r;
          for (size_t i = 0; i < s->ranks[r].size(); ++i)
            EXPECT_EQ(back->ranks[r][i].str(back->edges),
                      s->ranks[r][i].str(s->edges));
        }
      }
    }
}

TEST(ScheduleFamiliesTest, WritesComputeCommsAsPyTorchDoes) {
  // zb-h1 on 2 ranks: each forward send waits after the local I of its
  // microbatch, the backward sends at the end (_add_wait_send).
  Manifest m = chain(2);
  Schedule s = built(m, ScheduleKind::ZeroBubbleH1, 2, 2, 2);
  EXPECT_EQ(scheduleToCSV(s, CSVLayout::ComputeComms),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0I0,0WAIT_SEND_F0,0W0,"
            "0RECV_B1,0I1,0WAIT_SEND_F1,0W1\r\n"
            "1RECV_F0,1F0,1I0,1SEND_B0,1RECV_F1,1F1,1I1,1SEND_B1,1W0,1W1,"
            "1WAIT_SEND_B0,1WAIT_SEND_B1\r\n");
}

TEST(ScheduleFamiliesTest, UnitCostBubblesAreThePublishedOnes) {
  // P stages on P ranks (2 per rank on the V), M microbatches, F=I=W=1.
  for (int p : {2, 3, 4, 6})
    for (int m : {1, 4, 8, 16, 24}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      auto stats = [&](ScheduleKind kind, int stages) {
        Schedule s = built(chain(stages), kind, stages, p, m);
        auto st = scheduleStats(s);
        EXPECT_TRUE(static_cast<bool>(st)) << llvm::toString(st.takeError());
        return *st;
      };
      // GPipe and 1F1B: (p-1)/(m+p-1).
      double classic = double(p - 1) / (m + p - 1);
      EXPECT_NEAR(stats(ScheduleKind::GPipe, p).bubble, classic, 1e-12);
      EXPECT_NEAR(stats(ScheduleKind::OneFOneB, p).bubble, classic, 1e-12);
      // ZB-H1: idle (p-1)(T_F + T_B - T_W) = p-1 per rank, a third of
      // 1F1B's (p-1)(T_F + T_B + T_W) = 3(p-1) (Qi et al. 2023, table 2).
      // (With m >= p: fewer microbatches than stages leave no steady
      // state to fill.)
      if (m >= p) {
        ScheduleStats zb = stats(ScheduleKind::ZeroBubbleH1, p);
        EXPECT_DOUBLE_EQ(zb.makespan, 3 * m + (p - 1));
        EXPECT_DOUBLE_EQ(stats(ScheduleKind::OneFOneB, p).makespan - 3 * m,
                         3 * (zb.makespan - 3 * m));
      }
      // ZB-V and DualPipeV (2p stages, chunks F=I=W=1): every rank
      // computes 6m and the step takes 6m + (p-1): the p-1 chunk forwards
      // before the last rank's first input arrives, which no single step
      // avoids and consecutive steps overlap (ZB-V's zero bubble, Qi et
      // al. section 6: each rank's span is its 6m of work). DualPipeV's
      // published (PP/2-1)(F&B + B - 3W) counts an overlapped F&B chunk,
      // which ppc runs as F then B; its step is ZB-V's.
      if (m >= 2 * p - 1) {
        EXPECT_DOUBLE_EQ(stats(ScheduleKind::ZeroBubbleV, 2 * p).makespan,
                         6 * m + (p - 1));
      }
      if (m >= 2 * p) {
        EXPECT_DOUBLE_EQ(stats(ScheduleKind::DualPipeV, 2 * p).makespan,
                         6 * m + (p - 1));
      }
    }
}

TEST(ScheduleFamiliesTest, StatsCountActivationsAndMessages) {
  Manifest m = chain(4);
  Schedule v = built(m, ScheduleKind::ZeroBubbleV, 4, 2, 8);
  auto stats = scheduleStats(v);
  ASSERT_TRUE(static_cast<bool>(stats));
  // Three remote edges of four (1->2 is local on the V), each way, 8 times;
  // rank 0 sends 0->1 forward and 3->2 backward, rank 1 the others.
  EXPECT_EQ(stats->messages, (std::vector<int>{16, 16}));
  EXPECT_EQ(stats->peakActivations, (std::vector<int>{4, 4}));
  EXPECT_DOUBLE_EQ(stats->busy[0], 48);
  // Costs: a stage twice as slow stretches the step.
  std::vector<StageCost> costs(4);
  costs[2] = {2, 2, 2};
  auto slow = scheduleStats(v, costs);
  ASSERT_TRUE(static_cast<bool>(slow));
  EXPECT_GT(slow->makespan, stats->makespan);
  EXPECT_DOUBLE_EQ(slow->busy[1], 72);
  // Bad costs.
  EXPECT_EQ(llvm::toString(scheduleStats(v, {StageCost{}}).takeError()),
            "1 stage cost for 4 stages");
  costs[1].weight = -1;
  EXPECT_EQ(llvm::toString(scheduleStats(v, costs).takeError()),
            "stage 1's cost -1 is not a finite number >= 0");
}

TEST(ScheduleFamiliesTest, SkipConnectionsOnTheV) {
  // 0->3 and 1->2 skips: on the V, 0 and 3 share rank 0, so only 1->2
  // crosses ranks besides the chain.
  Manifest m = chain(4, {{0, 3}, {1, 2}});
  for (ScheduleKind kind :
       {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV}) {
    Schedule s = built(m, kind, 4, 2, 4);
    EXPECT_EQ(llvm::toString(simulateSchedule(s)), "");
  }
  Manifest eight = chain(8, {{0, 7}, {2, 6}, {1, 4}});
  for (ScheduleKind kind : kAllScheduleKinds)
    for (int micro : {8, 12}) {
      auto s = build(eight, kind, 8, 4, micro);
      if (!s) {
        std::string why = llvm::toString(s.takeError());
        EXPECT_TRUE(kind == ScheduleKind::InterleavedZeroBubble &&
                    micro == 12 && why.find("multiple") != std::string::npos)
            << why;
      }
    }
}

TEST(ScheduleFamiliesTest, EvaluationKeepsTheForwardsAlone) {
  // Every kind, with skips across ranks: the evaluation schedule runs, and
  // each rank's actions are its training actions' F, SEND_F and RECV_F in
  // their order, with no collector.
  Manifest m = chain(8, {{0, 7}, {2, 6}, {1, 4}});
  for (ScheduleKind kind : kAllScheduleKinds) {
    SCOPED_TRACE(scheduleName(kind).str());
    auto training = build(m, kind, 8, 4, 8);
    ASSERT_TRUE(static_cast<bool>(training))
        << llvm::toString(training.takeError());
    Schedule eval = evaluationSchedule(*training);
    EXPECT_TRUE(eval.evaluation);
    EXPECT_FALSE(eval.training);
    EXPECT_EQ(eval.placement.describe(), training->placement.describe());
    EXPECT_EQ(llvm::toString(simulateSchedule(eval)), "");
    int forwards = 0;
    for (size_t r = 0; r < eval.ranks.size(); ++r) {
      std::vector<std::string> kept, want;
      for (const Action &a : training->ranks[r])
        if (a.kind == ActionKind::Forward || a.kind == ActionKind::SendF ||
            a.kind == ActionKind::RecvF)
          want.push_back(a.str(training->edges));
      for (const Action &a : eval.ranks[r]) {
        kept.push_back(a.str(eval.edges));
        forwards += a.kind == ActionKind::Forward;
      }
      EXPECT_EQ(kept, want) << "rank " << r;
    }
    EXPECT_EQ(forwards, 8 * 8);
  }
  // An evaluation schedule that misses a forward is refused, as an
  // inference one is, but it needs no OUT.
  Schedule eval =
      evaluationSchedule(built(chain(2), ScheduleKind::GPipe, 2, 2, 2));
  eval.ranks[1].pop_back();
  EXPECT_EQ(llvm::toString(simulateSchedule(eval)),
            "schedule never runs F stage=1 mb=1");
}

TEST(ScheduleFamiliesTest, RefusesWhatItCannotRun) {
  EXPECT_EQ(buildError(ScheduleKind::ZeroBubbleV, 6, 2, 4),
            "zbv needs exactly 2 stages per rank (6 stages on 2 ranks)");
  EXPECT_EQ(buildError(ScheduleKind::ZeroBubbleV, 4, 2, 4, "loop"),
            "zbv needs the v placement, not stage k on rank k mod 2");
  EXPECT_EQ(buildError(ScheduleKind::DualPipeV, 4, 2, 3),
            "dualpipev needs at least as many microbatches as stages (4), "
            "got 3");
  EXPECT_EQ(buildError(ScheduleKind::LoopedBFS, 4, 2, 3, "v"),
            "looped-bfs needs the loop placement, not placement v");
  EXPECT_EQ(buildError(ScheduleKind::InterleavedZeroBubble, 4, 2, 5),
            "interleaved-zb runs the microbatches in rounds of max(1, "
            "microbatches / ranks) = 2; 5 microbatches are not a multiple of "
            "it (try 4 or 6)");
  EXPECT_EQ(buildError(ScheduleKind::InterleavedZeroBubble, 4, 2, 4, "v"),
            "interleaved-zb needs the loop placement, not placement v");
}

TEST(ScheduleFamiliesTest, RejectsMalformedComputeComms) {
  Manifest m = chain(2);
  const std::string good = "0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0\r\n"
                           "1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\r\n";
  EXPECT_EQ(csvError(m, good, 2, 1), "");
  auto replace = [&](const std::string &from, const std::string &to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return csvError(m, text, 2, 1);
  };
  EXPECT_EQ(replace("1RECV_F0,", ""),
            "schedule 'x.csv' runs F stage=1 mb=0 on rank 1 before its input "
            "from stage 0");
  EXPECT_EQ(replace(",0WAIT_SEND_F0", ""),
            "schedule 'x.csv' row 1 (rank 0): 0SEND_F0 has no 0WAIT_SEND_F0 "
            "after it");
  EXPECT_EQ(replace("0F0,0SEND_F0", "0WAIT_SEND_F0,0F0,0SEND_F0"),
            "schedule 'x.csv' row 1 (rank 0), cell 1: 0WAIT_SEND_F0 waits for "
            "no earlier 0SEND_F0 on its row");
  EXPECT_EQ(replace("0SEND_F0", "0SEND_F0,0SEND_F0"),
            "schedule 'x.csv' row 1 (rank 0), cell 3: 0SEND_F0 is sent twice");
  EXPECT_EQ(replace("1RECV_F0", "0RECV_F0"),
            "schedule 'x.csv' row 2 (rank 1), cell 1: 0RECV_F0: stage 0 runs "
            "on rank 0 (stage k on rank k mod 2), not on rank 1");
  EXPECT_EQ(replace("0RECV_B0", "0RECV_F0"),
            "schedule 'x.csv' row 1 (rank 0), cell 3: 0RECV_F0: stage 0 "
            "receives no outputs from another rank");
  EXPECT_EQ(replace("1SEND_B0", "1SEND_B7"),
            "schedule 'x.csv' row 2 (rank 1), cell 4: 1SEND_B7: microbatch 7 "
            "is out of range (1 microbatch)");
  EXPECT_EQ(replace("0B0", "(0B0;1F0)OVERLAP_F_B"),
            "schedule 'x.csv' row 2 (rank 1), cell 2: stage 1 already runs on "
            "rank 0 (row 1)");
  EXPECT_EQ(replace("0B0", "(0B0;0SEND_F0)OVERLAP_F_B"),
            "schedule 'x.csv' row 1 (rank 0), cell 4: '(0B0;0SEND_F0)"
            "OVERLAP_F_B' is not a compute action like 0F1, 1B0, 0I3 or 0W3, "
            "nor a compute_comms action like 1RECV_F0 or 0SEND_B2");
  EXPECT_EQ(replace("0SEND_F0", "0SEND_F\x1b[2J"),
            "schedule 'x.csv' row 1 (rank 0), cell 2: '0SEND_F\\x1b[2J' is not "
            "a compute action like 0F1, 1B0, 0I3 or 0W3, nor a compute_comms "
            "action like 1RECV_F0 or 0SEND_B2");
  // FSDP cells and a byte order mark are accepted.
  EXPECT_EQ(csvError(m,
                     "\xEF\xBB\xBF"
                     "0UNSHARD," +
                         good + "",
                     2, 1),
            "");
  // compute_only: a UTF-8 BOM before the first cell.
  EXPECT_EQ(csvError(m,
                     "\xEF\xBB\xBF"
                     "0F0,0B0\r\n1F0,1B0\r\n",
                     2, 1),
            "");
}

TEST(ScheduleFamiliesTest, AutoPicksTheShortestSimulatedStep) {
  Manifest m = chain(4);
  // Unit costs, 4 stages on 2 ranks, 8 microbatches: zb-h1, interleaved-zb,
  // zbv and dualpipev all take 49 steps; the tie goes to the first listed.
  auto unit = chooseSchedule(m, 2, 8, {}, "unit costs");
  ASSERT_TRUE(static_cast<bool>(unit)) << llvm::toString(unit.takeError());
  EXPECT_EQ(unit->schedule.kind, ScheduleKind::ZeroBubbleH1);
  EXPECT_EQ(unit->candidates.size(), std::size(kAllScheduleKinds));
  EXPECT_EQ(unit->explanation.rfind("schedule auto picked zb-h1: simulated "
                                    "step 49 units (bubble 2.0%, at most 8 "
                                    "microbatches' activations per rank) with "
                                    "unit costs; the others (step, "
                                    "activations): gpipe 51 (16), 1f1b 51 (6)",
                                    0),
            0u)
      << unit->explanation;
  // zb-h1 holds 8 on a rank; with at most 4, interleaved-zb (4) wins.
  auto capped = chooseSchedule(m, 2, 8, {}, "unit costs", 4);
  ASSERT_TRUE(static_cast<bool>(capped));
  EXPECT_EQ(capped->schedule.kind, ScheduleKind::InterleavedZeroBubble);
  for (const ScheduleCandidate &c : capped->candidates) {
    if (c.refusal.empty()) {
      EXPECT_LE(*std::max_element(c.stats.peakActivations.begin(),
                                  c.stats.peakActivations.end()),
                4);
    }
  }
  // Any costs: the pick is never slower than an applicable other.
  std::vector<StageCost> costs = {{1, 1, 1}, {1, 2, 1}, {2, 2, 2}, {5, 5, 3}};
  auto costed = chooseSchedule(m, 2, 8, costs, "given costs");
  ASSERT_TRUE(static_cast<bool>(costed));
  auto mine = scheduleStats(costed->schedule, costs);
  ASSERT_TRUE(static_cast<bool>(mine));
  for (const ScheduleCandidate &c : costed->candidates) {
    if (c.refusal.empty()) {
      EXPECT_LE(mine->makespan, c.stats.makespan) << scheduleName(c.kind).str();
    }
  }
  // Nothing fits; what every kind would refuse is said once.
  auto none = chooseSchedule(m, 2, 8, {}, "unit costs", 1);
  ASSERT_FALSE(static_cast<bool>(none));
  EXPECT_EQ(
      llvm::toString(none.takeError())
          .rfind("schedule auto: no schedule fits: gpipe n/a (16 activations "
                 "> maxActivations 1), 1f1b n/a (6 activations",
                 0),
      0u);
  EXPECT_EQ(llvm::toString(chooseSchedule(m, 3, 8, {}, "x").takeError()),
            "4 stages cannot be placed on WORLD_SIZE=3 ranks: the stage count "
            "must equal WORLD_SIZE or be a multiple of it (4 stages run on 1, "
            "2 or 4 ranks)");
  EXPECT_EQ(llvm::toString(chooseSchedule(m, 2, 0, {}, "x").takeError()),
            "microbatches 0 is not an integer in 1..65536");
}
