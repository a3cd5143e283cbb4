//===- tests/unit/tools/StuckReportTest.cpp - The rank a job is stuck on --===//
#include "tools/ppc/StuckReport.h"

#include <gtest/gtest.h>

namespace ppc {
namespace {

RankReport waiting(int rank, int peer) {
  RankReport r;
  r.rank = rank;
  r.waitingFor = peer;
  r.timedOut = true;
  r.action = 3;
  r.actions = 10;
  r.kind = "RECV_F";
  r.microbatch = 1;
  r.stage = rank;
  return r;
}

TEST(StuckReport, ChainEndsAtTheRankThatReportedNothing) {
  // 0 waits for 1, 1 for 2; 2 said nothing; 3 waits for 2 directly.
  std::map<int, RankReport> reports{
      {0, waiting(0, 1)}, {1, waiting(1, 2)}, {3, waiting(3, 2)}};
  StuckRank stuck = findStuckRank(reports, 0);
  EXPECT_EQ(stuck.rank, 2);
  EXPECT_FALSE(stuck.isCycle);
  EXPECT_EQ(stuck.waiters, (std::vector<int>{0, 1, 3}));
}

TEST(StuckReport, OtherChainsAreNotWaiters) {
  std::map<int, RankReport> reports{{0, waiting(0, 1)}, {2, waiting(2, 3)}};
  StuckRank stuck = findStuckRank(reports, 2);
  EXPECT_EQ(stuck.rank, 3);
  EXPECT_EQ(stuck.waiters, (std::vector<int>{2}));
}

TEST(StuckReport, ACycle) {
  std::map<int, RankReport> reports{{0, waiting(0, 2)},
                                    {1, waiting(1, 0)},
                                    {2, waiting(2, 1)},
                                    {3, waiting(3, 2)}};
  StuckRank stuck = findStuckRank(reports, 3);
  EXPECT_TRUE(stuck.isCycle);
  EXPECT_EQ(stuck.rank, 0);
  EXPECT_EQ(stuck.cycle, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(stuck.waiters, (std::vector<int>{3}));
}

TEST(StuckReport, ParsesAValidRecord) {
  auto r = parseRankReport(
      R"({"rank":2,"waitingFor":1,"timedOut":true,"action":5,"actions":24,)"
      R"("kind":"RECV_B","microbatch":3,"stage":2,"sent":{"1":4},)"
      R"("received":{}})",
      2, 3);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->waitingFor, 1);
  EXPECT_EQ(positionText(*r), "at action 5 of 24 (RECV_B mb 3 stage 2)");
  auto flush = parseRankReport(
      R"({"rank":0,"waitingFor":1,"timedOut":false,"action":25,"actions":24,)"
      R"("kind":"flush"})",
      0, 2);
  ASSERT_TRUE(flush);
  EXPECT_EQ(positionText(*flush), "at the final flush of 24 actions");
  // A rank waiting for the next step's microbatch signatures stands at no
  // action; elsewhere action 0 is no action.
  auto rank0 = [](const std::string &fields) {
    return parseRankReport(
        R"({"rank":0,"waitingFor":1,"timedOut":true,)" + fields + "}", 0, 2);
  };
  auto before = rank0(R"("action":0,"actions":0,"kind":"before_run")");
  ASSERT_TRUE(before);
  EXPECT_EQ(positionText(*before), "before a run of its schedule");
  EXPECT_FALSE(rank0(R"("action":1,"actions":0,"kind":"before_run")"));
  EXPECT_FALSE(
      rank0(R"("action":0,"actions":4,"kind":"F","microbatch":0,"stage":0)"));
}

TEST(StuckReport, RejectsBadRecords) {
  const char *good = R"("timedOut":true,"action":5,"actions":24,)"
                     R"("kind":"F","microbatch":3,"stage":2})";
  EXPECT_TRUE(parseRankReport(
      std::string(R"({"rank":2,"waitingFor":1,)") + good, 2, 3));
  // Another rank's record, a peer out of range, waiting for itself.
  EXPECT_FALSE(parseRankReport(
      std::string(R"({"rank":1,"waitingFor":0,)") + good, 2, 3));
  EXPECT_FALSE(parseRankReport(
      std::string(R"({"rank":2,"waitingFor":3,)") + good, 2, 3));
  EXPECT_FALSE(parseRankReport(
      std::string(R"({"rank":2,"waitingFor":2,)") + good, 2, 3));
  EXPECT_FALSE(parseRankReport("not json", 2, 3));
  EXPECT_FALSE(parseRankReport("[]", 2, 3));
  EXPECT_FALSE(parseRankReport(
      R"({"rank":2,"waitingFor":1,"timedOut":true,"action":5,"actions":24,)"
      R"("kind":"F; rm","microbatch":3,"stage":2})",
      2, 3));
  EXPECT_FALSE(parseRankReport(
      R"({"rank":2,"waitingFor":1,"timedOut":true,"action":26,"actions":24,)"
      R"("kind":"F","microbatch":3,"stage":2})",
      2, 3));
  EXPECT_FALSE(
      parseRankReport(std::string(kMaxRankReportBytes + 1, ' '), 2, 3));
}

TEST(StuckReport, RankList) {
  EXPECT_EQ(rankList({0}), "0");
  EXPECT_EQ(rankList({0, 1}), "0 and 1");
  EXPECT_EQ(rankList({0, 1, 3}), "0, 1 and 3");
}

} // namespace
} // namespace ppc
