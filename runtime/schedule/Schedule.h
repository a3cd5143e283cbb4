//===- runtime/schedule/Schedule.h - Pipeline schedules as data -----------===//
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
// Placement (Placement.h) is a stage -> rank table. In inference, model
// outputs are all collected on the rank of the last stage (the "collector",
// a pseudo-stage numbered N = stage count): outputs produced elsewhere
// travel on an edge to it like any boundary value. Training has no
// collector: the loss is computed inside the B (or I) of the stage that
// produces the model output.
//
// Generation: a schedule kind is one line of Schedules.def and one
// generator, which computes every rank's compute order only (F, B, I, W,
// and OUT on the output rank in inference). One pass, addCommunication,
// then puts the messages around it, for inference and training alike:
// RECV_F of every remote input edge before an F (or OUT), SEND_F of every
// remote output edge after it, RECV_B before a B or I, SEND_B after it.
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
// Simulation: every rank has a program counter; sends never block (unbounded
// buffers), receives block until their message is the next one on the
// channel. The simulation fails on a deadlock (listing every rank's stuck
// action), on an action run before one of its inputs is there, on messages
// that arrive in a different order than received, on messages never
// received, and on a (stage, microbatch) whose actions are missing or
// duplicated. It costs O(actions + stages x microbatches).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_SCHEDULE_H
#define PPC_RUNTIME_SCHEDULE_SCHEDULE_H

#include "lib/Manifest.h"
#include "runtime/schedule/Placement.h"
#include "runtime/schedule/ScheduleKind.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace ppc {

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

/// The action kinds, one per line of Actions.def.
enum class ActionKind {
#define ACTION(Enum, Name, Letter, Category, UnitTime) Enum,
#include "runtime/schedule/Actions.def"
};

/// What Actions.def says about a kind.
struct ActionInfo {
  /// "F", "SEND_F", ...
  llvm::StringRef name;
  /// The CSV and grid letter of a compute action ('F', 'B', 'I', 'W'); 0
  /// for any other.
  char letter;
  /// The trace category: "compute", "send", "recv" or "other".
  llvm::StringRef category;
  /// Time steps in the unit-time model (F=1, B=2, I=1, W=1, others 0).
  int unitTime;
};
const ActionInfo &actionInfo(ActionKind kind);

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
/// boundaryEdges(), microbatches < 1, a kind not marked for inference in
/// Schedules.def (the message lists those that are), and the generator's.
llvm::Expected<Schedule> buildSchedule(const Manifest &manifest,
                                       const Placement &placement,
                                       ScheduleKind kind, int microbatches);

/// Builds the training schedule of `kind` for all ranks (see above); run
/// simulateSchedule() on it before use. Errors: those of boundaryEdges(),
/// microbatches < 1, a placement whose stage count is not the manifest's,
/// and the generator's: interleaved-1f1b refuses fewer than 2 stages per
/// rank and any placement but loop.
llvm::Expected<Schedule> buildTrainingSchedule(const Manifest &manifest,
                                               const Placement &placement,
                                               ScheduleKind kind,
                                               int microbatches);

/// buildTrainingSchedule() on the placement `style` (Placement.h), by
/// default the kind's own (Schedules.def), then simulateSchedule(): what
/// `ppc schedule` and chooseSchedule() run. Errors: Placement::create's and
/// those two's.
llvm::Expected<Schedule>
buildSimulatedTrainingSchedule(const Manifest &manifest, ScheduleKind kind,
                               int worldSize, int microbatches,
                               llvm::StringRef style = "");

/// PyTorch pipelining's two CSV layouts (torch.distributed.pipelining's
/// _dump_csv / _load_csv). Row r is rank r's actions in order, as cells
/// separated by ",", each row ended by "\r\n" (Python's csv writer).
///   compute_only: compute cells {stage}{F|B|I|W}{microbatch} ("0F1");
///     communication is derived (addCommunication).
///   compute_comms: the same with the messages: {stage}SEND_F{mb},
///     RECV_F, SEND_B, RECV_B, one WAIT_SEND_F / WAIT_SEND_B per send, the
///     FSDP cells UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD (no
///     microbatch) and "(0F3;1B2)OVERLAP_F_B" (compute parts run in turn).
///     SEND_F of stage s stands for a SEND_F on every edge from s to another
///     rank, RECV_F for every edge into s from another rank; SEND_B and
///     RECV_B likewise backwards. Waits are checked and dropped (ppc's
///     links retire sends themselves and flush them at the end of a step),
///     FSDP cells are dropped.
enum class CSVLayout { ComputeOnly, ComputeComms };
/// "compute_only" or "compute_comms".
llvm::StringRef csvLayoutName(CSVLayout layout);

/// Every rank's actions in `layout`. compute_comms writes one cell per
/// (kind, stage, microbatch) of consecutive messages, and each send's wait
/// where PyTorch's _add_wait_send puts it: a forward send's after the local
/// B or I of its stage and microbatch, every other one at the row's end.
std::string scheduleToCSV(const Schedule &schedule,
                          CSVLayout layout = CSVLayout::ComputeOnly);

/// The placement a schedule CSV (either layout) implies for `numStages`
/// stages on `worldSize` ranks: a stage runs on the row whose compute cells
/// name it. `name` names the text in messages. Errors, one line each, named
/// by file, row and cell where there is one: a row count other than
/// `worldSize`, a cell that is no action of either layout, a stage out of
/// range, a stage on two rows, a stage on no row, a row with no stage.
llvm::Expected<Placement> placementFromCSV(llvm::StringRef text, int numStages,
                                           int worldSize, llvm::StringRef name);

/// Reads such a CSV (rank = row; empty cells are idle slots and skipped;
/// "\n" or "\r\n" line ends; cells may be quoted; a UTF-8 byte order mark
/// is skipped) into a training schedule on `placement` (usually
/// placementFromCSV()'s), then simulates it. The layout is compute_comms
/// when any cell is a communication or FSDP cell, and then the file's
/// messages are the schedule's; otherwise they are derived. `name` names
/// the text in messages. Errors, one line each: those of
/// buildTrainingSchedule's checks; a row count other than the placement's
/// ranks; per cell, named by row (rank) and cell: not an action, a stage or
/// microbatch out of range, a stage that the placement puts on another rank
/// (naming its rule), a message cell for a stage with no such message to or
/// from another rank, a send twice, a wait with no earlier send; a send
/// with no wait after it; a row with more than 11 cells per stage and
/// microbatch; and simulateSchedule()'s, naming the file.
llvm::Expected<Schedule> trainingScheduleFromCSV(const Manifest &manifest,
                                                 const Placement &placement,
                                                 llvm::StringRef text,
                                                 int microbatches,
                                                 llvm::StringRef name);

/// Per stage, the largest number of microbatches whose forward ran and
/// whose backward (B, or W when split) has not, walking each rank's list in
/// order. For inference schedules (no backward) it is the microbatch count.
std::vector<int> peakActivations(const Schedule &schedule);

/// How long a stage's actions take, in any unit: F its forward, I its input
/// gradients, W its weight gradients (the F, B and W of the zero bubble
/// paper); a whole B takes I + W. The defaults are the grid's unit model.
struct StageCost {
  double forward = 1, input = 1, weight = 1;
};

/// What a schedule costs when every rank runs its compute actions in order,
/// each as soon as the rank is free and the action's inputs exist, with free
/// communication (the grid's model, with any costs).
struct ScheduleStats {
  /// From the first action's start to the last one's end.
  double makespan = 0;
  /// Per rank: the time it computes.
  std::vector<double> busy;
  /// The idle share of all ranks' time, 1 - sum(busy) / (ranks x makespan):
  /// (p-1)/(m+p-1) for gpipe and 1f1b at unit costs.
  double bubble = 0;
  /// Per rank: the most microbatches whose activations it holds at once
  /// over all its stages (F done, B or W not yet), walking its list.
  std::vector<int> peakActivations;
  /// Per rank: the messages it sends in one step (SEND_F and SEND_B).
  std::vector<int> messages;
};

/// The stats of a schedule that passed simulateSchedule(), with `costs[s]`
/// for stage s (empty: unit costs). Errors: a cost count other than the
/// stage count, a cost that is negative or not finite.
llvm::Expected<ScheduleStats>
scheduleStats(const Schedule &schedule,
              const std::vector<StageCost> &costs = {});

/// The manifest's predicted stage costs (its cost model's; measured forward
/// times under `profile`): F = the prediction, I = W = F, so a whole
/// backward takes twice the forward (the usual rule). Empty (unit costs)
/// when the manifest predicts nothing.
std::vector<StageCost> manifestStageCosts(const Manifest &manifest);
/// Where manifestStageCosts() takes its costs from, for messages: "unit
/// costs (the manifest predicts none)", "the manifest's measured (profile)
/// stage costs", "the manifest's params stage costs (estimates; ppc split
/// --cost profile measures them)".
std::string manifestCostsSource(const Manifest &manifest);

/// What --schedule auto considered: every kind of Schedules.def on its own
/// placement, simulated with the same costs.
struct ScheduleCandidate {
  ScheduleKind kind;
  /// Why the kind does not apply (its generator's or placement's refusal,
  /// or the activation cap); empty when it does.
  std::string refusal;
  ScheduleStats stats;
};

struct ScheduleChoice {
  /// The picked schedule, simulated.
  Schedule schedule;
  std::vector<ScheduleCandidate> candidates;
  /// One line for the user: what was picked, why, and the others'
  /// simulated steps ("picked zbv: simulated step 49 (bubble 2.0%, at most
  /// 4 microbatches' activations per rank) with unit costs; 1f1b 51, ...").
  std::string explanation;
};

/// Picks the training schedule with the shortest simulated step for
/// `manifest` on `worldSize` ranks and `microbatches` microbatches: every
/// kind is built on its own placement and simulated with `costs` (empty:
/// unit costs; `costsFrom` says where they came from, for the
/// explanation); a kind whose peak activations on some rank exceed
/// `maxActivations` (microbatches, when given) is left out. Ties go to the
/// kind listed first in Schedules.def. Errors, said once for all kinds:
/// boundaryEdges()'s, a microbatch count below 1, a stage count that is not
/// a multiple of `worldSize`; and "no schedule fits" with each kind's
/// reason when none applies.
llvm::Expected<ScheduleChoice>
chooseSchedule(const Manifest &manifest, int worldSize, int microbatches,
               const std::vector<StageCost> &costs, llvm::StringRef costsFrom,
               std::optional<int> maxActivations = std::nullopt);

/// The action grid: a header line, then one line per rank ("rank 0: 0F0
/// 0F1 . ...") whose columns are the time steps of a unit-time simulation
/// (F=1, B=2, I=1, W=1, communication free; a B fills two columns, idle
/// steps are "."), and for training a last line "peak activations:
/// stage0=4 stage1=3 ...". The schedule must have passed simulateSchedule().
void printGrid(const Schedule &schedule, llvm::raw_ostream &os);

/// Runs the schedule on the simulator described above; the schedule's
/// edges carry all it needs of the manifest. Errors, one line each: a
/// deadlock (every stuck rank and its action; in training named by the
/// compute action it waits for and the message), an action before its
/// input or gradients, a W before its I, messages out of order on an edge,
/// a message never received, an action on the wrong rank or out of range;
/// in training also a (stage, microbatch) whose F, B, I or W is missing,
/// duplicated, or both B and I/W. A schedule with an origin names it.
llvm::Error simulateSchedule(const Schedule &schedule);

/// Prints rank `rank`'s actions, one per line: "schedule: rank=0 3 F
/// stage=0 mb=1".
void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_SCHEDULE_H
