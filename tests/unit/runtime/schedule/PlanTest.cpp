//===- tests/unit/runtime/schedule/PlanTest.cpp - planSchedule ------------===//
//
// Tests that planSchedule gives the schedule each source names (a kind on
// its placement, --schedule auto, a CSV) and refuses auto with a CSV.
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Plan.h"

#include "runtime/schedule/Build.h"
#include "runtime/schedule/ScheduleCSV.h"
#include "tests/unit/runtime/schedule/ScheduleBuilders.h"

#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace ppc;
using ppc::test::chain;

namespace {
/// Every rank's actions as printSchedule() prints them.
std::string actions(const Schedule &schedule) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (int r = 0; r < schedule.placement.worldSize(); ++r)
    printSchedule(schedule, r, os);
  return os.str();
}

SchedulePlan planned(const Manifest &m, int ranks,
                     const ScheduleRequest &request) {
  auto plan = planSchedule(m, ranks, request);
  EXPECT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  return plan ? std::move(*plan) : SchedulePlan();
}
} // namespace

TEST(PlanTest, NamedInferenceIsBuildScheduleOnTheKindsPlacement) {
  Manifest m = chain(4);
  ScheduleRequest request;
  request.kind = ScheduleKind::GPipe;
  request.training = false;
  request.microbatches = 3;
  SchedulePlan plan = planned(m, 2, request);
  auto placement = Placement::create(4, 2, "loop");
  ASSERT_TRUE(static_cast<bool>(placement));
  auto expected = buildSchedule(m, *placement, ScheduleKind::GPipe, 3);
  ASSERT_TRUE(static_cast<bool>(expected));
  EXPECT_FALSE(plan.schedule.training);
  EXPECT_EQ(actions(plan.schedule), actions(*expected));
  EXPECT_EQ(plan.note, "");
}

TEST(PlanTest, NamedTrainingTakesTheKindsPlacementOrTheGivenOne) {
  Manifest m = chain(4);
  ScheduleRequest request;
  request.kind = ScheduleKind::ZeroBubbleV;
  request.microbatches = 4;
  EXPECT_EQ(planned(m, 2, request).schedule.placement.style(), "v");
  request.kind = ScheduleKind::OneFOneB;
  request.placement = "v";
  SchedulePlan plan = planned(m, 2, request);
  EXPECT_TRUE(plan.schedule.training);
  EXPECT_EQ(plan.schedule.placement.style(), "v");
}

TEST(PlanTest, CSVPlacesStagesByRowAndKeepsTheActions) {
  Manifest m = chain(4);
  auto built =
      buildSimulatedTrainingSchedule(m, ScheduleKind::ZeroBubbleV, 2, 4);
  ASSERT_TRUE(static_cast<bool>(built)) << llvm::toString(built.takeError());
  ScheduleRequest request;
  request.microbatches = 4;
  request.csv = scheduleToCSV(*built);
  request.csvName = "zbv.csv";
  SchedulePlan plan = planned(m, 2, request);
  EXPECT_EQ(plan.schedule.origin, "zbv.csv");
  for (int s = 0; s < 4; ++s)
    EXPECT_EQ(plan.schedule.placement.rankOf(s), built->placement.rankOf(s));
  EXPECT_EQ(actions(plan.schedule), actions(*built));
}

TEST(PlanTest, AutoExplainsItsPick) {
  ScheduleRequest request;
  request.autoSchedule = true;
  request.microbatches = 4;
  SchedulePlan plan = planned(chain(4), 2, request);
  EXPECT_EQ(plan.note.rfind("schedule auto picked ", 0), 0u) << plan.note;
}

TEST(PlanTest, RefusesAutoWithACSV) {
  ScheduleRequest request;
  request.autoSchedule = true;
  request.csv = "";
  const char *message = "schedule auto picks a schedule; scheduleCSVPath "
                        "gives one: use one of them";
  EXPECT_EQ(llvm::toString(request.check()), message);
  auto plan = planSchedule(chain(2), 2, request);
  ASSERT_FALSE(static_cast<bool>(plan));
  EXPECT_EQ(llvm::toString(plan.takeError()), message);
}
