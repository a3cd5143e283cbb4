//===- tests/unit/runtime/train/LrScheduleTest.cpp ------------------------===//
//
// Learning-rate schedules.
// Learning-rate schedules
#include "runtime/train/LrSchedule.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ppc;

namespace {
LrSchedule schedule(LrScheduleKind kind, int warmup, int steps,
                    double minLr = 0) {
  LrSchedule s;
  s.kind = kind;
  s.warmupSteps = warmup;
  s.steps = steps;
  s.minLr = minLr;
  return s;
}

std::string problem(const LrSchedule &s, double lr) {
  llvm::Error err = s.check(lr);
  return err ? llvm::toString(std::move(err)) : "";
}
} // namespace

TEST(LrScheduleTest, NamesRoundTrip) {
  for (LrScheduleKind kind : kAllLrScheduleKinds)
    EXPECT_EQ(parseLrScheduleName(lrScheduleName(kind)), kind);
  EXPECT_FALSE(parseLrScheduleName("step"));
  EXPECT_EQ(lrScheduleName(LrScheduleKind::Cosine), "cosine");
}

TEST(LrScheduleTest, ConstantIsTheBaseAfterWarmup) {
  LrSchedule s = schedule(LrScheduleKind::Constant, 4, 10);
  EXPECT_DOUBLE_EQ(s.at(0.1, 0), 0.025);
  EXPECT_DOUBLE_EQ(s.at(0.1, 1), 0.05);
  EXPECT_DOUBLE_EQ(s.at(0.1, 3), 0.1);
  EXPECT_DOUBLE_EQ(s.at(0.1, 4), 0.1);
  EXPECT_DOUBLE_EQ(s.at(0.1, 9), 0.1);
  EXPECT_DOUBLE_EQ(schedule(LrScheduleKind::Constant, 0, 1).at(0.3, 0), 0.3);
}

TEST(LrScheduleTest, LinearFallsFromTheBaseToTheMinimum) {
  // 2 warm-up steps, then 8 steps from 1 towards 0.2: step s learns at
  // 1 - 0.8 (s - 2) / 8.
  LrSchedule s = schedule(LrScheduleKind::Linear, 2, 10, 0.2);
  EXPECT_DOUBLE_EQ(s.at(1, 0), 0.5);
  EXPECT_DOUBLE_EQ(s.at(1, 1), 1);
  EXPECT_DOUBLE_EQ(s.at(1, 2), 1);
  EXPECT_DOUBLE_EQ(s.at(1, 6), 0.6);
  EXPECT_DOUBLE_EQ(s.at(1, 9), 1 - 0.8 * 7 / 8);
  // Past the end: the minimum.
  EXPECT_DOUBLE_EQ(s.at(1, 10), 0.2);
  EXPECT_DOUBLE_EQ(s.at(1, 50), 0.2);
}

TEST(LrScheduleTest, CosineFollowsHalfACosine) {
  LrSchedule s = schedule(LrScheduleKind::Cosine, 0, 4, 0.1);
  EXPECT_DOUBLE_EQ(s.at(1, 0), 1);
  EXPECT_DOUBLE_EQ(s.at(1, 1), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)));
  EXPECT_DOUBLE_EQ(s.at(1, 2), 0.55);
  EXPECT_DOUBLE_EQ(s.at(1, 4), 0.1);
  // Warm-up over every step never reaches the decay.
  LrSchedule all = schedule(LrScheduleKind::Cosine, 5, 5);
  EXPECT_DOUBLE_EQ(all.at(2, 0), 0.4);
  EXPECT_DOUBLE_EQ(all.at(2, 4), 2);
}

TEST(LrScheduleTest, ChecksItsFields) {
  EXPECT_EQ(problem(schedule(LrScheduleKind::Cosine, 20, 20, 0.01), 0.1), "");
  EXPECT_EQ(problem(schedule(LrScheduleKind::Cosine, 0, 0), 0.1),
            "steps 0 is not an integer in 1..2147483647");
  EXPECT_EQ(problem(schedule(LrScheduleKind::Linear, 30, 20), 0.1),
            "warmupSteps 30 is not an integer in 0..20 (at most the steps)");
  EXPECT_EQ(problem(schedule(LrScheduleKind::Linear, -1, 20), 0.1),
            "warmupSteps -1 is not an integer in 0..20 (at most the steps)");
  EXPECT_EQ(problem(schedule(LrScheduleKind::Cosine, 0, 20, 0.5), 0.1),
            "minLr 0.5 is not a number in 0..0.1 (at most the learning "
            "rate)");
  EXPECT_EQ(problem(schedule(LrScheduleKind::Cosine, 0, 20, NAN), 0.1),
            "minLr nan is not a number in 0..0.1 (at most the learning "
            "rate)");
  EXPECT_EQ(problem(schedule(LrScheduleKind::Constant, 0, 20, 0.05), 0.1),
            "minLr 0.05 applies to the linear and cosine schedules");
}
