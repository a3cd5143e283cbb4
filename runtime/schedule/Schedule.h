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
// Each job on a schedule has its own header: Build.h generates one by kind
// (Generators.h holds the kinds' compute orders, Lowering.h the pass that
// adds their messages), Simulate.h checks one, ScheduleCSV.h reads and
// writes PyTorch's CSV, ScheduleStats.h measures one, AutoSchedule.h picks
// one, Grid.h prints one, and Plan.h assembles the schedule a job runs from
// a name, `auto` or a CSV.
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
#include <utility>
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

/// Every action kind, in the order of Actions.def.
inline constexpr ActionKind kAllActionKinds[] = {
#define ACTION(Enum, Name, Letter, Category, UnitTime) ActionKind::Enum,
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
  /// "OUT mb=0", "SEND_TOK mb=0 to=0", "RECV_TOK mb=0 from=1", "B stage=1
  /// mb=0", "I stage=1 mb=0", "W stage=1 mb=0", "SEND_B 0->1 mb=0 to=0",
  /// "RECV_B 0->1 mb=0 from=1".
  std::string str(const std::vector<Edge> &edges) const;
  /// Whether this is F, B, I or W.
  bool isCompute() const;
  /// A compute action as a CSV or grid cell, {stage}{F|B|I|W}{microbatch}:
  /// "0F1", "1B0"; "" for any other action.
  std::string cell() const;
};

/// Decoding (Decode.h): each microbatch is one step of one group of
/// sequences; a group's steps are its prompt steps (chunks of its prompt),
/// then one per picked token but the last. The collector picks the next
/// token ids from the model outputs of a group's steps from its last prompt
/// step on; those of a step before its last travel back (SEND_TOK /
/// RECV_TOK) to every other rank: those whose stages read model input
/// `input` feed them to the group's next step as that input, and every rank
/// learns from them whether the group ended (ExecutorStep::endToken). A
/// group runs on one slot (one copy of every stage's state); a slot runs
/// its groups one after another.
struct TokenReturn {
  int input = -1;
  /// The stages that read model input `input`, ascending.
  std::vector<int> readers;
  struct Group {
    int promptSteps = 1;
    /// promptSteps + new tokens - 1.
    int steps = 1;
    int slot = 0;
    /// The group's microbatches, in step order.
    std::vector<int> microbatches;
  };
  /// The groups, in the order they were queued.
  std::vector<Group> groups;
  int slots = 1;
  /// Per microbatch: its group and its step in that group.
  std::vector<std::pair<int, int>> of;

  int groupOf(int m) const { return of[m].first; }
  int stepOf(int m) const { return of[m].second; }
  const Group &group(int m) const { return groups[groupOf(m)]; }
  int slotOf(int m) const { return group(m).slot; }
  /// Whether the collector picks tokens from microbatch m's outputs.
  bool picks(int m) const { return stepOf(m) >= group(m).promptSteps - 1; }
  /// Whether microbatch m's picks feed its group's next step.
  bool returns(int m) const {
    return picks(m) && stepOf(m) + 1 < group(m).steps;
  }
  /// Whether microbatch m reads picked tokens (rather than the prompt's).
  bool fed(int m) const { return stepOf(m) >= group(m).promptSteps; }
  /// The microbatch of the same group's next and previous step; -1 when
  /// there is none.
  int next(int m) const {
    const Group &g = group(m);
    return stepOf(m) + 1 < g.steps ? g.microbatches[stepOf(m) + 1] : -1;
  }
  int previous(int m) const {
    return stepOf(m) > 0 ? group(m).microbatches[stepOf(m) - 1] : -1;
  }
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
  /// Evaluation (Trainer::evaluate, Build.h's evaluationSchedule()): a
  /// training schedule's forward actions alone, `training` false. It keeps
  /// the training edges (no collector, no OUT): the stage that produces the
  /// loss's model output computes the loss in its F.
  bool evaluation = false;
  /// Where the schedule came from, for messages: empty when generated, the
  /// file's name when read from a CSV (then `kind` means nothing).
  std::string origin;

  /// Decoding: the return path of picked tokens (Decode.h).
  std::optional<TokenReturn> tokens;

  /// Transport channels: 1 + edges (inference), 1 + 2*edges (training),
  /// plus one for the tokens of a decode schedule. Channel 0 is start-up.
  int channelCount() const;
};

/// The channel of the tied gradients' all-reduce (link/Collectives.h): the
/// one past the schedule's own channels.
int allReduceChannel(const Schedule &schedule);

/// The channels a rank running `schedule` sets up: the schedule's, plus
/// allReduceChannel() (idle in inference; a channel costs nothing unused).
int pipelineChannelCount(const Schedule &schedule);

/// The channel of a SEND_F/RECV_F (edge+1), SEND_B/RECV_B (1 +
/// edges.size() + edge) or SEND_TOK/RECV_TOK (the last); -1 for any other
/// action.
int channelOf(const Schedule &schedule, const Action &action);

/// Prints rank `rank`'s actions, one per line: "schedule: rank=0 3 F
/// stage=0 mb=1".
void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_SCHEDULE_H
