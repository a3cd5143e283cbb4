//===- tests/unit/tools/TraceRangeTest.cpp - Steps and ranges of a trace --===//
#include "tools/ppc/TraceRange.h"
#include "tools/ppc/TraceSummary.h"

#include "tests/unit/tools/TraceBuilders.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

using namespace ppc;
using namespace ppc::test;

TEST(TraceRangeTest, TimePoints) {
  auto ms = parseTimePoint("120ms");
  ASSERT_TRUE(static_cast<bool>(ms)) << llvm::toString(ms.takeError());
  EXPECT_EQ(ms->kind, TimePoint::Kind::Ms);
  EXPECT_DOUBLE_EQ(ms->ms, 120);
  auto half = parseTimePoint("0.5ms");
  ASSERT_TRUE(static_cast<bool>(half));
  EXPECT_DOUBLE_EQ(half->ms, 0.5);
  auto step = parseTimePoint("step:3");
  ASSERT_TRUE(static_cast<bool>(step));
  EXPECT_EQ(step->kind, TimePoint::Kind::Step);
  EXPECT_EQ(step->index, 3);
  auto batch = parseTimePoint("batch:12");
  ASSERT_TRUE(static_cast<bool>(batch));
  EXPECT_EQ(batch->kind, TimePoint::Kind::Batch);
  EXPECT_EQ(batch->index, 12);
  const std::string bad = "' is not a time (e.g. 120ms, step:3, batch:2)";
  for (const char *text :
       {"120", "ms", "step:", "steps:3", "12 ms", "infms", "nanms", "-1ms",
        "1e400ms", "step:1.5", "batch:x", "STEP:1", ""})
    EXPECT_EQ(errorOf(parseTimePoint(text)), "'" + std::string(text) + bad)
        << text;
  EXPECT_EQ(errorOf(parseTimePoint("step:0")),
            "'step:0" + bad + ": steps count from 1");
  EXPECT_EQ(errorOf(parseTimePoint("batch:-2")),
            "'batch:-2" + bad + ": batches count from 1");
  EXPECT_EQ(errorOf(parseTimePoint("1\x01ms")), "'1\\x01ms" + bad);
}

TEST(TraceRangeTest, MarksAreTheKthEventOfEachRank) {
  std::vector<TimelineMark> marks = timelineMarks(threeSteps());
  ASSERT_EQ(marks.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(marks[k].kind, "step");
    EXPECT_EQ(marks[k].index, k + 1);
    EXPECT_DOUBLE_EQ(marks[k].startUs, 1000 + 200 * k);     // rank 0's start
    EXPECT_DOUBLE_EQ(marks[k].endUs, 1000 + 200 * k + 120); // rank 1's end
  }
  EXPECT_EQ(timelineMarks(threeSteps(kBatchEventName))[1].kind, "batch");
  // A "step" of another category is not a mark.
  Timeline t = threeSteps();
  for (TimelineEvent &e : t.events)
    e.category = e.category == "other" ? "wait" : e.category;
  EXPECT_TRUE(timelineMarks(t).empty());
}

TEST(TraceRangeTest, ResolvesAndRefusesRanges) {
  Timeline t = threeSteps();
  auto range = [&](std::optional<TimePoint> from, std::optional<TimePoint> to) {
    return resolveTimeRange(t, from, to, "--from X", "--to Y");
  };
  TimePoint step2{TimePoint::Kind::Step, 0, 2};
  TimePoint step3{TimePoint::Kind::Step, 0, 3};
  auto r = range(step2, step3);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_DOUBLE_EQ(r->startUs, 1200);
  EXPECT_DOUBLE_EQ(r->endUs, 1520);
  auto whole = range(std::nullopt, std::nullopt);
  ASSERT_TRUE(static_cast<bool>(whole));
  EXPECT_DOUBLE_EQ(whole->startUs, 1000);
  EXPECT_DOUBLE_EQ(whole->endUs, 1520);
  auto ms = range(TimePoint{TimePoint::Kind::Ms, 0.25, 0}, std::nullopt);
  ASSERT_TRUE(static_cast<bool>(ms));
  EXPECT_DOUBLE_EQ(ms->startUs, 1250);
  EXPECT_EQ(errorOf(range(TimePoint{TimePoint::Kind::Step, 0, 4}, {})),
            "--from X: the trace has 3 steps");
  EXPECT_EQ(errorOf(range({}, TimePoint{TimePoint::Kind::Batch, 0, 1})),
            "--to Y: the trace has no batch events (it has step events)");
  EXPECT_EQ(errorOf(range(TimePoint{TimePoint::Kind::Ms, 0.52, 0}, {})),
            "--from X: the trace ends at 0.520 ms");
  EXPECT_EQ(errorOf(range(step3, step2)), "--from X is not before --to Y");
  // Even where step 3 starts on one rank before step 2 ends on another.
  Timeline overlapping = threeSteps();
  for (TimelineEvent &e : overlapping.events)
    if (e.rank == 1 && e.name == "step")
      e.durationUs += 300;
  EXPECT_EQ(errorOf(resolveTimeRange(overlapping, step3, step2, "--from X",
                                     "--to Y")),
            "--from X is not before --to Y");
  EXPECT_EQ(errorOf(range({}, TimePoint{TimePoint::Kind::Ms, 0, 0})),
            "the trace's start is not before --to Y");
  Timeline old = timelineOf({{0, "F", "compute", 0, 0, 10, 5}});
  EXPECT_EQ(errorOf(resolveTimeRange(old, step2, {}, "--from step:2", "")),
            "--from step:2: the trace has no step events (traces of ppc "
            "older than its step and batch marks have none)");
}

TEST(TraceRangeTest, SkippingSteps) {
  Timeline t = threeSteps();
  auto kept = skipFirstSteps(t, 1);
  ASSERT_TRUE(static_cast<bool>(kept)) << llvm::toString(kept.takeError());
  ASSERT_EQ(kept->events.size(), 8u);
  for (const TimelineEvent &e : kept->events)
    EXPECT_GE(e.startUs, 1200 + 10 * e.rank);
  TraceSummary s = summarizeTrace(*kept);
  EXPECT_DOUBLE_EQ(s.startUs, 1200);
  EXPECT_DOUBLE_EQ(s.spanUs, 320);
  EXPECT_DOUBLE_EQ(s.ranks[0].busyUs, 100);
  auto all = skipFirstSteps(t, 0);
  ASSERT_TRUE(static_cast<bool>(all));
  EXPECT_EQ(all->events.size(), t.events.size());
  EXPECT_EQ(errorOf(skipFirstSteps(t, 3)),
            "the trace has 3 steps; skipping 3 leaves none");
  EXPECT_EQ(errorOf(skipFirstSteps(threeSteps(kBatchEventName), 5)),
            "the trace has 3 batches; skipping 5 leaves none");
  EXPECT_EQ(
      errorOf(skipFirstSteps(timelineOf({{0, "F", "compute", 0, 0, 1, 1}}), 1)),
      "the trace has no step or batch events to skip (traces of ppc "
      "older than its step and batch marks have none)");
}
