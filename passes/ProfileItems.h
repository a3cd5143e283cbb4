//===- passes/ProfileItems.h - Measured time of each item -------*- C++ -*-===//
//
// The analysis behind `ppc split --cost profile`: how long each item of an
// ItemGraph takes on this machine, measured on a real example input.
//
//  1. Copy the model graph and put a marker operation before each item and
//     after the last one. A marker records the steady clock and has side
//     effects, so the graph executor neither removes nor moves work across
//     it; everything else runs as in the model (the same interpreter and
//     optimizations a stage module gets).
//  2. Run the copy `warmup` times untimed (the executor profiles and
//     optimizes the graph on its first runs), then `repetitions` times; an
//     item's time is the median over the timed runs of the time between
//     its marker and the next. Times are CPU time of the calling thread
//     (CLOCK_THREAD_CPUTIME_ID): with one compute thread that is the work,
//     and time-sharing with other processes does not count. The example inputs
//     are cloned for every run (a model may write its inputs in place).
//
// Item times measured inside the whole model are not quite what a stage
// costs when a rank runs it alone, over and over: then only that stage's
// weights compete for the caches (resnet18's layer4 at batch 5 takes about
// half as long alone as inside the whole model on a 32 MiB L3). So
// profileStageTimes() also times candidate stages alone, built as their
// stage modules and run on their real inputs, and refineProfiledCosts()
// (passes/RefineProfile.h) corrects the item times with them.
//
// The measurement uses however many threads the process allows; ppc split
// bounds them to one first (boundThreads(1), runtime/platform/Threads.h), as a
// rank with --threads 1 runs, so item times add up to stage times.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_PROFILEITEMS_H
#define PPC_PASSES_PROFILEITEMS_H

#include "lib/ItemGraph.h"
#include "lib/PartitionPlan.h"

#include "llvm/Support/Error.h"

#include <torch/csrc/jit/api/module.h>

#include <vector>

namespace ppc {

struct ProfileOptions {
  int warmup = 2;
  /// Timed runs: at least minRepetitions, then more until the timed runs
  /// took minSeconds or maxRepetitions were made.
  int minRepetitions = 5;
  int maxRepetitions = 25;
  double minSeconds = 0.5;
};

/// Median nanoseconds of each item of `graph` (built from `module`'s
/// forward; `module` may be null for a graph without self) on `example`
/// (the model inputs, already checked against the graph). Errors: the model
/// failing on the example ("cannot run the model on the example input:
/// mat1 and mat2 shapes cannot be multiplied (5x8 and 16x16)").
llvm::Expected<std::vector<int64_t>>
profileItemTimes(const ItemGraph &graph, const torch::jit::Module *module,
                 const std::vector<c10::IValue> &example,
                 const ProfileOptions &options = {});

/// Median nanoseconds of each stage of `plan` (verified; built from
/// `module`'s forward) run alone as the stage module ppc split would write,
/// on its real inputs: the outputs of the stages before it on `example`.
/// Stages are timed in interleaved rounds (0, 1, ..., then again), inputs
/// cloned for every run. Errors: a stage that cannot be built, or a run
/// failing ("cannot run stage 1 on the example input: ...").
llvm::Expected<std::vector<int64_t>>
profileStageTimes(const PartitionPlan &plan, const torch::jit::Module &module,
                  const std::vector<c10::IValue> &example,
                  const ProfileOptions &options = {});

} // namespace ppc

#endif // PPC_PASSES_PROFILEITEMS_H
