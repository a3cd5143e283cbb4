//===- runtime/schedule/ScheduleCSV.h - PyTorch's schedule CSV ------------===//
//
// Reading and writing schedules in the CSV layouts of PyTorch pipelining
// (torch.distributed.pipelining), for both ppc schedule and ppc train.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_SCHEDULE_CSV_H
#define PPC_RUNTIME_SCHEDULE_SCHEDULE_CSV_H

#include "lib/Manifest.h"
#include "runtime/schedule/Placement.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace ppc {

/// The most bytes of a schedule CSV that ppc schedule --from-csv and ppc
/// train --schedule-csv read: a schedule of 1024 stages and 1024
/// microbatches, with cells of up to 10 bytes, fits six times over.
constexpr uint64_t kMaxScheduleCSVBytes = uint64_t(64) << 20;

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

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_SCHEDULE_CSV_H
