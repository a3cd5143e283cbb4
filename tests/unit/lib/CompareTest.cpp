//===- tests/unit/lib/CompareTest.cpp - Output comparison tests -----------===//
#include "lib/Compare.h"

#include <ATen/ATen.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace ppc;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

OutputComparison compare(const at::Tensor &expected, const at::Tensor &actual,
                         double rtol = 1e-5, double atol = 1e-5) {
  return compareValues(expected, actual, rtol, atol);
}
} // namespace

TEST(CompareTest, IdenticalInfinitiesMatch) {
  // inf - inf is NaN: a hand-written |e - a| <= tol called these different.
  at::Tensor t = at::tensor({1.0, kInf, -kInf, 2.0}, at::kFloat);
  OutputComparison c = compare(t, t.clone());
  EXPECT_TRUE(c.match) << c.detail;
  EXPECT_EQ(c.maxAbsDiff, 0);
  EXPECT_EQ(c.detail, "max abs diff 0 (rtol 1e-05, atol 1e-05)");
  // Also with zero tolerances (ppc verify --rtol 0 --atol 0).
  EXPECT_TRUE(compare(t, t.clone(), 0, 0).match);
}

TEST(CompareTest, OppositeInfinitiesDiffer) {
  at::Tensor e = at::tensor({1.0, kInf}, at::kFloat);
  at::Tensor a = at::tensor({1.0, -kInf}, at::kFloat);
  OutputComparison c = compare(e, a);
  EXPECT_FALSE(c.match);
  EXPECT_EQ(c.maxAbsDiff, kInf);
  EXPECT_FALSE(compare(e, at::tensor({1.0, 5.0}, at::kFloat)).match);
}

TEST(CompareTest, NaNMatchesNaNInTheSamePlaceOnly) {
  at::Tensor e = at::tensor({kNaN, 1.0}, at::kDouble);
  EXPECT_TRUE(compare(e, e.clone()).match);
  OutputComparison moved = compare(e, at::tensor({1.0, kNaN}, at::kDouble));
  EXPECT_FALSE(moved.match);
  EXPECT_TRUE(std::isnan(moved.maxAbsDiff));
  EXPECT_FALSE(compare(e, at::tensor({0.0, 1.0}, at::kDouble)).match);
}

TEST(CompareTest, TolerancesAreRelativeToExpected) {
  at::Tensor e = at::tensor({100.0}, at::kDouble);
  // atol + rtol * |expected| = 0 + 0.01 * 100 = 1.
  EXPECT_TRUE(compare(e, at::tensor({101.0}, at::kDouble), 0.01, 0).match);
  EXPECT_FALSE(compare(e, at::tensor({101.5}, at::kDouble), 0.01, 0).match);
  OutputComparison c = compare(e, at::tensor({99.5}, at::kDouble), 0, 0.25);
  EXPECT_FALSE(c.match);
  EXPECT_EQ(c.maxAbsDiff, 0.5);
  EXPECT_EQ(c.detail, "max abs diff 0.5 (rtol 0, atol 0.25)");
}

TEST(CompareTest, IntegersAndBools) {
  at::Tensor e = at::tensor({1, 7}, at::kLong);
  EXPECT_TRUE(compare(e, e.clone(), 0, 0).match);
  OutputComparison c = compare(e, at::tensor({1, 9}, at::kLong), 0, 0);
  EXPECT_FALSE(c.match);
  EXPECT_EQ(c.maxAbsDiff, 2);
  // Unsigned bytes: 1 - 2 must not wrap around to 255.
  OutputComparison u =
      compare(at::tensor({1}, at::kByte), at::tensor({2}, at::kByte), 0, 0);
  EXPECT_FALSE(u.match);
  EXPECT_EQ(u.maxAbsDiff, 1);
  at::Tensor b = at::tensor({1, 0}, at::kLong).to(at::kBool);
  EXPECT_TRUE(compare(b, b.clone(), 0, 0).match);
  EXPECT_FALSE(compare(b, b.logical_not(), 0, 0).match);
}

TEST(CompareTest, ShapeAndDtypeMismatches) {
  OutputComparison shape = compare(at::zeros({2, 3}), at::zeros({3, 2}));
  EXPECT_FALSE(shape.match);
  EXPECT_LT(shape.maxAbsDiff, 0);
  EXPECT_EQ(shape.detail, "shape [3, 2] != expected [2, 3]");
  OutputComparison dtype =
      compare(at::zeros({2}, at::kFloat), at::zeros({2}, at::kDouble));
  EXPECT_FALSE(dtype.match);
  EXPECT_EQ(dtype.detail, "dtype Double != expected Float");
}

TEST(CompareTest, TuplesCompareElementwise) {
  at::Tensor inf = at::tensor({kInf}, at::kFloat);
  c10::IValue e = c10::ivalue::Tuple::create({inf, at::ones({2})});
  c10::IValue same = c10::ivalue::Tuple::create({inf.clone(), at::ones({2})});
  EXPECT_TRUE(compareValues(e, same, 1e-5, 1e-5).match);
  c10::IValue other = c10::ivalue::Tuple::create({inf.clone(), at::zeros({2})});
  OutputComparison c = compareValues(e, other, 1e-5, 1e-5);
  EXPECT_FALSE(c.match);
  EXPECT_EQ(c.detail, "element 1: max abs diff 1 (rtol 1e-05, atol 1e-05)");
}
