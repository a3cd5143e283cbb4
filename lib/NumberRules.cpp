//===- lib/NumberRules.cpp - What a numeric option accepts ----------------===//
//
// This file implements IntegerRule, RealRule and formatNumber
// (NumberRules.h).
//
//===----------------------------------------------------------------------===//
#include "lib/NumberRules.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ppc {

namespace {
/// Text that is no number at all, quoted: "'fast' is not ...".
std::string notANumber(llvm::StringRef text, const std::string &phrase) {
  return "'" + printable(text) + "' is not " + phrase;
}
} // namespace

std::string IntegerRule::phrase() const {
  std::string out = unit.empty() ? "an integer" : "a number of " + unit.str();
  out += " in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (!note.empty())
    out += " (" + note.str() + ")";
  return out;
}

std::string IntegerRule::problem(int64_t value) const {
  if (value >= lo && value <= hi)
    return "";
  return std::to_string(value) + " is not " + phrase();
}

std::string IntegerRule::parse(llvm::StringRef text, int64_t &value) const {
  llvm::StringRef digits = text;
  bool negative = digits.consume_front("-");
  if (!negative)
    digits.consume_front("+");
  if (digits.empty() || !llvm::all_of(digits, llvm::isDigit))
    return notANumber(text, phrase());
  // What is left to fail is the magnitude: more than int64 holds.
  std::string canonical = (negative ? "-" : "") + digits.str();
  long long parsed = 0;
  if (llvm::StringRef(canonical).getAsInteger(10, parsed) || parsed < lo ||
      parsed > hi)
    return printable(text) + " is not " + phrase();
  value = parsed;
  return "";
}

std::string RealRule::phrase() const {
  std::string what =
      unit.empty() ? std::string("number") : "number of " + unit.str();
  if (hi < kNoMax)
    return "a " + what +
           (aboveLo ? " above " + formatNumber(lo) + " and at most " +
                          formatNumber(hi)
                    : " in " + formatNumber(lo) + ".." + formatNumber(hi));
  return "a finite " + what + (aboveLo ? " above " : " of at least ") +
         formatNumber(lo);
}

std::string RealRule::problem(double value) const {
  if (std::isfinite(value) && (aboveLo ? value > lo : value >= lo) &&
      value <= hi)
    return "";
  return formatNumber(value) + " is not " + phrase();
}

std::string RealRule::parse(llvm::StringRef text, double &value) const {
  std::string copy = text.str();
  // strtod skips leading space; a number on the command line has none.
  if (copy.empty() || llvm::isSpace(copy[0]))
    return notANumber(text, phrase());
  char *end = nullptr;
  double parsed = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size())
    return notANumber(text, phrase());
  if (!problem(parsed).empty())
    return printable(text) + " is not " + phrase();
  value = parsed;
  return "";
}

llvm::Error checkOption(llvm::StringRef field, const std::string &problem) {
  if (problem.empty())
    return llvm::Error::success();
  return makeOptionError(field, problem);
}

std::string formatNumber(double x) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x < 0 ? "-inf" : "inf";
  char text[32];
  // Whole numbers in full ("604800", not "6.048e+05").
  if (x == std::floor(x) && std::fabs(x) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", x);
    return text;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, x);
    if (std::strtod(text, nullptr) == x)
      break;
  }
  return text;
}

} // namespace ppc
