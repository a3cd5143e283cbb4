//===- runtime/exec/Trace.h - Timeline traces of pipeline runs --*- C++ -*-===//
//
// Records what each rank did and when, and writes it as one Chrome trace
// event file (opened by Perfetto, chrome://tracing). `ppc trace summary`
// and `ppc trace plot` read such a file back (tools/ppc/TraceReader.h).
// docs/trace.md describes the file and the numbers.
//
// Recording is made for the executor's hot path: the caller reads
// TraceRecorder::nowUs() at the start and at the end of an action and adds
// one TraceEvent to a vector it reserved beforehand; nothing else happens
// until the run is over. Then every rank turns its events into JSON text
// (eventsJSON), ships the bytes to one rank, and that rank calls
// writeTraceFile. A sketch of the executor's part:
//
//   TraceRecorder trace(rank);
//   trace.reserve(actions.size() + 16);
//   int64_t start = TraceRecorder::nowUs();
//   runForward(stage, mb);
//   trace.add({"F", "compute", stage, mb, start, TraceRecorder::nowUs() -
//   start});
//   ...
//   // a send and its receive share one id, computed alike on both ranks:
//   int64_t id = messageFlowId(channel, fromRank, toRank, sequence);
//   trace.add({"SEND_F", "send", stage, mb, t0, t1 - t0, id,
//   /*flowOut=*/true});
//   ...
//   gather trace.eventsJSON() of every rank on one rank, then
//   writeTraceFile(path, textsIndexedByRank);
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_TRACE_H
#define PPC_RUNTIME_EXEC_TRACE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ppc {

/// One action of one rank, as recorded.
struct TraceEvent {
  /// The action: "F", "B", "I", "W" (compute), "SEND_F", "RECV_F",
  /// "SEND_B", "RECV_B", "OUT", "post_recv", "flush", and the marks
  /// kStepEventName and kBatchEventName (docs/trace.md lists them all).
  std::string name;
  /// "compute", "send", "recv", "wait" or "other" (the reader refuses any
  /// other category). Summaries count "compute" as busy time and "wait" and
  /// "recv" as time blocked.
  std::string category;
  /// The stage and microbatch the action belongs to; -1 when none.
  int stage = -1, microbatch = -1;
  /// Microseconds since TraceRecorder::nowUs()'s origin; durationUs >= 0.
  int64_t startUs = 0, durationUs = 0;
  /// Sends and receives of the same message share a flow id in
  /// [0, kMaxFlowId]: the executor passes messageFlowId(...). -1: none.
  int64_t flowId = -1;
  /// True on the send side of a flow, false on the receive side.
  bool flowOut = false;
  /// Sends and receives: the link that carried the message ("shm",
  /// "gloo", "nccl"; written as args.link); "" for the rest.
  std::string link = std::string();
  /// Decoding: the microbatch's group of sequences and decode step
  /// (written as args.group and args.step); -1 otherwise.
  int group = -1, step = -1;
  /// The rank's lane (written as tid): 0 for the actions of the schedule,
  /// which never overlap; 1 for work that runs beside them on a thread of
  /// its own (the overlapped all-reduce of data-parallel training).
  int tid = 0;
};

/// The event that spans one training step on a rank (Trainer::step), and
/// the one that spans one batch of a launch (Pipeline::run): category
/// "other", stage and microbatch -1. The k-th such event of a rank, in
/// order of start, is its step (batch) k, counted from 1 as `ppc train`
/// counts steps.
constexpr llvm::StringLiteral kStepEventName = "step";
constexpr llvm::StringLiteral kBatchEventName = "batch";

/// Flow ids stay below 2^53 so that JavaScript viewers, which read JSON
/// numbers as doubles, see each id exactly.
constexpr int64_t kMaxFlowId = (int64_t(1) << 53) - 1;

/// A flow id for message `sequence` on `channel` from `fromRank` to
/// `toRank`: the same on both ranks, distinct for distinct arguments in
/// practice (a 53-bit hash), and in [0, kMaxFlowId].
int64_t messageFlowId(int channel, int fromRank, int toRank, int64_t sequence);

/// Collects one rank's events. Not thread-safe: one recorder per thread
/// that records (the executor's).
class TraceRecorder {
public:
  explicit TraceRecorder(int rank);

  /// Microseconds of std::chrono::steady_clock, which is CLOCK_MONOTONIC on
  /// Linux: one origin for every process on a host, so the ranks of a
  /// single-host job line up without any clock exchange. (Ranks on
  /// different hosts are offset by the hosts' boot times.)
  static int64_t nowUs();

  /// Makes room for `events` events, so that add() does not allocate.
  void reserve(size_t events);
  /// Appends `event` (moved; names up to 15 characters do not allocate).
  void add(TraceEvent event);
  const std::vector<TraceEvent> &events() const;
  int rank() const;

  /// This rank's events as the JSON text of an array of Chrome trace
  /// events (pid = rank, tid = its lane): one complete event (ph "X") per
  /// event, with args {stage, microbatch}, plus a flow event per event with a
  /// flow id (ph "s" when flowOut, else ph "f" with "bp": "e"; both cat
  /// "flow", name "message", ts = the event's start). Ranks ship this text
  /// to the rank that calls writeTraceFile.
  std::string eventsJSON() const;

private:
  int rank_;
  std::vector<TraceEvent> events_;
};

/// Records one step or batch mark on `trace` (when not null): `name`
/// (kStepEventName or kBatchEventName) from `startUs` (nowUs() when the
/// step began) to now.
void recordMark(TraceRecorder *trace, llvm::StringRef name, int64_t startUs);

/// The most bytes of a trace file, or of one rank's eventsJSON() text,
/// that is read (~150 bytes an event: about 400,000 events).
constexpr uint64_t kMaxTraceBytes = uint64_t(64) << 20;
/// The most trace events a file may hold. They are counted before any is
/// parsed, so a file with more is refused after one scan of its bytes.
constexpr size_t kMaxTraceEvents = 1000000;
/// Ranks (pids) are in [0, kMaxTraceRanks).
constexpr int kMaxTraceRanks = 65536;

/// Writes one Chrome trace event file from every rank's eventsJSON() (index
/// = rank; each event's pid is set to its index), atomically:
///   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
/// with a "process_name" ("rank R") and a "process_sort_index" metadata
/// event per rank, so each rank is one lane in rank order. Times stay as
/// recorded (nowUs()). Errors: a text that is over kMaxTraceBytes, not
/// JSON, or not an array of objects ("rank 1's trace events are not valid
/// JSON: ..."); more than kMaxTraceEvents events in all; more than
/// kMaxTraceRanks texts; the errors of writeFileAtomically (lib/FileUtil.h).
llvm::Error writeTraceFile(llvm::StringRef path,
                           const std::vector<std::string> &rankEventsJSON);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_TRACE_H
