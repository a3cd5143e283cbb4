//===- runtime/schedule/Grid.h - The printed action grid ------------------===//
//
// What ppc schedule prints: every rank's compute actions on the clock of
// a unit-time run.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_GRID_H
#define PPC_RUNTIME_SCHEDULE_GRID_H

#include "runtime/schedule/Schedule.h"

namespace llvm {
class raw_ostream;
}

namespace ppc {

/// The action grid: a header line, then one line per rank ("rank 0: 0F0
/// 0F1 . ...") whose columns are the time steps of a unit-time simulation
/// (F=1, B=2, I=1, W=1, communication free; a B fills two columns, idle
/// steps are "."), and for training a last line "peak activations:
/// stage0=4 stage1=3 ...". The schedule must have passed simulateSchedule().
void printGrid(const Schedule &schedule, llvm::raw_ostream &os);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_GRID_H
