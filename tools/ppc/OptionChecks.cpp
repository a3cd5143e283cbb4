//===- tools/ppc/OptionChecks.cpp - Checks of numeric options -------------===//
//
// This file implements the validators of OptionChecks.h.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/OptionChecks.h"

#include "lib/Error.h"
#include "runtime/platform/Duration.h"

#include "llvm/ADT/StringExtras.h"

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

/// Reads a byte count: digits with an optional binary suffix K, M, G or T
/// (powers of 1024; "512M", "2G"), as --max-stage-memory takes it.
CLI::Validator byteCountOption() {
  return CLI::Validator(
      [](std::string &value) -> std::string {
        llvm::StringRef text(value);
        std::string bad = "'" + printable(value) +
                          "' is not a byte count above 0 (e.g. 1048576, "
                          "512M, 2G)";
        unsigned shift = 0;
        if (!text.empty() && !llvm::isDigit(text.back())) {
          switch (llvm::toUpper(text.back())) {
          case 'K':
            shift = 10;
            break;
          case 'M':
            shift = 20;
            break;
          case 'G':
            shift = 30;
            break;
          case 'T':
            shift = 40;
            break;
          default:
            return bad;
          }
          text = text.drop_back();
        }
        uint64_t number = 0;
        if (text.empty() || !llvm::all_of(text, llvm::isDigit) ||
            text.getAsInteger(10, number) || number == 0)
          return bad;
        if (number > (uint64_t(INT64_MAX) >> shift))
          return "'" + printable(value) + "' is too large";
        value = std::to_string(number << shift);
        return "";
      },
      "BYTES");
}

} // namespace ppc
