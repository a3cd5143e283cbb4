//===- runtime/schedule/Generators.h - Every kind's compute orders --------===//
//
// A schedule kind is one line of Schedules.def and one generator here,
// which computes every rank's compute order only (F, B, I, W, and OUT on
// the output rank in inference); Lowering.h adds the messages and Build.h
// puts the two together.
//
// Inference orders: every (stage, microbatch) of a rank, and the collector's
// OUT, gets a sort key; the rank's compute order is its items in key order.
//   gpipe: key (stage, microbatch): a rank runs all microbatches through
//          its first stage, then through its next, ...
//   1f1b:  key (stage + microbatch, -stage): the forward-only order of
//          1F1B (inference has no backward): items in the order of an ideal
//          synchronous pipeline's clock, later stages first on ties, so a
//          rank holding several stages drains each microbatch as soon as it
//          can instead of holding all of them as gpipe does.
// Both are deadlock-free: a stage only waits on earlier stages of the same
// microbatch, which have strictly smaller keys on every rank. The simulator
// checks it anyway.
//
// Training orders, for P stages and M microbatches:
//   gpipe: all forwards in inference gpipe order, then all backwards
//          (later stages first, microbatches 0..M-1).
//   1f1b:  per stage s, Megatron's order: min(P-s-1, M) warm-up forwards,
//          then one F one B, then the cool-down backwards; at most P-s
//          microbatches in flight. A rank holding several stages runs their
//          actions in the order they start in a unit-time simulation with a
//          device per stage (later stage first on ties).
//   interleaved-1f1b: per rank, PyTorch's ScheduleInterleaved1F1B
//          (Narayanan et al. 2021, depth first), for any M >= 1; it needs
//          the loop placement.
//   zb-h1: 1f1b with B split into I and W; stage s runs the W of
//          microbatch k after the I of microbatch k+s, and its last s W's
//          in the cool-down (Qi et al. 2023, ZB-H1).
// Every one is deadlock-free for a chain of stages, and so for any manifest
// (a manifest's dependencies are a subset of the chain's transitive ones).
// gpipe and 1f1b are so on any placement (gpipe runs a rank's stages in
// order; 1f1b merges per-stage orders by their start times).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_GENERATORS_H
#define PPC_RUNTIME_SCHEDULE_GENERATORS_H

#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/Lowering.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"

namespace ppc {

/// A generator: every rank's compute order for `schedule`, whose kind,
/// placement, microbatches, edges and training flag are set. Errors: the
/// kind's refusals (of a placement, a stage count or a microbatch count),
/// which each generator's comment names.
using OrderGenerator = llvm::Expected<Orders> (*)(const Schedule &,
                                                  const EdgeIndex &);

/// The generators of Schedules.def, one per kind.
#define SCHEDULE(Enum, Name, Inference, Placement, Help, Gen)                  \
  llvm::Expected<Orders> Gen(const Schedule &schedule, const EdgeIndex &index);
#include "runtime/schedule/Schedules.def"

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_GENERATORS_H
