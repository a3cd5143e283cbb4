//===- tools/ppc/OptionChecks.h - Checks of numeric options -----*- C++ -*-===//
//
// The CLI11 validators of every numeric option of every subcommand, made from
// the rules of lib/NumberRules.h. Each reads the option's text under its
// rule and, on success, hands CLI11 the number in canonical form (so CLI11's
// own conversion, which would read "010" as octal or "1e10" as an error,
// sees only what the rule accepted); on failure CLI11 reports "--FLAG:
// VALUE is not RULE", one line ("--steps: 0 is not an integer in
// 1..2147483647"). The library re-checks the same rules on its options
// structs for its own users.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_OPTIONCHECKS_H
#define PPC_TOOLS_PPC_OPTIONCHECKS_H

#include "lib/NumberRules.h"

#include <CLI/CLI.hpp>

#include <climits>

namespace ppc {

/// An integer under `rule`.
CLI::Validator integerOption(const IntegerRule &rule);
/// An integer in lo..hi (hi defaults to an int's largest).
CLI::Validator intInRange(int64_t lo, int64_t hi = INT_MAX);

/// A seed of random numbers (--seed): an integer in
/// 0..9223372036854775807, in decimal ("--seed: 0x10 is not an integer in
/// 0..9223372036854775807").
CLI::Validator seedOption();

/// A real number under `rule`.
CLI::Validator numberOption(const RealRule &rule);
/// A finite number of at least `lo` ("--momentum").
CLI::Validator finiteAtLeast(double lo);
/// A finite number above `lo` ("--lr").
CLI::Validator finiteAbove(double lo);
/// A path (a file or a directory): any text but the empty one, which names
/// nothing ("--save: '' names no file or directory"), so that a given
/// option is honoured or refused, never dropped as if absent.
CLI::Validator pathOption();
/// A number of seconds in lo..kMaxDurationSeconds
/// (runtime/platform/Duration.h): a timeout (lo = kMinTimeoutSeconds) or a
/// grace period (lo = 0).
CLI::Validator durationOption(double lo);
/// A byte count above 0: digits with an optional binary suffix K, M, G or T
/// (powers of 1024; "512M", "2G"): --max-stage-memory, --max-shard-size.
CLI::Validator byteCountOption();

} // namespace ppc

#endif // PPC_TOOLS_PPC_OPTIONCHECKS_H
