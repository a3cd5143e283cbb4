//===- tools/ppc/TraceReader.h - Read a trace file back ---------*- C++ -*-===//
//
// Reads a Chrome trace event file that `ppc run --trace` wrote
// (runtime/exec/Trace.h) back into a Timeline, for `ppc trace summary` and
// `ppc trace plot`. docs/trace.md describes the file.
//
// A trace file read back is untrusted: every field is checked, sizes are
// bounded before anything is allocated from them, and each problem is one
// line naming the file and the event index. The reader never holds more
// than one event of the file parsed (parseTrace).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_TRACEREADER_H
#define PPC_TOOLS_PPC_TRACEREADER_H

#include "runtime/exec/Trace.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <string>
#include <vector>

namespace ppc {

/// The most bytes of one event of a file (ppc writes about 150).
constexpr size_t kMaxTraceEventBytes = size_t(64) << 10;
/// The longest name of a complete event (ppc's are at most 9 bytes).
constexpr size_t kMaxTraceNameBytes = 64;
/// The largest time accepted, in microseconds (about 31 years): far above
/// any monotonic clock reading, small enough that sums stay exact enough.
constexpr double kMaxTraceTimeUs = 1e15;

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
/// text. It reads the text twice (with TraceJSONScanner):
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

} // namespace ppc

#endif // PPC_TOOLS_PPC_TRACEREADER_H
