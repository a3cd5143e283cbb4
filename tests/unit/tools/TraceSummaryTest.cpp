//===- tests/unit/tools/TraceSummaryTest.cpp - What ranks and stages did --===//
#include "tools/ppc/TraceSummary.h"

#include "tests/unit/tools/TraceBuilders.h"

#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <string>

using namespace ppc;
using namespace ppc::test;

// Numbers worked out by hand in fixtures/trace/summary.json's "otherData":
// rank 0 computes 1000 + 1000 + 2000 + 2000 us and is blocked for a
// 1800 us wait and receives of 200 and 800 us; rank 1 computes 1500 + 1250
// + 1500 + 1250 us and is blocked over [0, 1150) (a wait [0, 1050)
// overlapping a receive [1000, 1150): once, not 1200 us) and 100 us; the
// trace spans [0, 10000) us.
TEST(TraceSummaryTest, HandComputedNumbers) {
  auto timeline = readTraceFile(traceFixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  TraceSummary s = summarizeTrace(*timeline);
  EXPECT_DOUBLE_EQ(s.spanUs, 10000);
  EXPECT_DOUBLE_EQ(s.startUs, 5e9);
  ASSERT_EQ(s.ranks.size(), 2u);
  const RankSummary &r0 = s.ranks[0], &r1 = s.ranks[1];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_DOUBLE_EQ(r0.busyUs, 6000);
  EXPECT_DOUBLE_EQ(r0.waitUs, 2800);
  EXPECT_DOUBLE_EQ(r0.bubble, 0.4);
  EXPECT_EQ(r1.rank, 1);
  EXPECT_DOUBLE_EQ(r1.busyUs, 5500);
  EXPECT_DOUBLE_EQ(r1.waitUs, 1250);
  EXPECT_DOUBLE_EQ(r1.bubble, 0.45);
  EXPECT_DOUBLE_EQ(s.bubble, 0.425);
  for (const RankSummary &r : s.ranks) {
    EXPECT_EQ(r.events, 10);
    EXPECT_EQ(r.compute, 4);
    EXPECT_EQ(r.send, 2);
    EXPECT_EQ(r.recv, 2);
    EXPECT_EQ(r.wait, 1);
    EXPECT_EQ(r.other, 1);
  }
  ASSERT_TRUE(s.slowestForward);
  EXPECT_EQ(s.slowestForward->stage, 1);
  EXPECT_DOUBLE_EQ(s.slowestForward->meanUs, 1500);
  EXPECT_EQ(s.slowestForward->count, 2);
  ASSERT_TRUE(s.slowestBackward);
  EXPECT_EQ(s.slowestBackward->stage, 0);
  EXPECT_DOUBLE_EQ(s.slowestBackward->meanUs, 2000);

  std::string text;
  llvm::raw_string_ostream os(text);
  printTraceSummary(s, os);
  os.flush();
  EXPECT_NE(text.find("trace: rank=0 busy_ms=6.000 wait_ms=2.800 "
                      "bubble=0.4000 events=10 compute=4 send=2 recv=2 "
                      "wait=1 other=1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("trace: rank=1 busy_ms=5.500 wait_ms=1.250 "
                      "bubble=0.4500 "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("trace: span_ms=10.000 ranks=2 bubble=0.4250 "
                      "slowest_f_stage=1 slowest_f_ms=1.500 "
                      "slowest_b_stage=0 slowest_b_ms=2.000\n"),
            std::string::npos)
      << text;
}

TEST(TraceSummaryTest, ForwardOnlyHasNoBackwardStage) {
  auto timeline = parseTrace(oneEvent({{"args", "{\"stage\": 4}"}}), "t");
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  TraceSummary s = summarizeTrace(*timeline);
  ASSERT_TRUE(s.slowestForward);
  EXPECT_EQ(s.slowestForward->stage, 4);
  EXPECT_FALSE(s.slowestBackward);
  EXPECT_DOUBLE_EQ(s.ranks[0].bubble, 0);
}

// The fixture's stages (see HandComputedNumbers): stage 0 on rank 0 runs F
// 1000 + 1000, B 2000 + 2000, sends 100 + 100 and receives 200 + 800 us;
// stage 1 on rank 1 F 1500 + 1500, B 1250 + 1250, sends 100 + 100 and
// receives 150 + 100 us.
TEST(TraceSummaryTest, PerStageTimes) {
  auto timeline = readTraceFile(traceFixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  TraceSummary s = summarizeTrace(*timeline);
  ASSERT_EQ(s.stages.size(), 2u);
  const StageSummary &s0 = s.stages[0], &s1 = s.stages[1];
  EXPECT_EQ(s0.stage, 0);
  EXPECT_EQ(s0.rank, 0);
  EXPECT_DOUBLE_EQ(s0.forwardUs, 2000);
  EXPECT_DOUBLE_EQ(s0.backwardUs, 4000);
  EXPECT_DOUBLE_EQ(s0.sendUs, 200);
  EXPECT_DOUBLE_EQ(s0.recvUs, 1000);
  EXPECT_EQ(s0.forwards, 2);
  EXPECT_EQ(s1.stage, 1);
  EXPECT_EQ(s1.rank, 1);
  EXPECT_DOUBLE_EQ(s1.forwardUs, 3000);
  EXPECT_DOUBLE_EQ(s1.backwardUs, 2500);
  EXPECT_DOUBLE_EQ(s1.sendUs, 200);
  EXPECT_DOUBLE_EQ(s1.recvUs, 250);
  EXPECT_DOUBLE_EQ(s1.inputUs + s1.weightUs + s0.inputUs + s0.weightUs, 0);
  std::string text;
  llvm::raw_string_ostream os(text);
  printTraceSummary(s, os);
  os.flush();
  EXPECT_NE(text.find("trace: stage=0 f_ms=2.000 b_ms=4.000 i_ms=0.000 "
                      "w_ms=0.000 send_ms=0.200 recv_ms=1.000 forwards=2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nstage    rank        F_ms        B_ms     send_ms "
                      "    recv_ms forwards\n0           0       2.000 "
                      "      4.000       0.200       1.000        2\n"),
            std::string::npos)
      << text;
}
