//===- runtime/schedule/Lowering.cpp - Messages around compute orders -----===//
//
// This file implements addCommunication, the pass that turns compute orders
// into a schedule's actions (see Lowering.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Lowering.h"

namespace ppc {

void addCommunication(Schedule &schedule, const EdgeIndex &index,
                      const Orders &orders) {
  const Placement &placement = schedule.placement;
  for (size_t r = 0; r < orders.size(); ++r) {
    std::vector<Action> &actions = schedule.ranks[r];
    int rank = static_cast<int>(r);
    for (const Action &a : orders[r]) {
      int s = a.stage, m = a.microbatch;
      auto remote = [&](int e, bool toConsumer) {
        const Edge &edge = schedule.edges[e];
        int peer = placement.rankOf(toConsumer ? edge.consumer : edge.producer);
        return peer == rank ? -1 : peer;
      };
      switch (a.kind) {
      case ActionKind::Forward:
      case ActionKind::Output:
        for (int e : index.in[s])
          if (int peer = remote(e, false); peer >= 0)
            actions.push_back({ActionKind::RecvF, s, m, e, peer});
        actions.push_back(a);
        for (int e : index.out[s])
          if (int peer = remote(e, true); peer >= 0)
            actions.push_back({ActionKind::SendF, s, m, e, peer});
        break;
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
        for (int e : index.out[s])
          if (int peer = remote(e, true); peer >= 0)
            actions.push_back({ActionKind::RecvB, s, m, e, peer});
        actions.push_back(a);
        for (int e : index.in[s])
          if (int peer = remote(e, false); peer >= 0)
            actions.push_back({ActionKind::SendB, s, m, e, peer});
        break;
      default:
        actions.push_back(a);
        break;
      }
    }
  }
}

} // namespace ppc
