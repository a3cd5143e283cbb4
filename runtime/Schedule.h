//===- runtime/Schedule.h - Pipeline schedules as data ----------*- C++ -*-===//
//
// A schedule is, for every rank, the list of actions it performs: run a
// stage on a microbatch (F), send a stage's boundary outputs to a consumer
// on another rank (SEND_F), receive them (RECV_F), and, on the output rank
// of an inference schedule, collect a microbatch's model outputs (OUT).
// Training schedules add the backward: B (a stage's whole backward), or I
// (input gradients) followed later by W (weight gradients), and the
// gradients' messages SEND_B / RECV_B. Schedules are generated or read from
// a CSV file, simulated for deadlocks and printed before they run; one
// executor runs any of them. docs/schedules.md shows every kind.
//
// Placement: stage k runs on rank k mod WORLD_SIZE. In inference, model
// outputs are all collected on the rank of the last stage (the "collector",
// a pseudo-stage numbered N = stage count): outputs produced elsewhere
// travel on an edge to it like any boundary value. Training has no
// collector: the loss is computed inside the B (or I) of the stage that
// produces the model output.
//
// Inference generation: every (stage, microbatch) of a rank gets a sort key;
// the rank's actions are its items in key order, each as "RECV_F of every
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
// Training generation: first every rank's compute order (F, B, I, W), then
// the communication around it (RECV_F before an F, SEND_F after it, RECV_B
// before a B or I, SEND_B after it, for every edge whose two stages are on
// different ranks). The compute orders, for P stages and M microbatches:
//   gpipe: all forwards in inference gpipe order, then all backwards
//          (later stages first, microbatches 0..M-1).
//   1f1b:  per stage s, Megatron's order: min(P-s-1, M) warm-up forwards,
//          then one F one B, then the cool-down backwards; at most P-s
//          microbatches in flight. A rank holding several stages runs their
//          actions in the order they start in a unit-time simulation with a
//          device per stage (later stage first on ties).
//   interleaved-1f1b: per rank, PyTorch's ScheduleInterleaved1F1B
//          (Narayanan et al. 2021, depth first), for any M >= 1.
//   zb-h1: 1f1b with B split into I and W; stage s runs the W of
//          microbatch k after the I of microbatch k+s, and its last s W's
//          in the cool-down (Qi et al. 2023, ZB-H1).
// Every one is deadlock-free for a chain of stages, and so for any manifest
// (a manifest's dependencies are a subset of the chain's transitive ones).
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

/// Printed F, SEND_F, RECV_F, OUT, B, I, W, SEND_B, RECV_B.
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
  /// SEND_F / RECV_F / SEND_B / RECV_B: index into Schedule::edges. For
  /// SEND_B / RECV_B it is the FORWARD edge (producer -> consumer) whose
  /// gradients travel back: SEND_B runs on the consumer's rank with stage =
  /// edge.consumer, RECV_B on the producer's rank with stage = edge.producer.
  int edge = -1;
  int peerRank = -1;

  /// "F stage=2 mb=0", "SEND_F 0->1 mb=0 to=1", "RECV_F 0->1 mb=0 from=0",
  /// "OUT mb=0", "B stage=1 mb=0", "I stage=1 mb=0", "W stage=1 mb=0",
  /// "SEND_B 0->1 mb=0 to=0", "RECV_B 0->1 mb=0 from=1".
  std::string str(const std::vector<Edge> &edges) const;
  /// Whether this is F, B, I or W.
  bool isCompute() const;
  /// A compute action as a CSV or grid cell, {stage}{F|B|I|W}{microbatch}:
  /// "0F1", "1B0"; "" for any other action.
  std::string cell() const;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int microbatches = 1;
  Placement placement;
  /// Inference: boundaryEdges(). Training: the same without the collector's.
  std::vector<Edge> edges;
  /// ranks[r]: rank r's actions in order.
  std::vector<std::vector<Action>> ranks;
  bool training = false;
  /// Where the schedule came from, for messages: empty when generated, the
  /// file's name when read from a CSV (then `kind` means nothing).
  std::string origin;

  /// Transport channels: 1 + edges (inference), 1 + 2*edges (training).
  /// Channel 0 is start-up.
  int channelCount() const;
};

/// The channel of a SEND_F/RECV_F (edge+1) or SEND_B/RECV_B (1 +
/// edges.size() + edge); -1 for any other action.
int channelOf(const Schedule &schedule, const Action &action);

/// Builds the inference schedule of `kind` for all ranks. Errors: those of
/// boundaryEdges(), microbatches < 1, a training-only kind ("schedule zb-h1
/// is for training (ppc train); ppc run takes gpipe or 1f1b").
llvm::Expected<Schedule> buildSchedule(const Manifest &manifest,
                                       const Placement &placement,
                                       ScheduleKind kind, int microbatches);

/// Builds the training schedule of `kind` for all ranks (see above); run
/// simulateSchedule() on it before use. Errors: those of boundaryEdges(),
/// microbatches < 1, "the placement has 4 stages but the manifest 3",
/// "interleaved-1f1b needs at least 2 stages per rank (2 stages on 2
/// ranks)".
llvm::Expected<Schedule> buildTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               ScheduleKind kind,
                                               int microbatches);

/// Compute actions of every rank in PyTorch pipelining's CSV layout
/// (torch.distributed.pipelining's _dump_csv, format "compute_only"): row r
/// is rank r's compute actions in order, as cells like "0F1", separated by
/// ",", each row ended by "\r\n" (Python's csv writer). Communication is
/// not written; trainingScheduleFromCSV() derives it again.
std::string scheduleToCSV(const Schedule &schedule);

/// Reads such a CSV (rank = row; empty cells are idle slots and skipped;
/// "\n" or "\r\n" line ends; cells may be quoted) into a training
/// schedule, deriving SEND/RECV actions, then simulates it. `name` names the
/// text in messages. Errors, one line each: microbatches < 1 or a placement
/// that does not match the manifest (as buildTrainingSchedule); "schedule
/// 'x.csv' has 1 row; expected one per rank (2)", "schedule 'x.csv' has more
/// than 2 rows; expected one per rank"; "schedule 'x.csv' row 1 (rank 0), cell
/// 4: '0X1' is not a compute action like 0F1, 1B0, 0I3 or 0W3", "...: stage 9
/// is out of range (4 stages)",
/// "...: microbatch 8 is out of range (8 microbatches)", "...: stage 1 runs
/// on rank 1 (stage k on rank k mod 2), not on rank 0", "schedule 'x.csv'
/// row 1 (rank 0) has more than 24 actions (3 per stage and microbatch)";
/// and simulateSchedule()'s, as "schedule 'x.csv' deadlocks: ...".
llvm::Expected<Schedule> trainingScheduleFromCSV(const Manifest &manifest,
                                                 const Placement &placement,
                                                 llvm::StringRef text,
                                                 int microbatches,
                                                 llvm::StringRef name);

/// Per stage, the largest number of microbatches whose forward ran and
/// whose backward (B, or W when split) has not, walking each rank's list in
/// order. For inference schedules (no backward) it is the microbatch count.
std::vector<int> peakActivations(const Schedule &schedule);

/// The action grid: a header line, then one line per rank ("rank 0: 0F0
/// 0F1 . ...") whose columns are the time steps of a unit-time simulation
/// (F=1, B=2, I=1, W=1, communication free; a B fills two columns, idle
/// steps are "."), and for training a last line "peak activations:
/// stage0=4 stage1=3 ...". The schedule must have passed simulateSchedule().
void printGrid(const Schedule &schedule, llvm::raw_ostream &os);

/// Runs the schedule on the simulator described above. Errors: "schedule
/// deadlocks: rank 0 waits at RECV_F 1->2 mb=0 from=1; rank 1 waits at ...",
/// "schedule runs F stage=2 mb=1 on rank 0 before its input from stage 1",
/// "schedule: messages on edge 0->1 arrive as mb=1 but rank 1 expects
/// mb=0", "schedule: rank 1 never receives SEND_F 0->1 mb=2". Training
/// schedules also: "schedule misses B stage=1 mb=2", "schedule runs 1B0
/// twice", "schedule runs both 1B0 and 1I0", "schedule runs B stage=0 mb=1
/// on rank 0 before its gradients from stage 1", "schedule runs W stage=1
/// mb=0 on rank 1 before I stage=1 mb=0", "schedule: gradients on edge 0->1
/// arrive as mb=1 but rank 0 expects mb=0", and deadlocks named by the
/// compute action a rank waits for: "schedule deadlocks: rank 0 waits at
/// 0B1 for the gradients of stage 0 -> 1 from rank 1; rank 1 waits at 1F2
/// for the outputs of stage 0 -> 1 from rank 0". A schedule with an origin
/// says so: "schedule 'x.csv' deadlocks: ...".
llvm::Error simulateSchedule(const Manifest &manifest,
                             const Schedule &schedule);

/// Prints rank `rank`'s actions, one per line: "schedule: rank=0 3 F
/// stage=0 mb=1".
void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_H
