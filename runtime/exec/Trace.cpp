//===- runtime/exec/Trace.cpp - Timeline traces of pipeline runs ----------===//
//
// This file implements the trace recorder and the writer of Chrome trace
// event files. (`ppc trace` reads them back: tools/ppc/TraceReader.h.)
//
// The writer follows the Trace Event Format: complete events (ph "X") with
// ts and dur in microseconds, metadata events (ph "M") naming each process
// lane, and flow events (ph "s", then ph "f" with "bp": "e") that Perfetto
// matches by (id, cat, name) and binds to the slice enclosing their ts on
// the same pid and tid, so each flow event takes its action's start.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Trace.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/SafeRead.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace ppc {

//===----------------------------------------------------------------------===//
// Recording
//===----------------------------------------------------------------------===//

namespace {
/// splitmix64's finalizer: a cheap, well-mixing 64-bit hash step.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
} // namespace

int64_t messageFlowId(int channel, int fromRank, int toRank, int64_t sequence) {
  uint64_t h = mix(static_cast<uint32_t>(channel));
  h = mix(h ^ static_cast<uint32_t>(fromRank));
  h = mix(h ^ static_cast<uint32_t>(toRank));
  h = mix(h ^ static_cast<uint64_t>(sequence));
  return static_cast<int64_t>(h & static_cast<uint64_t>(kMaxFlowId));
}

TraceRecorder::TraceRecorder(int rank) : rank_(rank) {}

int64_t TraceRecorder::nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void TraceRecorder::reserve(size_t events) { events_.reserve(events); }

void TraceRecorder::add(TraceEvent event) {
  events_.push_back(std::move(event));
}

const std::vector<TraceEvent> &TraceRecorder::events() const { return events_; }

int TraceRecorder::rank() const { return rank_; }

void recordMark(TraceRecorder *trace, llvm::StringRef name, int64_t startUs) {
  if (trace)
    trace->add({name.str(), "other", -1, -1, startUs,
                std::max<int64_t>(TraceRecorder::nowUs() - startUs, 0)});
}

std::string TraceRecorder::eventsJSON() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream j(os);
  j.array([&] {
    for (const TraceEvent &e : events_) {
      j.object([&] {
        j.attribute("name", e.name);
        j.attribute("cat", e.category);
        j.attribute("ph", "X");
        j.attribute("ts", e.startUs);
        j.attribute("dur", e.durationUs);
        j.attribute("pid", rank_);
        j.attribute("tid", e.tid);
        j.attributeObject("args", [&] {
          j.attribute("stage", e.stage);
          j.attribute("microbatch", e.microbatch);
          if (e.group >= 0) {
            j.attribute("group", e.group);
            j.attribute("step", e.step);
          }
          if (!e.link.empty())
            j.attribute("link", e.link);
        });
      });
      if (e.flowId < 0)
        continue;
      j.object([&] {
        j.attribute("name", "message");
        j.attribute("cat", "flow");
        j.attribute("ph", e.flowOut ? "s" : "f");
        if (!e.flowOut)
          j.attribute("bp", "e");
        j.attribute("id", e.flowId);
        j.attribute("ts", e.startUs);
        j.attribute("pid", rank_);
        j.attribute("tid", e.tid);
      });
    }
  });
  os.flush();
  return text;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {
/// Parses every rank's text (they come from other processes) and stamps
/// each event with its rank, so a lane holds exactly that rank's events.
llvm::Expected<std::vector<llvm::json::Value>>
parseRankEvents(const std::vector<std::string> &rankEventsJSON) {
  std::vector<llvm::json::Value> ranks;
  ranks.reserve(rankEventsJSON.size());
  size_t total = 0;
  for (size_t r = 0; r < rankEventsJSON.size(); ++r) {
    std::string what = llvm::formatv("the trace of rank {0}", r);
    if (rankEventsJSON[r].size() > kMaxTraceBytes)
      return makeError(llvm::formatv("{0} is {1} bytes, over the limit of {2}",
                                     what, rankEventsJSON[r].size(),
                                     kMaxTraceBytes));
    auto parsed = parseJSONBounded(rankEventsJSON[r], kMaxJSONDepth, what);
    if (!parsed)
      return parsed.takeError();
    llvm::json::Array *events = parsed->getAsArray();
    if (!events)
      return makeError(what + " is not a JSON array");
    total += events->size();
    if (total > kMaxTraceEvents)
      return makeError(
          llvm::formatv("the trace has over {0} events", kMaxTraceEvents));
    for (size_t i = 0; i < events->size(); ++i) {
      llvm::json::Object *event = (*events)[i].getAsObject();
      if (!event)
        return makeError(
            llvm::formatv("{0}: event {1} is not an object", what, i));
      (*event)["pid"] = static_cast<int64_t>(r);
    }
    ranks.push_back(std::move(*parsed));
  }
  return ranks;
}

/// The "process_name" and "process_sort_index" metadata events of rank
/// `r`: its lane's name and place.
void writeLaneMetadata(llvm::json::OStream &j, size_t r) {
  auto metadata = [&](llvm::StringRef name, llvm::StringRef key,
                      llvm::json::Value value) {
    j.object([&] {
      j.attribute("name", name);
      j.attribute("ph", "M");
      j.attribute("pid", static_cast<int64_t>(r));
      j.attribute("tid", 0);
      j.attribute("ts", 0);
      j.attributeObject("args", [&] { j.attribute(key, std::move(value)); });
    });
  };
  metadata("process_name", "name", "rank " + std::to_string(r));
  metadata("process_sort_index", "sort_index", static_cast<int64_t>(r));
}
} // namespace

llvm::Error writeTraceFile(llvm::StringRef path,
                           const std::vector<std::string> &rankEventsJSON) {
  if (rankEventsJSON.size() > static_cast<size_t>(kMaxTraceRanks))
    return makeError(llvm::formatv("a trace of {0} ranks is over the limit of "
                                   "{1}",
                                   rankEventsJSON.size(), kMaxTraceRanks));
  auto ranks = parseRankEvents(rankEventsJSON);
  if (!ranks)
    return ranks.takeError();
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    llvm::json::OStream j(os);
    j.object([&] {
      j.attributeArray("traceEvents", [&] {
        for (size_t r = 0; r < ranks->size(); ++r)
          writeLaneMetadata(j, r);
        for (const llvm::json::Value &events : *ranks)
          for (const llvm::json::Value &event : *events.getAsArray())
            j.value(event);
      });
      j.attribute("displayTimeUnit", "ms");
      j.attributeObject("otherData", [&] {
        j.attribute("generator", "ppc");
        j.attribute("clock", "steady_clock (CLOCK_MONOTONIC), microseconds");
        j.attribute("ranks", static_cast<int64_t>(ranks->size()));
      });
    });
    os << "\n";
    return llvm::Error::success();
  });
}

} // namespace ppc
