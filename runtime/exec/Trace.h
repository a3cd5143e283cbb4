//===- runtime/exec/Trace.h - Timeline traces of pipeline runs --*- C++ -*-===//
//
// Records what each rank did and when, writes it as one Chrome trace event
// file (opened by Perfetto, chrome://tracing), and reads such a file back
// for `ppc trace summary` and `ppc trace plot`. docs/trace.md describes the
// file and the numbers.
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
// A trace file read back is untrusted: every field is checked, sizes are
// bounded before anything is allocated from them, and each problem is one
// line naming the file and the event index. The reader never holds more
// than one event of the file parsed (parseTrace), and the SVG timeline
// draws a bounded number of boxes however many events there are
// (renderTimelineSVG).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_TRACE_H
#define PPC_RUNTIME_EXEC_TRACE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

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
  /// events (pid = rank, tid = 0): one complete event (ph "X") per event,
  /// with args {stage, microbatch}, plus a flow event per event with a
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
/// The most bytes of one event of a file (ppc writes about 150).
constexpr size_t kMaxTraceEventBytes = size_t(64) << 10;
/// The longest name of a complete event (ppc's are at most 9 bytes).
constexpr size_t kMaxTraceNameBytes = 64;
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

/// A complete event read back from a trace file; times in microseconds as
/// written (fractions allowed).
struct TimelineEvent {
  int rank = 0;
  std::string name, category;
  int stage = -1, microbatch = -1;
  double startUs = 0, durationUs = 0;
};

/// The complete events of a trace file and the ranks it names.
struct Timeline {
  /// In file order.
  std::vector<TimelineEvent> events;
  /// Every rank with an event or a "process_name" metadata event, sorted.
  std::vector<int> ranks;
};

/// Parses the text of a trace file; `what` names it in messages ("trace
/// 't.json'"). Accepts the object form ({"traceEvents": [...]}) and the
/// bare array form. Reads complete events ("X"), checks flow events ("s",
/// "t", "f": id, pid, tid, ts, cat, name) and metadata events ("M": pid,
/// name), and ignores other phases.
///
/// Memory: the result (about 100 bytes an event, plus names longer than
/// 15 bytes) and, at any time, the JSON of one event, or 64 KiB of any
/// other value, parsed by llvm::json::parse; nothing else grows with the
/// text. It reads the text twice:
///   1. it checks the nesting (kMaxJSONDepth) and UTF-8 of the whole text,
///      then finds where each value ends without parsing it and counts the
///      events, refusing more than kMaxTraceEvents;
///   2. it parses one value at a time and reads each event. A value that is
///      malformed gives the message llvm::json::parse gives for the whole
///      text, with its line, column and byte.
/// Errors, one line each, in this order of precedence: the nesting, the
/// UTF-8 and the event count of the whole text, then the file's first JSON
/// error, then the first problem of an event:
///   "trace 't.json' nests deeper than 256 levels"
///   "trace 't.json' has 1000001 events, over the limit of 1000000"
///   "trace 't.json' is not valid JSON: [1:5, byte=4]: ..."
///   "trace 't.json': expected an object with an array \"traceEvents\", or
///    an array"
///   "trace 't.json': event 3 is 70000 bytes, over the limit of 65536"
///   "trace 't.json': event 3: missing \"dur\""
///   "trace 't.json': event 3: \"name\" is 65 bytes, over the limit of 64"
///   "trace 't.json': event 3: \"dur\" must be a number in [0, 1e+15] (got
///    -5)"
///   "trace 't.json': event 3: \"pid\" must be an integer in [0, 65535]
///    (got 65536)"
///   "trace 't.json': event 3: unknown category 'x' (expected compute,
///    send, recv, wait or other)"
///   "trace 't.json' has no complete events (ph \"X\")"
llvm::Expected<Timeline> parseTrace(llvm::StringRef text, llvm::StringRef what);

/// Reads and parses the trace file `path` (regular files of at most
/// kMaxTraceBytes). Errors: readFileBounded's (lib/SafeRead.h) and
/// parseTrace's, naming the file.
llvm::Expected<Timeline> readTraceFile(llvm::StringRef path);

/// One step (or batch) of a timeline: the index-th kStepEventName (or
/// kBatchEventName) event of every rank that has one.
struct TimelineMark {
  /// kStepEventName or kBatchEventName.
  std::string kind;
  /// From 1.
  int index = 0;
  /// The earliest start and the latest end of those events.
  double startUs = 0, endUs = 0;
};

/// The step marks of `timeline` (from ppc train) or, when it has none, its
/// batch marks (from ppc run), by index; empty for a trace with neither (one
/// written before ppc recorded them).
std::vector<TimelineMark> timelineMarks(const Timeline &timeline);

/// One end of a range of a timeline, as --from and --to give it: a time in
/// milliseconds from the trace's first event ("120ms", "0.5ms"), or a step
/// or batch ("step:3", "batch:2"), which begins (--from) or ends (--to) the
/// range where that step does.
struct TimePoint {
  enum class Kind { Ms, Step, Batch } kind = Kind::Ms;
  double ms = 0;
  int index = 0;
};

/// Reads a TimePoint from `text`. Errors, one line naming the value:
///   "'12' is not a time (e.g. 120ms, step:3, batch:2)"
///   "'step:0' is not a time (e.g. 120ms, step:3, batch:2): steps count
///    from 1"
llvm::Expected<TimePoint> parseTimePoint(llvm::StringRef text);

/// A stretch of a timeline, in its own microseconds.
struct TimeRange {
  double startUs = 0, endUs = 0;
};

/// The range [startUs, endUs) of `timeline` (in its own microseconds) that
/// `from` and `to` select; a missing end is the trace's first start (last
/// end). `fromText` and `toText` name them in messages ("--from step:9").
/// Errors: "--from step:9: the trace has 4 steps"; "--from batch:2: the
/// trace has no batch events (it has step events)"; "--from step:1: the
/// trace has no step events (traces of ppc older than its step and batch
/// marks have none)"; "--from 500ms: the trace ends at 321.000 ms";
/// "--from 300ms is not before --to 200ms" (and "--from step:3 is not
/// before --to step:2", even where ranks overlap those steps).
llvm::Expected<TimeRange> resolveTimeRange(const Timeline &timeline,
                                           const std::optional<TimePoint> &from,
                                           const std::optional<TimePoint> &to,
                                           llvm::StringRef fromText,
                                           llvm::StringRef toText);

/// `timeline` without its warm-up: on each rank, only the events that
/// start no earlier than its step (or batch) `steps` + 1; a rank without
/// that step keeps none. Zero keeps all.
/// Errors: "the trace has 3 steps; skipping 3 leaves none"; "the trace has
/// no step or batch events to skip (traces of ppc older than its step and
/// batch marks have none)".
llvm::Expected<Timeline> skipFirstSteps(const Timeline &timeline, int steps);

/// What one rank did over a trace.
struct RankSummary {
  int rank = 0;
  /// Time covered by compute events (overlaps counted once).
  double busyUs = 0;
  /// Time covered by wait and recv events (overlaps counted once).
  double waitUs = 0;
  /// 1 - busyUs / the trace's span.
  double bubble = 0;
  /// Complete events, and those per category.
  int64_t events = 0, compute = 0, send = 0, recv = 0, wait = 0, other = 0;
};

/// The stage whose events of one name (F or B) took longest on average.
struct StageTime {
  int stage = -1;
  double meanUs = 0;
  int64_t count = 0;
};

/// The time one stage spent in each kind of action, over the trace (sums
/// of durations: a stage's actions do not overlap).
struct StageSummary {
  int stage = -1;
  /// The rank of its first such event.
  int rank = -1;
  /// Compute events F, B, I, W; sends (SEND_F, SEND_B); receives (RECV_F,
  /// RECV_B: the time the stage's rank waited for its values).
  double forwardUs = 0, backwardUs = 0, inputUs = 0, weightUs = 0;
  double sendUs = 0, recvUs = 0;
  int64_t forwards = 0;
};

struct TraceSummary {
  /// First start and last end over all ranks, and their difference.
  double startUs = 0, endUs = 0, spanUs = 0;
  /// One per rank of the timeline, in rank order.
  std::vector<RankSummary> ranks;
  /// 1 - (sum of busy time) / (ranks * span).
  double bubble = 0;
  /// Over compute events named "F" (and "B") with a stage; ties go to the
  /// lower stage. Empty when there are none.
  std::optional<StageTime> slowestForward, slowestBackward;
  /// Every stage with a compute, send or receive event, in stage order
  /// (not OUT's pseudo-stage).
  std::vector<StageSummary> stages;
};

/// Summarizes a timeline (as parseTrace returns it: at least one event).
TraceSummary summarizeTrace(const Timeline &timeline);

/// Prints `summary` as an aligned table per rank, one per stage (its B, I
/// and W columns only where the trace has such events), the slowest stages,
/// then one machine-parsable line per stage, one per rank and one for the
/// whole trace, last:
///   trace: stage=0 f_ms=2.000 b_ms=4.000 i_ms=0.000 w_ms=0.000
///          send_ms=0.200 recv_ms=1.000 forwards=2
///   trace: rank=0 busy_ms=6.000 wait_ms=2.000 bubble=0.4000 events=9
///          compute=4 send=2 recv=2 wait=1 other=0
///   trace: span_ms=10.000 ranks=2 bubble=0.4000 slowest_f_stage=1
///          slowest_f_ms=2.000 [slowest_b_stage=0 slowest_b_ms=3.000]
/// (each on one line).
void printTraceSummary(const TraceSummary &summary, llvm::raw_ostream &os);

/// The most event boxes renderTimelineSVG draws, for up to
/// kMaxPlotBoxes / 4 ranks (4 per rank beyond).
constexpr size_t kMaxPlotBoxes = 16384;

/// The width of a plot in pixels: the default and the bounds of --width.
constexpr int kDefaultPlotWidth = 1200, kMinPlotWidth = 400,
              kMaxPlotWidth = 20000;

struct PlotOptions {
  /// kMinPlotWidth..kMaxPlotWidth.
  int width = kDefaultPlotWidth;
  /// The range drawn (resolveTimeRange); the whole trace when absent.
  std::optional<TimeRange> range;
};

/// Draws `timeline` as a standalone SVG document `options.width` pixels
/// wide: one row per rank (labelled "rank R", in a <g class="rank">), a box
/// per compute event (<rect class="compute KIND">, KIND = F, B, I, W or
/// other, each its own colour) labelled like "2F5" (stage, name,
/// microbatch) where the label fits, thinner grey bars for sends, receives,
/// waits and other events, a legend of the kinds drawn (<rect
/// class="legend" data-kind="F|B|I|W|other|message|wait|other-event">), a
/// vertical line at the start of each step or batch (<g class="marker step"
/// data-index="3">, labelled "step 3" where the label fits), and an x axis
/// in milliseconds from the trace's first event, with ticks.
///
/// With options.range, only what overlaps it is drawn, cut at its ends,
/// and the axis spans it (still in milliseconds from the trace's start).
///
/// Its size is bounded: the chart (width - 90 pixels) is cut into columns (as
/// many as fit kMaxPlotBoxes boxes in 4 bands of every row: compute, messages,
/// waits, other), and the events of one band of a row that start in one
/// column are drawn as one box, <rect class="compute KIND merged"
/// data-events="N"> (KIND: the kind of most of its time) or class
/// "send|recv|message|wait|other merged", without a label. A box takes
/// under 1.5 KB with names of kMaxTraceNameBytes (about 230 bytes with
/// ppc's), so the SVG of a trace of up to 4096 ranks stays under 25 MB,
/// and about 4 MB with ppc's names. A trace whose events of each band start
/// at least a column apart (ppc's runs, unless they are very long) is drawn
/// event by event.
void renderTimelineSVG(const Timeline &timeline, llvm::raw_ostream &os,
                       const PlotOptions &options = {});

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_TRACE_H
