//===- runtime/schedule/Schedule.cpp - Pipeline schedules as data ---------===//
//
// This file implements the schedule and action tables (Schedules.def,
// Actions.def), edge discovery, and the textual forms of actions and
// schedules (see Schedule.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Schedule.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <set>

namespace ppc {

//===----------------------------------------------------------------------===//
// The tables
//===----------------------------------------------------------------------===//

namespace {
struct ScheduleInfo {
  llvm::StringRef name;
  bool inference;
  llvm::StringRef placement;
  llvm::StringRef help;
};

constexpr ScheduleInfo kSchedules[] = {
#define SCHEDULE(Enum, Name, Inference, Placement, Help, Generator)            \
  {Name, Inference, Placement, Help},
#include "runtime/schedule/Schedules.def"
};

constexpr ActionInfo kActions[] = {
#define ACTION(Enum, Name, Letter, Category, UnitTime)                         \
  {Name, Letter, Category, UnitTime},
#include "runtime/schedule/Actions.def"
};

const ScheduleInfo &scheduleInfo(ScheduleKind kind) {
  return kSchedules[static_cast<size_t>(kind)];
}
} // namespace

llvm::StringRef scheduleName(ScheduleKind kind) {
  return scheduleInfo(kind).name;
}

llvm::StringRef scheduleHelp(ScheduleKind kind) {
  return scheduleInfo(kind).help;
}

bool scheduleRunsInference(ScheduleKind kind) {
  return scheduleInfo(kind).inference;
}

llvm::StringRef schedulePlacement(ScheduleKind kind) {
  return scheduleInfo(kind).placement;
}

std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name) {
  for (ScheduleKind kind : kAllScheduleKinds)
    if (scheduleName(kind) == name)
      return kind;
  return std::nullopt;
}

std::string scheduleNames(bool inferenceOnly, llvm::StringRef separator) {
  std::vector<llvm::StringRef> names;
  for (ScheduleKind kind : kAllScheduleKinds)
    if (!inferenceOnly || scheduleRunsInference(kind))
      names.push_back(scheduleName(kind));
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0)
      out += !separator.empty()      ? separator.str()
             : i + 1 == names.size() ? " or "
                                     : ", ";
    out += names[i].str();
  }
  return out;
}

const ActionInfo &actionInfo(ActionKind kind) {
  return kActions[static_cast<size_t>(kind)];
}

llvm::Expected<std::vector<Edge>> boundaryEdges(const Manifest &manifest) {
  int n = static_cast<int>(manifest.stages.size());
  std::map<std::pair<int, int>, std::set<int>> edges;
  for (const StageInfo &s : manifest.stages)
    for (const StageInput &in : s.inputs)
      if (!in.source.isModelInput())
        edges[{in.source.stage, s.index}].insert(in.source.output);
  for (size_t i = 0; i < manifest.modelOutputs.size(); ++i) {
    const ValueRef &ref = manifest.modelOutputs[i];
    if (ref.isModelInput())
      return makeError(
          llvm::formatv("model output {0} is model input {1} itself; "
                        "ppc run does not pass inputs through",
                        i, ref.modelInput)
              .str());
    edges[{ref.stage, n}].insert(ref.output);
  }
  std::vector<Edge> out;
  for (auto &[key, outputs] : edges)
    out.push_back({key.first,
                   key.second,
                   {outputs.begin(), outputs.end()},
                   key.second == n});
  return out;
}

std::string Action::str(const std::vector<Edge> &edges) const {
  const ActionInfo &info = actionInfo(kind);
  if (isCompute())
    return llvm::formatv("{0} stage={1} mb={2}", info.name, stage, microbatch);
  bool sends = info.category == "send";
  if (!sends && info.category != "recv")
    return llvm::formatv("{0} mb={1}", info.name, microbatch);
  if (edge < 0)
    return llvm::formatv("{0} mb={1} {2}={3}", info.name, microbatch,
                         sends ? "to" : "from", peerRank);
  const Edge &e = edges[edge];
  std::string consumer = e.collector ? "out" : std::to_string(e.consumer);
  return llvm::formatv("{0} {1}->{2} mb={3} {4}={5}", info.name, e.producer,
                       consumer, microbatch, sends ? "to" : "from", peerRank);
}

bool Action::isCompute() const { return actionInfo(kind).letter != 0; }

std::string Action::cell() const {
  char letter = actionInfo(kind).letter;
  if (letter == 0)
    return "";
  return std::to_string(stage) + letter + std::to_string(microbatch);
}

int Schedule::channelCount() const {
  int n = static_cast<int>(edges.size());
  return 1 + (training ? 2 * n : n) + (tokens ? 1 : 0);
}

int allReduceChannel(const Schedule &schedule) {
  return schedule.channelCount();
}

int pipelineChannelCount(const Schedule &schedule) {
  return allReduceChannel(schedule) + 1;
}

int channelOf(const Schedule &schedule, const Action &action) {
  switch (action.kind) {
  case ActionKind::SendF:
  case ActionKind::RecvF:
    return action.edge + 1;
  case ActionKind::SendB:
  case ActionKind::RecvB:
    return 1 + static_cast<int>(schedule.edges.size()) + action.edge;
  case ActionKind::SendTokens:
  case ActionKind::RecvTokens:
    return schedule.channelCount() - 1;
  default:
    return -1;
  }
}

void printSchedule(const Schedule &schedule, int rank, llvm::raw_ostream &os) {
  const std::vector<Action> &actions = schedule.ranks[rank];
  for (size_t i = 0; i < actions.size(); ++i)
    os << "schedule: rank=" << rank << " " << i << " "
       << actions[i].str(schedule.edges) << "\n";
}

} // namespace ppc
