//===- runtime/Schedule.h - Pipeline schedules as data ----------*- C++ -*-===//
//
// A schedule is, for every rank, the list of actions it performs: run a
// stage on a microbatch (F), send a stage's boundary outputs to a consumer
// on another rank (SEND_F), receive them (RECV_F), and, on the output rank,
// collect a microbatch's model outputs (OUT). B, SEND_B and RECV_B are
// reserved for training. Schedules are generated, simulated for deadlocks
// and printed before they run; one executor (Pipeline.cpp) runs any of them.
//
// Placement: stage k runs on rank k mod WORLD_SIZE. Model outputs are all
// collected on the rank of the last stage (the "collector", a pseudo-stage
// numbered N = stage count): outputs produced elsewhere travel on an edge
// to it like any boundary value.
//
// Generation: every (stage, microbatch) of a rank gets a sort key; the
// rank's actions are its items in key order, each as "RECV_F of every
// remote input edge, F, SEND_F of every remote output edge".
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
// Simulation: every rank has a program counter; sends never block (unbounded
// buffers), receives block until their message is the next one on the edge.
// The simulation fails on a deadlock (listing every rank's stuck action), on
// a stage run before one of its inputs is there, on messages that arrive in
// a different order than received, and on messages never received.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_H
#define PPC_RUNTIME_SCHEDULE_H

#include "lib/Manifest.h"
#include "runtime/ScheduleKind.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace ppc {

struct Placement {
  int numStages = 1;
  int worldSize = 1;

  /// Errors: "4 stages cannot be placed on WORLD_SIZE=3 ranks: the stage
  /// count must equal WORLD_SIZE or be a multiple of it".
  static llvm::Expected<Placement> create(int numStages, int worldSize);

  /// The rank of stage `stage`; the collector (stage == numStages) lives on
  /// the output rank.
  int rankOf(int stage) const {
    return stage >= numStages ? outputRank() : stage % worldSize;
  }
  int outputRank() const { return (numStages - 1) % worldSize; }
  std::vector<int> stagesOf(int rank) const;
  /// "4 stages on 2 ranks: rank 0 [0,2], rank 1 [1,3]"; part of the meta
  /// cache key.
  std::string describe() const;
};

/// The values stage `producer` hands to `consumer` (a later stage, or the
/// collector numStages for model outputs): its outputs `outputs`, ascending.
struct Edge {
  int producer;
  int consumer;
  std::vector<int> outputs;
  /// Whether the consumer is the collector (printed as "out").
  bool collector = false;
};

/// Every edge of the manifest (local and remote), sorted by (producer,
/// consumer). Errors: a model output that is a model input ("model output
/// 0 is model input 0 itself; ppc run does not pass inputs through").
llvm::Expected<std::vector<Edge>> boundaryEdges(const Manifest &manifest);

enum class ActionKind {
  Forward,
  SendF,
  RecvF,
  Output,
  Backward,
  BackwardInput,
  BackwardWeight,
  SendB,
  RecvB
};

struct Action {
  ActionKind kind;
  int stage; ///< The stage run, or the sending / receiving stage.
  int microbatch;
  int edge = -1; ///< SEND_F / RECV_F: index into Schedule::edges.
  int peerRank = -1;

  /// "F stage=2 mb=0", "SEND_F 0->1 mb=0 to=1", "RECV_F 0->1 mb=0 from=0",
  /// "OUT mb=0".
  std::string str(const std::vector<Edge> &edges) const;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int microbatches = 1;
  Placement placement;
  std::vector<Edge> edges;
  /// ranks[r]: rank r's actions in order.
  std::vector<std::vector<Action>> ranks;
  bool training = false;
  /// Transport channels: 1 + edges (inference), 1 + 2*edges (training).
  int channelCount() const {
    return 1 + static_cast<int>(edges.size()) * (training ? 2 : 1);
  }
};

/// The channel of a SEND_F/RECV_F (edge+1) or SEND_B/RECV_B (1 + edges +
/// edge).
int channelOf(const Schedule &schedule, const Action &action);

llvm::Expected<Schedule> buildTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               ScheduleKind kind,
                                               int microbatches);
llvm::Expected<Schedule> trainingScheduleFromCSV(const Manifest &manifest,
                                                 const Placement &placement,
                                                 llvm::StringRef text,
                                                 int microbatches,
                                                 llvm::StringRef name);

/// Builds the schedule of `kind` for all ranks. Errors: those of
/// boundaryEdges(), microbatches < 1.
llvm::Expected<Schedule> buildSchedule(const Manifest &manifest,
                                       const Placement &placement,
                                       ScheduleKind kind, int microbatches);

/// Runs the schedule on the simulator described above. Errors: "schedule
/// deadlocks: rank 0 waits at RECV_F 1->2 mb=0 from=1; rank 1 waits at ...",
/// "schedule runs F stage=2 mb=1 on rank 0 before its input from stage 1",
/// "schedule: messages on edge 0->1 arrive as mb=1 but rank 1 expects
/// mb=0", "schedule: rank 1 never receives SEND_F 0->1 mb=2".
llvm::Error simulateSchedule(const Manifest &manifest,
                             const Schedule &schedule);

/// Prints rank `rank`'s actions, one per line: "schedule: rank=0 3 F
/// stage=0 mb=1".
void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_H
