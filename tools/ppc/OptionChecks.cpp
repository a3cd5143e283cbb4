//===- tools/ppc/OptionChecks.cpp - Checks of numeric options -------------===//
//
// This file implements the validators of OptionChecks.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/OptionChecks.h"

#include "runtime/platform/Duration.h"

#include <cstdio>

namespace ppc {

CLI::Validator integerOption(const IntegerRule &rule) {
  return CLI::Validator(
      [rule](std::string &text) -> std::string {
        int64_t value = 0;
        std::string problem = rule.parse(text, value);
        if (problem.empty())
          text = std::to_string(value);
        return problem;
      },
      std::to_string(rule.lo) + ".." + std::to_string(rule.hi));
}

CLI::Validator intInRange(int64_t lo, int64_t hi) {
  return integerOption(IntegerRule{lo, hi});
}

CLI::Validator seedOption() {
  return intInRange(0, std::numeric_limits<int64_t>::max());
}

CLI::Validator numberOption(const RealRule &rule) {
  std::string range = rule.hi < std::numeric_limits<double>::max()
                          ? formatNumber(rule.lo) + ".." + formatNumber(rule.hi)
                          : (rule.aboveLo ? ">" : ">=") + formatNumber(rule.lo);
  return CLI::Validator(
      [rule](std::string &text) -> std::string {
        double value = 0;
        std::string problem = rule.parse(text, value);
        if (problem.empty()) {
          // Exact: %.17g reads back as the same double.
          char canonical[32];
          std::snprintf(canonical, sizeof canonical, "%.17g", value);
          text = canonical;
        }
        return problem;
      },
      range);
}

CLI::Validator finiteAtLeast(double lo) {
  return numberOption(RealRule::atLeast(lo));
}

CLI::Validator finiteAbove(double lo) {
  return numberOption(RealRule::above(lo));
}

CLI::Validator pathOption() {
  return CLI::Validator(
      [](std::string &text) -> std::string {
        return text.empty() ? "'' names no file or directory" : "";
      },
      "PATH");
}

CLI::Validator durationOption(double lo) {
  return numberOption(RealRule::seconds(lo, kMaxDurationSeconds));
}

} // namespace ppc
