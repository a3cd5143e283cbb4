//===- runtime/schedule/EdgeIndex.h - Each stage's edges ------------------===//
//
// The edges each stage reads and feeds, indexed once per schedule: the
// generators, the lowering, the CSV reader, the simulator and the timeline
// all look them up per action.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_EDGE_INDEX_H
#define PPC_RUNTIME_SCHEDULE_EDGE_INDEX_H

#include "runtime/schedule/Schedule.h"

#include <vector>

namespace ppc {

/// Per stage (0..N, N = the collector): the indices of the edges it reads
/// and of those it feeds, so that building and simulating a schedule never
/// scans every edge for every action.
struct EdgeIndex {
  std::vector<std::vector<int>> in, out;

  explicit EdgeIndex(const Schedule &schedule)
      : in(schedule.placement.numStages() + 1),
        out(schedule.placement.numStages() + 1) {
    for (size_t e = 0; e < schedule.edges.size(); ++e) {
      in[schedule.edges[e].consumer].push_back(static_cast<int>(e));
      out[schedule.edges[e].producer].push_back(static_cast<int>(e));
    }
  }
};

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_EDGE_INDEX_H
