//===- tests/unit/lib/NumberRulesTest.cpp - Rules of numeric options ------===//
#include "lib/NumberRules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace ppc;

namespace {
std::string parseInteger(const IntegerRule &rule, llvm::StringRef text,
                         int64_t *out = nullptr) {
  int64_t value = -12345;
  std::string problem = rule.parse(text, value);
  if (out)
    *out = value;
  return problem;
}

std::string parseReal(const RealRule &rule, llvm::StringRef text,
                      double *out = nullptr) {
  double value = -12345;
  std::string problem = rule.parse(text, value);
  if (out)
    *out = value;
  return problem;
}
} // namespace

TEST(NumberRulesTest, Phrases) {
  EXPECT_EQ(IntegerRule({1, 65536}).phrase(), "an integer in 1..65536");
  EXPECT_EQ(IntegerRule({1, 10, "milliseconds"}).phrase(),
            "a number of milliseconds in 1..10");
  EXPECT_EQ(IntegerRule({0, 8, "", "0: the default"}).phrase(),
            "an integer in 0..8 (0: the default)");
  EXPECT_EQ(RealRule::above(0).phrase(), "a finite number above 0");
  EXPECT_EQ(RealRule::atLeast(0).phrase(), "a finite number of at least 0");
  EXPECT_EQ(RealRule::seconds(0.001, 604800).phrase(),
            "a number of seconds in 0.001..604800");
}

TEST(NumberRulesTest, IntegersFromText) {
  IntegerRule rule{1, 100};
  int64_t value = 0;
  EXPECT_EQ(parseInteger(rule, "42", &value), "");
  EXPECT_EQ(value, 42);
  // Decimal only: a leading zero is no octal prefix.
  EXPECT_EQ(parseInteger(rule, "010", &value), "");
  EXPECT_EQ(value, 10);
  EXPECT_EQ(parseInteger(rule, "+7", &value), "");
  EXPECT_EQ(value, 7);
  EXPECT_EQ(parseInteger(rule, "0"), "0 is not an integer in 1..100");
  EXPECT_EQ(parseInteger(rule, "-3"), "-3 is not an integer in 1..100");
  EXPECT_EQ(parseInteger(rule, "101"), "101 is not an integer in 1..100");
  // Beyond int64: still a number, out of range, not wrapped.
  EXPECT_EQ(parseInteger(rule, "99999999999999999999999"),
            "99999999999999999999999 is not an integer in 1..100");
  EXPECT_EQ(parseInteger(rule, "-99999999999999999999999"),
            "-99999999999999999999999 is not an integer in 1..100");
  // No number at all: quoted.
  for (const char *text : {"", "1.5", "1e3", "0x10", " 5", "5 ", "-", "abc"})
    EXPECT_EQ(parseInteger(rule, text),
              "'" + std::string(text) + "' is not an integer in 1..100")
        << text;
  // A failed parse leaves the value alone.
  EXPECT_NE(parseInteger(rule, "0", &value), "");
  EXPECT_EQ(value, -12345);
}

TEST(NumberRulesTest, IntegersAtTheEdges) {
  IntegerRule all{std::numeric_limits<int64_t>::min(),
                  std::numeric_limits<int64_t>::max()};
  int64_t value = 0;
  EXPECT_EQ(parseInteger(all, "9223372036854775807", &value), "");
  EXPECT_EQ(value, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parseInteger(all, "-9223372036854775808", &value), "");
  EXPECT_EQ(value, std::numeric_limits<int64_t>::min());
  EXPECT_NE(parseInteger(all, "9223372036854775808"), "");
  EXPECT_EQ(IntegerRule({1, 3}).problem(4), "4 is not an integer in 1..3");
  EXPECT_EQ(IntegerRule({1, 3}).problem(3), "");
}

TEST(NumberRulesTest, RealsFromText) {
  RealRule seconds = RealRule::seconds(0.001, 604800);
  double value = 0;
  EXPECT_EQ(parseReal(seconds, "604800", &value), "");
  EXPECT_EQ(value, 604800);
  EXPECT_EQ(parseReal(seconds, "0.001", &value), "");
  EXPECT_EQ(parseReal(seconds, "2.5e1", &value), "");
  EXPECT_EQ(value, 25);
  // The text as given, never a rounded or truncated echo of it.
  for (const char *text :
       {"604800.5", "1e-4", "0", "-1", "inf", "-inf", "nan", "1e400"})
    EXPECT_EQ(parseReal(seconds, text),
              std::string(text) +
                  " is not a number of seconds in 0.001..604800")
        << text;
  EXPECT_EQ(parseReal(seconds, "soon"),
            "'soon' is not a number of seconds in 0.001..604800");
  EXPECT_EQ(parseReal(seconds, " 1"),
            "' 1' is not a number of seconds in 0.001..604800");
  EXPECT_EQ(parseReal(RealRule::above(0), "0"),
            "0 is not a finite number above 0");
  EXPECT_EQ(parseReal(RealRule::atLeast(0), "NaN"),
            "NaN is not a finite number of at least 0");
  EXPECT_EQ(parseReal(RealRule::atLeast(0), "1e308", &value), "");
  EXPECT_EQ(value, 1e308);
}

TEST(NumberRulesTest, ValuesAreNamedExactly) {
  RealRule seconds = RealRule::seconds(0.001, 604800);
  EXPECT_EQ(seconds.problem(604800.5),
            "604800.5 is not a number of seconds in 0.001..604800");
  EXPECT_EQ(seconds.problem(std::nan("")),
            "nan is not a number of seconds in 0.001..604800");
  EXPECT_EQ(seconds.problem(1e300),
            "1e+300 is not a number of seconds in 0.001..604800");
  EXPECT_EQ(seconds.problem(604800), "");
  EXPECT_EQ(formatNumber(0.1), "0.1");
  EXPECT_EQ(formatNumber(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(formatNumber(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(NumberRulesTest, UntrustedBytesAreEscaped) {
  EXPECT_EQ(parseInteger(IntegerRule{1, 2}, llvm::StringRef("1\x1b[2J", 5)),
            "'1\\x1b[2J' is not an integer in 1..2");
  EXPECT_EQ(parseReal(RealRule::atLeast(0), llvm::StringRef("2\0", 2)),
            "'2\\x00' is not a finite number of at least 0");
}
