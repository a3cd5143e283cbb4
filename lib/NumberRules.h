//===- lib/NumberRules.h - What a numeric option accepts --------*- C++ -*-===//
//
// The rule of every numeric option of ppc, said in one phrase ("an integer
// in 1..65536", "a finite number above 0", "a number of seconds in
// 0.001..604800"), and its check. The command line checks text
// (tools/ppc/OptionChecks.h); the library checks the values of its options
// structs (RunOptions, TrainOptions, LaunchOptions) and the launch
// environment. Both report a value that breaks its rule as "VALUE is not
// PHRASE": the value as it was given (text that is no number quoted, every
// byte escaped), the whole rule, one line.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_NUMBERRULES_H
#define PPC_LIB_NUMBERRULES_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <limits>
#include <string>

namespace ppc {

/// An integer in lo..hi (both included).
struct IntegerRule {
  IntegerRule(int64_t lo, int64_t hi, llvm::StringRef unit = "",
              llvm::StringRef note = "")
      : lo(lo), hi(hi), unit(unit), note(note) {}

  int64_t lo;
  int64_t hi;
  /// The unit of the number, plural ("milliseconds"); empty for a count.
  llvm::StringRef unit;
  /// Said after the range, in parentheses: what a special value means.
  llvm::StringRef note;

  /// "an integer in 1..65536", "a number of milliseconds in 1..604800000",
  /// "an integer in 0..8 (0: the default; at most 4 per core)".
  std::string phrase() const;
  /// "" when `value` keeps the rule, else "VALUE is not PHRASE".
  std::string problem(int64_t value) const;
  /// Reads `text` (decimal digits after an optional sign, nothing else)
  /// into `value`; returns "" when it is a number that keeps the rule, else
  /// the problem: "0 is not an integer in 1..65536", "'1.5' is not an
  /// integer in 1..65536".
  std::string parse(llvm::StringRef text, int64_t &value) const;
};

/// A real number: finite, at least lo (above lo with `aboveLo`), at most
/// hi.
struct RealRule {
  /// A finite number of at least `lo` (momentum).
  static RealRule atLeast(double lo) { return {lo, false, kNoMax, ""}; }
  /// A finite number above `lo` (a learning rate).
  static RealRule above(double lo) { return {lo, true, kNoMax, ""}; }
  /// A number of seconds in lo..hi (a timeout).
  static RealRule seconds(double lo, double hi) {
    return {lo, false, hi, "seconds"};
  }

  /// The cost of one action of a stage (ppc schedule --costs, a
  /// manifest's predicted_cost): a number in 0..1e+30, so that a
  /// schedule's sum over every action of every stage stays finite.
  static RealRule cost() { return {0, false, 1e30, ""}; }
  static constexpr double kNoMax = std::numeric_limits<double>::max();
  double lo;
  bool aboveLo;
  double hi;
  /// The unit of the number, plural ("seconds"); empty for none.
  llvm::StringRef unit;

  /// "a finite number above 0", "a finite number of at least 0", "a number
  /// of seconds in 0.001..604800".
  std::string phrase() const;
  /// "" when `value` keeps the rule (NaN and infinities never do), else
  /// "VALUE is not PHRASE" with VALUE as formatNumber() prints it.
  std::string problem(double value) const;
  /// Reads `text` as strtod does (inf and nan included, nothing around
  /// it) into `value`; returns "" or the problem, which names `text` as
  /// given: "1e-9 is not a number of seconds in 0.001..604800", "'fast' is
  /// not a finite number above 0".
  std::string parse(llvm::StringRef text, double &value) const;
};

/// Success when `problem` (a rule's problem()) is empty, else an OptionError
/// (lib/Error.h) naming `field`: "microbatches 0 is not an integer in
/// 1..65536".
llvm::Error checkOption(llvm::StringRef field, const std::string &problem);

/// `x` in the fewest significant digits that read back as `x`, a whole
/// number below 10^15 in full ("0.1", "604800", "604800.5", "1e+300",
/// "inf", "nan").
std::string formatNumber(double x);

} // namespace ppc

#endif // PPC_LIB_NUMBERRULES_H
