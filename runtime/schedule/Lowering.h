//===- runtime/schedule/Lowering.h - Messages around compute orders -------===//
//
// The communication lowering: a generator (Generators.h) or a compute_only
// CSV gives every rank's compute order only; one pass puts the messages
// around it, for inference and training alike: RECV_F of every remote input
// edge before an F (or OUT), SEND_F of every remote output edge after it,
// RECV_B before a B or I, SEND_B after it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_LOWERING_H
#define PPC_RUNTIME_SCHEDULE_LOWERING_H

#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/Schedule.h"

#include <vector>

namespace ppc {

/// Per rank, its compute actions in order (F, B, I, W; OUT in inference).
using Orders = std::vector<std::vector<Action>>;

/// Fills schedule.ranks from every rank's compute order: RECV_F of every
/// remote input edge before an F or OUT and SEND_F of every remote output
/// edge after it; RECV_B of every remote output edge before a B or I and SEND_B
/// of every remote input edge after it. A stage runs its forwards (and its
/// backwards) in microbatch order in every generated schedule, so each
/// channel's messages are sent and received in the same order.
void addCommunication(Schedule &schedule, const EdgeIndex &index,
                      const Orders &orders);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_LOWERING_H
