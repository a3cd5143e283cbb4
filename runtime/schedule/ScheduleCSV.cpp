//===- runtime/schedule/ScheduleCSV.cpp - PyTorch's schedule CSV ----------===//
//
// This file implements the CSV reader (schedule and placement) and writer
// of both layouts (see ScheduleCSV.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/ScheduleCSV.h"

#include "lib/Error.h"
#include "runtime/schedule/Build.h"
#include "runtime/schedule/EdgeIndex.h"
#include "runtime/schedule/Lowering.h"
#include "runtime/schedule/Simulate.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

namespace ppc {

namespace {
/// The non-compute cells of PyTorch's compute_comms layout
/// (torch.distributed.pipelining's _ComputationType): what each maps to.
enum class CommCell { SendF, RecvF, SendB, RecvB, WaitSendF, WaitSendB, FSDP };

struct CommCellInfo {
  llvm::StringRef name;
  CommCell kind;
  /// Whether the cell names a microbatch ("1SEND_F0"); the FSDP cells
  /// ("0UNSHARD") do not.
  bool microbatch;
};

constexpr CommCellInfo kCommCells[] = {
    {"SEND_F", CommCell::SendF, true},
    {"RECV_F", CommCell::RecvF, true},
    {"SEND_B", CommCell::SendB, true},
    {"RECV_B", CommCell::RecvB, true},
    {"WAIT_SEND_F", CommCell::WaitSendF, true},
    {"WAIT_SEND_B", CommCell::WaitSendB, true},
    {"UNSHARD", CommCell::FSDP, false},
    {"RESHARD", CommCell::FSDP, false},
    {"REDUCE_GRAD", CommCell::FSDP, false},
    {"WAIT_REDUCE_GRAD", CommCell::FSDP, false},
};

const CommCellInfo &commCellInfo(CommCell kind) {
  for (const CommCellInfo &info : kCommCells)
    if (info.kind == kind)
      return info;
  return kCommCells[0];
}

/// One cell of either layout.
struct Cell {
  /// The compute actions: one, or an OVERLAP_F_B's parts in order; none
  /// for a communication or FSDP cell.
  std::vector<Action> compute;
  std::optional<CommCell> comm;
  int stage = 0, microbatch = 0;
};

/// A cell as messages show it: at most 40 bytes, escaped (printable()).
std::string printableCell(llvm::StringRef raw) { return printable(raw, 40); }

/// Parses a non-empty run of at most 9 digits at the front of `text`.
std::optional<int> takeNumber(llvm::StringRef &text) {
  size_t n = 0;
  while (n < text.size() && llvm::isDigit(text[n]))
    ++n;
  if (n == 0 || n > 9)
    return std::nullopt;
  int value = 0;
  for (char c : text.take_front(n))
    value = value * 10 + (c - '0');
  text = text.drop_front(n);
  return value;
}

/// {stage}{NAME}{microbatch} as _Action.from_str reads it: NAME a compute
/// letter of Actions.def or a name of kCommCells (the FSDP names take no
/// microbatch).
std::optional<Cell> parseSimpleCell(llvm::StringRef text) {
  std::optional<int> stage = takeNumber(text);
  if (!stage)
    return std::nullopt;
  size_t n = 0;
  while (n < text.size() &&
         ((text[n] >= 'A' && text[n] <= 'Z') || text[n] == '_'))
    ++n;
  llvm::StringRef name = text.take_front(n);
  text = text.drop_front(n);
  Cell cell;
  cell.stage = *stage;
  if (name.size() == 1) {
    const ActionKind *found = std::find_if(
        std::begin(kAllActionKinds), std::end(kAllActionKinds),
        [&](ActionKind kind) { return actionInfo(kind).letter == name[0]; });
    std::optional<int> microbatch = takeNumber(text);
    if (found == std::end(kAllActionKinds) || !microbatch || !text.empty())
      return std::nullopt;
    cell.microbatch = *microbatch;
    cell.compute.push_back({*found, *stage, *microbatch});
    return cell;
  }
  const CommCellInfo *found =
      std::find_if(std::begin(kCommCells), std::end(kCommCells),
                   [&](const CommCellInfo &info) { return info.name == name; });
  if (found == std::end(kCommCells))
    return std::nullopt;
  cell.comm = found->kind;
  if (found->microbatch) {
    std::optional<int> microbatch = takeNumber(text);
    if (!microbatch)
      return std::nullopt;
    cell.microbatch = *microbatch;
  }
  if (!text.empty())
    return std::nullopt;
  return cell;
}

/// A cell of either layout: a simple cell, or "(0F3;1B2)OVERLAP_F_B",
/// whose compute parts run in order (ppc does not overlap them).
std::optional<Cell> parseCell(llvm::StringRef text) {
  if (!text.consume_front("("))
    return parseSimpleCell(text);
  auto [inside, rest] = text.split(')');
  if (rest != "OVERLAP_F_B" || inside.empty())
    return std::nullopt;
  Cell cell;
  llvm::SmallVector<llvm::StringRef, 2> parts;
  inside.split(parts, ';');
  for (llvm::StringRef part : parts) {
    std::optional<Cell> sub = parseSimpleCell(part.trim(" \t"));
    if (!sub || sub->comm)
      return std::nullopt;
    cell.compute.push_back(sub->compute[0]);
  }
  cell.stage = cell.compute[0].stage;
  cell.microbatch = cell.compute[0].microbatch;
  return cell;
}

/// Reads the rows of a schedule CSV, expecting `ranks` of them, and hands
/// every cell whose stages are below `numStages` to `onCell` with its row
/// and the "schedule 'x.csv' row 1 (rank 0), cell 2: " that names it; `who`
/// is "schedule 'x.csv'". A UTF-8 byte order mark before the first cell is
/// skipped. Errors: the row count, a cell that is no action of either
/// layout or names a stage out of range, and onCell's.
llvm::Error
readCSVRows(llvm::StringRef text, int ranks, int numStages, llvm::StringRef who,
            llvm::function_ref<llvm::Error(int row, const std::string &where,
                                           const Cell &cell)>
                onCell) {
  text.consume_front("\xEF\xBB\xBF");
  int row = 0;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    line.consume_back("\r");
    if (row == ranks)
      return makeError(llvm::formatv("{0} has more than {1} row{2}; expected "
                                     "one per rank",
                                     who, ranks, ranks == 1 ? "" : "s")
                           .str());
    llvm::SmallVector<llvm::StringRef, 0> cells;
    if (!line.empty())
      line.split(cells, ',');
    for (size_t c = 0; c < cells.size(); ++c) {
      llvm::StringRef raw = cells[c].trim(" \t");
      llvm::StringRef text = raw;
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"')
        text = text.drop_front().drop_back().trim(" \t");
      if (text.empty())
        continue;
      std::string where =
          llvm::formatv("{0} row {1} (rank {2}), cell {3}: ", who, row + 1, row,
                        c + 1)
              .str();
      std::optional<Cell> cell = parseCell(text);
      if (!cell)
        return makeError(where + "'" + printableCell(raw) +
                         "' is not a compute action like 0F1, 1B0, 0I3 or "
                         "0W3, nor a compute_comms action like 1RECV_F0 or "
                         "0SEND_B2");
      std::vector<int> stages{cell->stage};
      for (const Action &a : cell->compute)
        stages.push_back(a.stage);
      for (int s : stages)
        if (s >= numStages)
          return makeError(where + llvm::formatv("stage {0} is out of range "
                                                 "({1} stage{2})",
                                                 s, numStages,
                                                 numStages == 1 ? "" : "s")
                                       .str());
      if (llvm::Error err = onCell(row, where, *cell))
        return err;
    }
    ++row;
  }
  if (row != ranks)
    return makeError(llvm::formatv("{0} has {1} row{2}; expected one per rank "
                                   "({3})",
                                   who, row, row == 1 ? "" : "s", ranks)
                         .str());
  return llvm::Error::success();
}

/// Writes rank `r`'s actions as compute_comms cells: compute actions as
/// they are; a run of SEND_F (RECV_F, ...) of one stage and microbatch, one
/// per edge, as one cell; and, as PyTorch's _add_wait_send places them, a
/// WAIT_SEND_F after the local B or I that proves the forward send was
/// consumed, every other wait at the end.
void writeCommsRow(const Schedule &schedule, int r, std::string &out) {
  std::vector<std::string> cells;
  // Pending sends by (is backward, stage, microbatch), in send order.
  std::vector<std::tuple<bool, int, int>> pending;
  const std::vector<Action> &actions = schedule.ranks[r];
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action &a = actions[i];
    if (a.isCompute()) {
      cells.push_back(a.cell());
      if (a.kind != ActionKind::Backward && a.kind != ActionKind::BackwardInput)
        continue;
      auto it = std::find(pending.begin(), pending.end(),
                          std::make_tuple(false, a.stage, a.microbatch));
      if (it != pending.end()) {
        cells.push_back(std::to_string(a.stage) + "WAIT_SEND_F" +
                        std::to_string(a.microbatch));
        pending.erase(it);
      }
      continue;
    }
    if (i > 0 && actions[i - 1].kind == a.kind &&
        actions[i - 1].stage == a.stage &&
        actions[i - 1].microbatch == a.microbatch)
      continue; // one cell for every edge of the stage
    llvm::StringRef name = actionInfo(a.kind).name;
    cells.push_back(std::to_string(a.stage) + name.str() +
                    std::to_string(a.microbatch));
    if (actionInfo(a.kind).category == "send")
      pending.emplace_back(a.kind == ActionKind::SendB, a.stage, a.microbatch);
  }
  for (auto [backward, stage, microbatch] : pending)
    cells.push_back(std::to_string(stage) +
                    (backward ? "WAIT_SEND_B" : "WAIT_SEND_F") +
                    std::to_string(microbatch));
  out += llvm::join(cells, ",");
  out += "\r\n";
}
} // namespace

llvm::StringRef csvLayoutName(CSVLayout layout) {
  return layout == CSVLayout::ComputeOnly ? "compute_only" : "compute_comms";
}

std::string scheduleToCSV(const Schedule &schedule, CSVLayout layout) {
  std::string out;
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    if (layout == CSVLayout::ComputeComms) {
      writeCommsRow(schedule, static_cast<int>(r), out);
      continue;
    }
    std::vector<std::string> cells;
    for (const Action &a : schedule.ranks[r])
      if (a.isCompute())
        cells.push_back(a.cell());
    out += llvm::join(cells, ",");
    out += "\r\n";
  }
  return out;
}

llvm::Expected<Placement> placementFromCSV(llvm::StringRef text, int numStages,
                                           int worldSize,
                                           llvm::StringRef name) {
  std::string who = "schedule '" + name.str() + "'";
  std::vector<int> ranks(std::max(numStages, 0), -1);
  if (llvm::Error err = readCSVRows(
          text, worldSize, numStages, who,
          [&](int row, const std::string &where,
              const Cell &cell) -> llvm::Error {
            for (const Action &a : cell.compute) {
              int &rank = ranks[a.stage];
              if (rank >= 0 && rank != row)
                return makeError(where +
                                 llvm::formatv("stage {0} already runs on "
                                               "rank {1} (row {2})",
                                               a.stage, rank, rank + 1)
                                     .str());
              rank = row;
            }
            return llvm::Error::success();
          }))
    return err;
  std::vector<bool> used(worldSize, false);
  for (int s = 0; s < numStages; ++s) {
    if (ranks[s] < 0)
      return makeError(
          llvm::formatv("{0} runs no action of stage {1}", who, s).str());
    used[ranks[s]] = true;
  }
  for (int r = 0; r < worldSize; ++r)
    if (!used[r])
      return makeError(
          llvm::formatv("{0} row {1} (rank {2}) runs no stage", who, r + 1, r)
              .str());
  return Placement::fromRanks(std::move(ranks), worldSize, "csv");
}

namespace {
/// Turns the compute_comms cell `cell` of row `row` into ppc's actions: a
/// SEND_F of stage s is a SEND_F on every edge from s to another rank,
/// RECV_F one on every edge into s from another rank, and likewise SEND_B
/// (edges into s) and RECV_B (edges out of s). Waits are checked against
/// the row's sends (`pending`) and dropped: ppc's links retire sends
/// themselves and the step ends by flushing them. FSDP cells are dropped.
llvm::Error addCommCell(Schedule &schedule, const EdgeIndex &index, int row,
                        const std::string &where, const Cell &cell,
                        std::set<std::tuple<CommCell, int, int>> &pending) {
  const Placement &placement = schedule.placement;
  CommCell kind = *cell.comm;
  llvm::StringRef name = commCellInfo(kind).name;
  std::string text =
      std::to_string(cell.stage) + name.str() +
      (commCellInfo(kind).microbatch ? std::to_string(cell.microbatch)
                                     : std::string());
  if (placement.rankOf(cell.stage) != row)
    return makeError(where + llvm::formatv("{0}: stage {1} runs on rank {2} "
                                           "({3}), not on rank {4}",
                                           text, cell.stage,
                                           placement.rankOf(cell.stage),
                                           placement.rule(), row)
                                 .str());
  if (kind == CommCell::FSDP)
    return llvm::Error::success();
  if (cell.microbatch >= schedule.microbatches)
    return makeError(where +
                     llvm::formatv("{0}: microbatch {1} is out of "
                                   "range ({2} microbatch{3})",
                                   text, cell.microbatch, schedule.microbatches,
                                   schedule.microbatches == 1 ? "" : "es")
                         .str());
  if (kind == CommCell::WaitSendF || kind == CommCell::WaitSendB) {
    CommCell send =
        kind == CommCell::WaitSendF ? CommCell::SendF : CommCell::SendB;
    if (!pending.erase({send, cell.stage, cell.microbatch}))
      return makeError(where + llvm::formatv("{0} waits for no earlier {1}{2}"
                                             "{3} on its row",
                                             text, cell.stage,
                                             commCellInfo(send).name,
                                             cell.microbatch)
                                   .str());
    return llvm::Error::success();
  }
  bool forward = kind == CommCell::SendF || kind == CommCell::RecvF;
  bool send = kind == CommCell::SendF || kind == CommCell::SendB;
  // SEND_F and RECV_B use the stage's output edges, RECV_F and SEND_B its
  // input edges.
  bool outputs = kind == CommCell::SendF || kind == CommCell::RecvB;
  ActionKind action = kind == CommCell::SendF   ? ActionKind::SendF
                      : kind == CommCell::RecvF ? ActionKind::RecvF
                      : kind == CommCell::SendB ? ActionKind::SendB
                                                : ActionKind::RecvB;
  size_t before = schedule.ranks[row].size();
  for (int e : outputs ? index.out[cell.stage] : index.in[cell.stage]) {
    const Edge &edge = schedule.edges[e];
    int peer = placement.rankOf(outputs ? edge.consumer : edge.producer);
    if (peer != row)
      schedule.ranks[row].push_back(
          {action, cell.stage, cell.microbatch, e, peer});
  }
  if (schedule.ranks[row].size() == before)
    return makeError(
        where + llvm::formatv("{0}: stage {1} {2} no {3} {4} another rank",
                              text, cell.stage, send ? "sends" : "receives",
                              forward ? "outputs" : "gradients",
                              send ? "to" : "from")
                    .str());
  if (send && !pending.insert({kind, cell.stage, cell.microbatch}).second)
    return makeError(where + text + " is sent twice");
  return llvm::Error::success();
}
} // namespace

llvm::Expected<Schedule> trainingScheduleFromCSV(const Manifest &manifest,
                                                 const Placement &placement,
                                                 llvm::StringRef text,
                                                 int microbatches,
                                                 llvm::StringRef name) {
  auto schedule = emptyTrainingSchedule(manifest, placement, microbatches);
  if (!schedule)
    return schedule.takeError();
  schedule->origin = name.str();
  std::string who = "schedule '" + name.str() + "'";
  EdgeIndex index(*schedule);
  Orders orders(placement.worldSize());
  // A rank runs F, I and W at most once per stage and microbatch; a
  // compute_comms row adds a RECV, a SEND and a WAIT each way per stage and
  // microbatch, and FSDP cells (PyTorch writes about two per compute
  // action): kMaxCommCells per stage and microbatch, 4 more per stage.
  constexpr size_t kMaxCommCells = 12;
  std::vector<size_t> maxActions(placement.worldSize()),
      maxCommCells(placement.worldSize());
  for (int r = 0; r < placement.worldSize(); ++r) {
    size_t stages = placement.stagesOf(r).size();
    maxActions[r] = 3 * stages * static_cast<size_t>(microbatches);
    maxCommCells[r] = kMaxCommCells * stages * microbatches + 4 * stages;
  }
  std::vector<size_t> actions(placement.worldSize(), 0),
      commCells(placement.worldSize(), 0);
  // The layout: compute_comms when any cell is communication (a first pass
  // that only parses), and then the file gives every message.
  // Its errors come again, in file order, from the pass that reads.
  bool comms = false;
  llvm::consumeError(
      readCSVRows(text, placement.worldSize(), placement.numStages(), who,
                  [&](int, const std::string &, const Cell &cell) {
                    comms = comms || cell.comm.has_value();
                    return llvm::Error::success();
                  }));
  std::vector<std::set<std::tuple<CommCell, int, int>>> pending(
      placement.worldSize());
  if (llvm::Error err = readCSVRows(
          text, placement.worldSize(), placement.numStages(), who,
          [&](int row, const std::string &where,
              const Cell &cell) -> llvm::Error {
            if (cell.comm && ++commCells[row] > maxCommCells[row])
              return makeError(llvm::formatv("{0} row {1} (rank {2}) has "
                                             "more than {3} communication "
                                             "cells ({4} per stage and "
                                             "microbatch, 4 more per stage)",
                                             who, row + 1, row,
                                             maxCommCells[row], kMaxCommCells)
                                   .str());
            actions[row] += cell.compute.size();
            if (actions[row] > maxActions[row])
              return makeError(llvm::formatv("{0} row {1} (rank {2}) has "
                                             "more than {3} actions (3 per "
                                             "stage and microbatch)",
                                             who, row + 1, row, maxActions[row])
                                   .str());
            if (cell.comm)
              return addCommCell(*schedule, index, row, where, cell,
                                 pending[row]);
            for (const Action &a : cell.compute) {
              if (a.microbatch >= microbatches)
                return makeError(where +
                                 llvm::formatv("microbatch {0} is out of "
                                               "range ({1} microbatch{2})",
                                               a.microbatch, microbatches,
                                               microbatches == 1 ? "" : "es")
                                     .str());
              if (placement.rankOf(a.stage) != row)
                return makeError(
                    where + llvm::formatv("stage {0} runs on rank {1} "
                                          "({2}), not on rank {3}",
                                          a.stage, placement.rankOf(a.stage),
                                          placement.rule(), row)
                                .str());
              (comms ? schedule->ranks[row] : orders[row]).push_back(a);
            }
            return llvm::Error::success();
          }))
    return err;
  for (int r = 0; r < placement.worldSize(); ++r)
    if (!pending[r].empty()) {
      auto [kind, stage, microbatch] = *pending[r].begin();
      return makeError(llvm::formatv("{0} row {1} (rank {2}): {3}{4}{5} has "
                                     "no {3}WAIT_{4}{5} after it",
                                     who, r + 1, r, stage,
                                     commCellInfo(kind).name, microbatch)
                           .str());
    }
  if (!comms)
    addCommunication(*schedule, index, orders);
  if (llvm::Error err = simulateSchedule(*schedule))
    return err;
  return schedule;
}

} // namespace ppc
