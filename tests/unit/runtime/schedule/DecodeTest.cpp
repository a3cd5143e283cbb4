//===- tests/unit/runtime/schedule/DecodeTest.cpp -------------------------===//
//
// The decode schedule: deadlock-free on every placement and group count,
// the token return where the pipeline needs it, and each rank's order.
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Decode.h"
#include "runtime/schedule/Simulate.h"

#include "ScheduleBuilders.h"

#include <gtest/gtest.h>

#include <set>

namespace ppc {
namespace {

/// A decoder-like chain: model input 0 the tokens (read by stage 0), model
/// input 1 the position (read by every stage).
Manifest decoder(int stages) {
  Manifest m = test::chain(stages);
  m.modelInputs.push_back({"cache_position", ValueKind::Tensor, {}, {}});
  for (StageInfo &s : m.stages) {
    StageInput in;
    in.name = "cache_position";
    in.source = ValueRef::fromModelInput(1);
    s.inputs.push_back(in);
  }
  return m;
}

Schedule build(int stages, int ranks, const char *style, DecodeShape shape) {
  auto placement = Placement::create(stages, ranks, style);
  EXPECT_TRUE(bool(placement)) << llvm::toString(placement.takeError());
  auto s = buildDecodeSchedule(decoder(stages), *placement, shape);
  EXPECT_TRUE(bool(s)) << llvm::toString(s.takeError());
  return std::move(*s);
}

int count(const Schedule &s, ActionKind kind) {
  int n = 0;
  for (const auto &actions : s.ranks)
    for (const Action &a : actions)
      n += a.kind == kind;
  return n;
}

TEST(DecodeTest, SimulatesOnEveryPlacementAndGroupCount) {
  struct Case {
    int stages, ranks;
    const char *style;
  };
  for (Case c : {Case{1, 1, "loop"}, Case{2, 1, "loop"}, Case{2, 2, "loop"},
                 Case{4, 2, "loop"}, Case{4, 4, "loop"}, Case{4, 2, "v"}})
    for (int groups : {1, 2, 3, 4, 8})
      for (auto [prompt, fresh] : {std::pair{1, 1}, std::pair{5, 6}}) {
        Schedule s = build(
            c.stages, c.ranks, c.style,
            DecodeShape::uniform(groups, prompt, fresh, /*tokenInput=*/0));
        EXPECT_EQ(s.microbatches, groups * (prompt + fresh - 1));
        llvm::Error err = simulateSchedule(s);
        EXPECT_FALSE(bool(err))
            << c.stages << " stages on " << c.ranks << " " << c.style << ", "
            << groups << " groups: " << llvm::toString(std::move(err));
      }
}

TEST(DecodeTest, ReturnsTokensOnlyAcrossRanksAndOnlyWhenFed) {
  // 2 groups, 3 prompt tokens, 4 new: steps 0..5; picks from step 2 on, of
  // which steps 2..4 feed the next step.
  Schedule s = build(2, 2, "loop", DecodeShape::uniform(2, 3, 4, 0));
  EXPECT_EQ(count(s, ActionKind::SendTokens), 2 * 3);
  EXPECT_EQ(count(s, ActionKind::RecvTokens), 2 * 3);
  EXPECT_EQ(count(s, ActionKind::Output), 2 * 6);
  for (const Action &a : s.ranks[1]) {
    if (a.kind == ActionKind::SendTokens) {
      EXPECT_EQ(a.str(s.edges),
                "SEND_TOK mb=" + std::to_string(a.microbatch) + " to=0");
    }
  }
  // One rank picks and feeds itself: no messages.
  Schedule local = build(2, 1, "loop", DecodeShape::uniform(2, 3, 4, 0));
  EXPECT_EQ(count(local, ActionKind::SendTokens), 0);
  EXPECT_EQ(count(local, ActionKind::RecvTokens), 0);
}

TEST(DecodeTest, ReturnsTokensToEveryRankBeforeItRunsTheStepTheyFeed) {
  // 4 stages on 4 ranks: ranks 1 and 2 neither read the token input nor
  // pick, yet hear every returned token (so that each skips the steps of a
  // group that ended), before their first F of the step it feeds.
  Schedule s = build(4, 4, "loop", DecodeShape::uniform(2, 3, 4, 0));
  EXPECT_EQ(count(s, ActionKind::SendTokens), 3 * 2 * 3);
  const TokenReturn &tokens = *s.tokens;
  for (int r = 0; r < 3; ++r) {
    std::set<int> heard;
    for (const Action &a : s.ranks[r]) {
      if (a.kind == ActionKind::RecvTokens)
        heard.insert(tokens.next(a.microbatch));
      if (a.kind == ActionKind::Forward && tokens.fed(a.microbatch)) {
        EXPECT_TRUE(heard.count(a.microbatch))
            << "rank " << r << ": F of microbatch " << a.microbatch;
      }
    }
    EXPECT_EQ(heard.size(), 2u * 3) << "rank " << r;
  }
  EXPECT_EQ(count(s, ActionKind::RecvTokens), 3 * 2 * 3);
}

TEST(DecodeTest, KeepsStageZeroBusyWithAsManyGroupsAsStages) {
  // With groups >= stages, stage 0 runs group 1's step before it needs
  // group 0's tokens: its order is plain microbatch order, and its first
  // token receive comes only after both groups' first decode F.
  Schedule s = build(2, 2, "loop", DecodeShape::uniform(2, 1, 3, 0));
  EXPECT_EQ(test::computeOrder(s)[0], "0F0 0F1 0F2 0F3 0F4 0F5");
  EXPECT_EQ(test::computeOrder(s)[1], "1F0 1F1 1F2 1F3 1F4 1F5");
  std::vector<std::string> rank0;
  for (const Action &a : s.ranks[0])
    rank0.push_back(a.str(s.edges));
  EXPECT_EQ(rank0[0], "F stage=0 mb=0");
  EXPECT_EQ(rank0[4], "RECV_TOK mb=0 from=1");
  EXPECT_EQ(rank0[5], "F stage=0 mb=2");
}

TEST(DecodeTest, NumbersLockstepGroupsStepByStep) {
  // As many slots as groups of one shape: microbatch m is step m / G of
  // group m % G, each group on its own slot.
  Schedule s = build(2, 2, "loop", DecodeShape::uniform(3, 2, 3, 0));
  const TokenReturn &t = *s.tokens;
  ASSERT_EQ(s.microbatches, 3 * 4);
  EXPECT_EQ(t.slots, 3);
  for (int m = 0; m < s.microbatches; ++m) {
    EXPECT_EQ(t.groupOf(m), m % 3) << m;
    EXPECT_EQ(t.stepOf(m), m / 3) << m;
    EXPECT_EQ(t.slotOf(m), m % 3) << m;
    EXPECT_EQ(t.previous(m), m >= 3 ? m - 3 : -1) << m;
  }
}

TEST(DecodeTest, QueuesGroupsForSlotsWithoutDraining) {
  // Five groups of different lengths (steps 3, 6, 2, 4, 3) through two
  // slots: each goes to the slot that frees first, and a slot's next
  // group takes the round after its previous one's last step.
  DecodeShape shape;
  shape.groups = {{2, 2}, {1, 6}, {2, 1}, {3, 2}, {1, 3}};
  shape.slots = 2;
  Schedule s = build(2, 2, "loop", shape);
  const TokenReturn &t = *s.tokens;
  EXPECT_EQ(t.slots, 2);
  std::vector<int> slots;
  for (const TokenReturn::Group &g : t.groups)
    slots.push_back(g.slot);
  // Loads: slot 0 takes 3 (group 0), then 2 (group 2: 3 < 6), then 4
  // (group 3: 5 < 6); slot 1 takes 6 (group 1), then 3 (group 4: 6 < 9).
  EXPECT_EQ(slots, (std::vector<int>{0, 1, 0, 0, 1}));
  EXPECT_EQ(s.microbatches, 3 + 6 + 2 + 4 + 3);
  // Round by round, slot by slot: slot 0 runs groups 0, 2, 3 back to back
  // beside slot 1's groups 1 and 4.
  std::vector<int> order;
  for (int m = 0; m < s.microbatches; ++m)
    order.push_back(t.groupOf(m));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 0, 1, 0, 1, 2, 1, 2, 1, 3, 1, 3, 4,
                                     3, 4, 3, 4}));
  for (int m = 0; m < s.microbatches; ++m)
    if (t.previous(m) >= 0) {
      EXPECT_EQ(t.groupOf(t.previous(m)), t.groupOf(m));
      EXPECT_EQ(t.stepOf(t.previous(m)) + 1, t.stepOf(m));
    }
  llvm::Error err = simulateSchedule(s);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  // Tokens return only between steps of one group: 1 + 5 + 0 + 1 + 2.
  EXPECT_EQ(count(s, ActionKind::SendTokens), 9);
}

TEST(DecodeTest, RefusesAProgramWhoseTokenInputNoStageReads) {
  auto placement = Placement::create(2, 2);
  ASSERT_TRUE(bool(placement));
  auto s = buildDecodeSchedule(decoder(2), *placement,
                               DecodeShape::uniform(1, 1, 1, 5));
  ASSERT_FALSE(bool(s));
  EXPECT_EQ(llvm::toString(s.takeError()), "no stage reads model input 5");
}

} // namespace
} // namespace ppc
