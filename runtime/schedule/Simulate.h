//===- runtime/schedule/Simulate.h - Deadlock simulation ------------------===//
//
// Simulation: every rank has a program counter; sends never block (unbounded
// buffers), receives block until their message is the next one on the
// channel. The simulation fails on a deadlock (listing every rank's stuck
// action), on an action run before one of its inputs is there, on messages
// that arrive in a different order than received, on messages never
// received, and on a (stage, microbatch) whose actions are missing or
// duplicated. It costs O(actions + stages x microbatches).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_SIMULATE_H
#define PPC_RUNTIME_SCHEDULE_SIMULATE_H

#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"

namespace ppc {

/// Runs the schedule on the simulator described above; the schedule's
/// edges carry all it needs of the manifest. Errors, one line each: a
/// deadlock (every stuck rank and its action; in training named by the
/// compute action it waits for and the message), an action before its
/// input or gradients, a W before its I, messages out of order on an edge,
/// a message never received, an action on the wrong rank or out of range;
/// in training also a (stage, microbatch) whose F, B, I or W is missing,
/// duplicated, or both B and I/W. A schedule with an origin names it.
llvm::Error simulateSchedule(const Schedule &schedule);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_SIMULATE_H
