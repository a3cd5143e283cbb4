//===- runtime/Trace.cpp - Timeline traces of pipeline runs ---------------===//
//
// This file implements the trace recorder, the writer of Chrome trace event
// files, and the reader, summary and SVG timeline behind `ppc trace`.
//
// The writer follows the Trace Event Format: complete events (ph "X") with
// ts and dur in microseconds, metadata events (ph "M") naming each process
// lane, and flow events (ph "s", then ph "f" with "bp": "e") that Perfetto
// matches by (id, cat, name) and binds to the slice enclosing their ts on
// the same pid and tid, so each flow event takes its action's start.
//
//===----------------------------------------------------------------------===//
#include "runtime/Trace.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
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
        j.attribute("tid", 0);
        j.attributeObject("args", [&] {
          j.attribute("stage", e.stage);
          j.attribute("microbatch", e.microbatch);
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
        j.attribute("tid", 0);
      });
    }
  });
  os.flush();
  return text;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

llvm::Error writeTraceFile(llvm::StringRef path,
                           const std::vector<std::string> &rankEventsJSON) {
  if (rankEventsJSON.size() > static_cast<size_t>(kMaxTraceRanks))
    return makeError(llvm::formatv("a trace of {0} ranks is over the limit of "
                                   "{1}",
                                   rankEventsJSON.size(), kMaxTraceRanks));
  // Parse every rank's text (they come from other processes) and stamp each
  // event with its rank, so a lane holds exactly that rank's events.
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

  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    llvm::json::OStream j(os);
    j.object([&] {
      j.attributeArray("traceEvents", [&] {
        for (size_t r = 0; r < ranks.size(); ++r) {
          auto metadata = [&](llvm::StringRef name, llvm::StringRef key,
                              llvm::json::Value value) {
            j.object([&] {
              j.attribute("name", name);
              j.attribute("ph", "M");
              j.attribute("pid", static_cast<int64_t>(r));
              j.attribute("tid", 0);
              j.attribute("ts", 0);
              j.attributeObject("args",
                                [&] { j.attribute(key, std::move(value)); });
            });
          };
          metadata("process_name", "name", "rank " + std::to_string(r));
          metadata("process_sort_index", "sort_index", static_cast<int64_t>(r));
        }
        for (const llvm::json::Value &events : ranks)
          for (const llvm::json::Value &event : *events.getAsArray())
            j.value(event);
      });
      j.attribute("displayTimeUnit", "ms");
      j.attributeObject("otherData", [&] {
        j.attribute("generator", "ppc");
        j.attribute("clock", "steady_clock (CLOCK_MONOTONIC), microseconds");
        j.attribute("ranks", static_cast<int64_t>(ranks.size()));
      });
    });
    os << "\n";
    return llvm::Error::success();
  });
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

/// The largest time accepted, in microseconds (about 31 years): far above
/// any monotonic clock reading, small enough that sums stay exact enough.
constexpr double kMaxTimeUs = 1e15;

/// Reads the fields of one event of the file, each problem an error that
/// names the file and the event.
class EventReader {
public:
  EventReader(const llvm::json::Object &event, llvm::StringRef what,
              size_t index)
      : event(event), what(what), index(index) {}

  llvm::Error fail(const llvm::Twine &message) const {
    std::string prefix = llvm::formatv("{0}: event {1}: ", what, index);
    return makeError(prefix + message);
  }

  llvm::Expected<llvm::StringRef> string(llvm::StringRef key) const {
    const llvm::json::Value *value = event.get(key);
    if (!value)
      return fail("missing \"" + key + "\"");
    auto text = value->getAsString();
    if (!text)
      return fail("\"" + key + "\" must be a string");
    return *text;
  }

  /// A finite number in [lo, hi].
  llvm::Expected<double> number(llvm::StringRef key, double lo,
                                double hi) const {
    const llvm::json::Value *value = event.get(key);
    if (!value)
      return fail("missing \"" + key + "\"");
    auto n = value->getAsNumber();
    if (!n || !std::isfinite(*n) || *n < lo || *n > hi)
      return fail("\"" + key + "\" must be a number in [" + text(lo) + ", " +
                  text(hi) + "]" + describe(*value));
    return *n;
  }

  /// An integer in [lo, hi]; checked as a double first, so that no value
  /// out of range is ever converted.
  llvm::Expected<int64_t> integer(const llvm::json::Value &value,
                                  llvm::StringRef key, int64_t lo,
                                  int64_t hi) const {
    auto n = value.getAsNumber();
    if (!n || !std::isfinite(*n) || std::floor(*n) != *n ||
        *n < static_cast<double>(lo) || *n > static_cast<double>(hi))
      return fail(
          llvm::formatv("\"{0}\" must be an integer in [{1}, {2}]", key, lo, hi)
              .str() +
          describe(value));
    return static_cast<int64_t>(*n);
  }

  llvm::Expected<int64_t> integer(llvm::StringRef key, int64_t lo,
                                  int64_t hi) const {
    const llvm::json::Value *value = event.get(key);
    if (!value)
      return fail("missing \"" + key + "\"");
    return integer(*value, key, lo, hi);
  }

  static std::string text(double n) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.15g", n);
    return buffer;
  }

  /// " (got -5)" for a number, nothing for other kinds (their text may be
  /// long).
  static std::string describe(const llvm::json::Value &value) {
    if (auto n = value.getAsNumber())
      return " (got " + text(*n) + ")";
    return "";
  }

  const llvm::json::Object &event;
  llvm::StringRef what;
  size_t index;
};

bool isCategory(llvm::StringRef category) {
  return category == "compute" || category == "send" || category == "recv" ||
         category == "wait" || category == "other";
}

/// Reads a complete event ("X") into `out`.
llvm::Error readComplete(const EventReader &reader, TimelineEvent &out) {
  auto name = reader.string("name");
  if (!name)
    return name.takeError();
  auto category = reader.string("cat");
  if (!category)
    return category.takeError();
  if (!isCategory(*category))
    return reader.fail("unknown category '" + *category +
                       "' (expected compute, send, recv, wait or other)");
  auto pid = reader.integer("pid", 0, kMaxTraceRanks - 1);
  if (!pid)
    return pid.takeError();
  auto tid = reader.integer("tid", INT32_MIN, INT32_MAX);
  if (!tid)
    return tid.takeError();
  auto ts = reader.number("ts", 0, kMaxTimeUs);
  if (!ts)
    return ts.takeError();
  auto dur = reader.number("dur", 0, kMaxTimeUs);
  if (!dur)
    return dur.takeError();
  out.rank = static_cast<int>(*pid);
  out.name = name->str();
  out.category = category->str();
  out.startUs = *ts;
  out.durationUs = *dur;
  out.stage = out.microbatch = -1;
  const llvm::json::Value *args = reader.event.get("args");
  if (!args)
    return llvm::Error::success();
  const llvm::json::Object *fields = args->getAsObject();
  if (!fields)
    return reader.fail("\"args\" must be an object");
  using Slot = std::pair<const char *, int *>;
  for (auto [key, slot] :
       {Slot{"stage", &out.stage}, Slot{"microbatch", &out.microbatch}}) {
    const llvm::json::Value *value = fields->get(key);
    if (!value)
      continue;
    auto n = reader.integer(*value, std::string("args.") + key, -1, INT_MAX);
    if (!n)
      return n.takeError();
    *slot = static_cast<int>(*n);
  }
  return llvm::Error::success();
}

/// Checks a flow event ("s", "t", "f").
llvm::Error checkFlow(const EventReader &reader) {
  for (llvm::StringRef key : {"name", "cat"})
    if (auto text = reader.string(key); !text)
      return text.takeError();
  if (auto pid = reader.integer("pid", 0, kMaxTraceRanks - 1); !pid)
    return pid.takeError();
  if (auto tid = reader.integer("tid", INT32_MIN, INT32_MAX); !tid)
    return tid.takeError();
  if (auto ts = reader.number("ts", 0, kMaxTimeUs); !ts)
    return ts.takeError();
  const llvm::json::Value *id = reader.event.get("id");
  if (!id)
    return reader.fail("missing \"id\"");
  if (id->getAsString())
    return llvm::Error::success();
  if (auto n = reader.integer(*id, "id", 0, kMaxFlowId); !n)
    return n.takeError();
  return llvm::Error::success();
}

} // namespace

llvm::Expected<Timeline> parseTrace(llvm::StringRef text,
                                    llvm::StringRef what) {
  auto parsed = parseJSONBounded(text, kMaxJSONDepth, what);
  if (!parsed)
    return parsed.takeError();
  const llvm::json::Array *events = parsed->getAsArray();
  if (const llvm::json::Object *top = parsed->getAsObject()) {
    const llvm::json::Value *list = top->get("traceEvents");
    events = list ? list->getAsArray() : nullptr;
  }
  if (!events)
    return makeError(what + ": expected an object with an array "
                            "\"traceEvents\", or an array");
  if (events->size() > kMaxTraceEvents)
    return makeError(llvm::formatv("{0} has {1} events, over the limit of {2}",
                                   what, events->size(), kMaxTraceEvents));

  Timeline timeline;
  std::vector<bool> named(kMaxTraceRanks, false);
  for (size_t i = 0; i < events->size(); ++i) {
    const llvm::json::Object *event = (*events)[i].getAsObject();
    if (!event)
      return makeError(
          llvm::formatv("{0}: event {1} is not an object", what, i));
    EventReader reader(*event, what, i);
    auto phase = reader.string("ph");
    if (!phase)
      return phase.takeError();
    if (*phase == "X") {
      TimelineEvent out;
      if (llvm::Error err = readComplete(reader, out))
        return err;
      named[out.rank] = true;
      timeline.events.push_back(std::move(out));
    } else if (*phase == "s" || *phase == "t" || *phase == "f") {
      if (llvm::Error err = checkFlow(reader))
        return err;
    } else if (*phase == "M") {
      auto name = reader.string("name");
      if (!name)
        return name.takeError();
      auto pid = reader.integer("pid", 0, kMaxTraceRanks - 1);
      if (!pid)
        return pid.takeError();
      if (*name == "process_name")
        named[*pid] = true;
    }
    // Other phases (instant, counter, async, ...) are valid trace events
    // that ppc neither writes nor reads.
  }
  if (timeline.events.empty())
    return makeError(what + " has no complete events (ph \"X\")");
  for (int r = 0; r < kMaxTraceRanks; ++r)
    if (named[r])
      timeline.ranks.push_back(r);
  return timeline;
}

llvm::Expected<Timeline> readTraceFile(llvm::StringRef path) {
  auto buffer = readFileBounded(path, kMaxTraceBytes, "trace");
  if (!buffer)
    return buffer.takeError();
  return parseTrace((*buffer)->getBuffer(), "trace '" + path.str() + "'");
}

//===----------------------------------------------------------------------===//
// Summary
//===----------------------------------------------------------------------===//

namespace {
/// The length of the union of `intervals` (start, end): overlapping events
/// (nested waits, a second thread) count once.
double unionLength(std::vector<std::pair<double, double>> &intervals) {
  llvm::sort(intervals);
  double total = 0, openStart = 0, openEnd = 0;
  bool open = false;
  for (const auto &[start, end] : intervals) {
    if (open && start <= openEnd) {
      openEnd = std::max(openEnd, end);
      continue;
    }
    if (open)
      total += openEnd - openStart;
    openStart = start;
    openEnd = end;
    open = true;
  }
  if (open)
    total += openEnd - openStart;
  return total;
}

std::optional<StageTime>
slowestStage(const std::map<int, std::pair<double, int64_t>> &byStage) {
  std::optional<StageTime> slowest;
  for (const auto &[stage, sumCount] : byStage) {
    double mean = sumCount.first / static_cast<double>(sumCount.second);
    if (!slowest || mean > slowest->meanUs)
      slowest = StageTime{stage, mean, sumCount.second};
  }
  return slowest;
}
} // namespace

TraceSummary summarizeTrace(const Timeline &timeline) {
  TraceSummary summary;
  if (timeline.events.empty())
    return summary;
  summary.startUs = timeline.events.front().startUs;
  summary.endUs = summary.startUs;
  for (const TimelineEvent &e : timeline.events) {
    summary.startUs = std::min(summary.startUs, e.startUs);
    summary.endUs = std::max(summary.endUs, e.startUs + e.durationUs);
  }
  summary.spanUs = summary.endUs - summary.startUs;

  size_t n = timeline.ranks.size();
  std::vector<std::vector<std::pair<double, double>>> busy(n), blocked(n);
  summary.ranks.resize(n);
  for (size_t i = 0; i < n; ++i)
    summary.ranks[i].rank = timeline.ranks[i];
  std::map<int, std::pair<double, int64_t>> forward, backward;
  for (const TimelineEvent &e : timeline.events) {
    size_t i =
        llvm::lower_bound(timeline.ranks, e.rank) - timeline.ranks.begin();
    RankSummary &rank = summary.ranks[i];
    std::pair<double, double> interval{e.startUs, e.startUs + e.durationUs};
    ++rank.events;
    if (e.category == "compute") {
      ++rank.compute;
      busy[i].push_back(interval);
      auto *byStage = e.name == "F"   ? &forward
                      : e.name == "B" ? &backward
                                      : nullptr;
      if (byStage && e.stage >= 0) {
        auto &[sum, count] = (*byStage)[e.stage];
        sum += e.durationUs;
        ++count;
      }
    } else if (e.category == "recv" || e.category == "wait") {
      ++(e.category == "recv" ? rank.recv : rank.wait);
      blocked[i].push_back(interval);
    } else if (e.category == "send") {
      ++rank.send;
    } else {
      ++rank.other;
    }
  }
  double busyTotal = 0;
  for (size_t i = 0; i < n; ++i) {
    RankSummary &rank = summary.ranks[i];
    rank.busyUs = unionLength(busy[i]);
    rank.waitUs = unionLength(blocked[i]);
    // A trace without extent (only instants) has no idle time to speak of.
    rank.bubble = summary.spanUs > 0 ? 1 - rank.busyUs / summary.spanUs : 0.0;
    busyTotal += rank.busyUs;
  }
  summary.bubble =
      summary.spanUs > 0 && n > 0 ? 1 - busyTotal / (summary.spanUs * n) : 0.0;
  summary.slowestForward = slowestStage(forward);
  summary.slowestBackward = slowestStage(backward);
  return summary;
}

void printTraceSummary(const TraceSummary &summary, llvm::raw_ostream &os) {
  auto ms = [](double us) { return us / 1000; };
  os << llvm::formatv("{0} ranks, span {1:f3} ms, bubble {2:f4}\n",
                      summary.ranks.size(), ms(summary.spanUs), summary.bubble);
  os << llvm::formatv("{0,-6} {1,11} {2,11} {3,7} {4,7} {5,8} {6,6} {7,6} "
                      "{8,6} {9,6}\n",
                      "rank", "busy_ms", "wait_ms", "bubble", "events",
                      "compute", "send", "recv", "wait", "other");
  for (const RankSummary &r : summary.ranks)
    os << llvm::formatv("{0,-6} {1,11:f3} {2,11:f3} {3,7:f4} {4,7} {5,8} "
                        "{6,6} {7,6} {8,6} {9,6}\n",
                        r.rank, ms(r.busyUs), ms(r.waitUs), r.bubble, r.events,
                        r.compute, r.send, r.recv, r.wait, r.other);
  if (const auto &f = summary.slowestForward)
    os << llvm::formatv("slowest stage: {0} (F mean {1:f3} ms over {2})\n",
                        f->stage, ms(f->meanUs), f->count);
  if (const auto &b = summary.slowestBackward)
    os << llvm::formatv("slowest backward stage: {0} (B mean {1:f3} ms over "
                        "{2})\n",
                        b->stage, ms(b->meanUs), b->count);
  for (const RankSummary &r : summary.ranks)
    os << llvm::formatv("trace: rank={0} busy_ms={1:f3} wait_ms={2:f3} "
                        "bubble={3:f4} events={4} compute={5} send={6} "
                        "recv={7} wait={8} other={9}\n",
                        r.rank, ms(r.busyUs), ms(r.waitUs), r.bubble, r.events,
                        r.compute, r.send, r.recv, r.wait, r.other);
  os << llvm::formatv("trace: span_ms={0:f3} ranks={1} bubble={2:f4}",
                      ms(summary.spanUs), summary.ranks.size(), summary.bubble);
  if (const auto &f = summary.slowestForward)
    os << llvm::formatv(" slowest_f_stage={0} slowest_f_ms={1:f3}", f->stage,
                        ms(f->meanUs));
  if (const auto &b = summary.slowestBackward)
    os << llvm::formatv(" slowest_b_stage={0} slowest_b_ms={1:f3}", b->stage,
                        ms(b->meanUs));
  os << "\n";
}

//===----------------------------------------------------------------------===//
// SVG timeline
//===----------------------------------------------------------------------===//

namespace {

/// Geometry of the drawing, in SVG user units (pixels).
constexpr double kWidth = 1200, kLeft = 70, kRight = 20, kTop = 34;
constexpr double kRowHeight = 30, kAxisHeight = 40;
/// Average glyph width of the 11px labels, to decide whether one fits.
constexpr double kCharWidth = 6.5;

std::string escapeXML(llvm::StringRef text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      // XML 1.0 forbids most control characters even when escaped.
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
        out += '?';
      else
        out += c;
    }
  }
  return out;
}

llvm::StringRef computeKind(llvm::StringRef name) {
  return llvm::StringSwitch<llvm::StringRef>(name)
      .Cases("F", "B", "I", "W", name)
      .Default("other");
}

llvm::StringRef computeColour(llvm::StringRef kind) {
  return llvm::StringSwitch<llvm::StringRef>(kind)
      .Case("F", "#4c78a8")
      .Case("B", "#f58518")
      .Case("I", "#54a24b")
      .Case("W", "#b279a2")
      .Default("#9d755d");
}

/// A round step (1, 2 or 5 times a power of ten) giving at most ~10 ticks.
double tickStep(double spanMs) {
  if (!(spanMs > 0))
    return 1;
  double raw = spanMs / 8;
  double power = std::pow(10, std::floor(std::log10(raw)));
  double m = raw / power;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * power;
}

std::string tickLabel(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

/// "2F5" for F of stage 2, microbatch 5; the name alone without them.
std::string eventLabel(const TimelineEvent &e) {
  if (e.stage < 0 || e.microbatch < 0)
    return e.name;
  return std::to_string(e.stage) + e.name + std::to_string(e.microbatch);
}

} // namespace

void renderTimelineSVG(const Timeline &timeline, llvm::raw_ostream &os) {
  TraceSummary extent = summarizeTrace(timeline);
  double chartWidth = kWidth - kLeft - kRight;
  double spanUs = extent.spanUs > 0 ? extent.spanUs : 1;
  auto x = [&](double us) {
    return kLeft + (us - extent.startUs) / spanUs * chartWidth;
  };
  size_t rows = timeline.ranks.size();
  double axisY = kTop + rows * kRowHeight + 6;
  double height = axisY + kAxisHeight;
  auto num = [](double v) { return llvm::formatv("{0:f2}", v).str(); };

  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  os << llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" "
                      "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                      "font-family=\"sans-serif\" font-size=\"11\">\n",
                      num(kWidth), num(height));
  os << "<rect class=\"background\" x=\"0\" y=\"0\" width=\"100%\" "
        "height=\"100%\" fill=\"white\"/>\n";

  // Legend: one swatch per compute kind, then the thin bars.
  os << "<g class=\"legend\">\n";
  double lx = kLeft;
  for (llvm::StringRef kind : {"F", "B", "I", "W"}) {
    os << llvm::formatv("<rect class=\"legend\" x=\"{0}\" y=\"8\" "
                        "width=\"12\" height=\"12\" fill=\"{1}\"/>"
                        "<text x=\"{2}\" y=\"18\">{3}</text>\n",
                        num(lx), computeColour(kind), num(lx + 16), kind);
    lx += 40;
  }
  os << llvm::formatv("<rect class=\"legend\" x=\"{0}\" y=\"14\" width=\"12\" "
                      "height=\"4\" fill=\"#888888\"/><text x=\"{1}\" "
                      "y=\"18\">send/recv</text>\n",
                      num(lx), num(lx + 16));
  lx += 80;
  os << llvm::formatv("<rect class=\"legend\" x=\"{0}\" y=\"11\" width=\"12\" "
                      "height=\"6\" fill=\"#d0d0d0\"/><text x=\"{1}\" "
                      "y=\"18\">wait</text>\n",
                      num(lx), num(lx + 16));
  os << "</g>\n";

  // One group per rank: its label, then its events in file order.
  std::vector<std::vector<const TimelineEvent *>> byRow(rows);
  for (const TimelineEvent &e : timeline.events)
    byRow[llvm::lower_bound(timeline.ranks, e.rank) - timeline.ranks.begin()]
        .push_back(&e);
  for (size_t row = 0; row < rows; ++row) {
    int rank = timeline.ranks[row];
    double y = kTop + row * kRowHeight;
    os << llvm::formatv("<g class=\"rank\" data-rank=\"{0}\">\n", rank);
    os << llvm::formatv("<text class=\"label\" x=\"8\" y=\"{0}\">rank {1}"
                        "</text>\n",
                        num(y + 19), rank);
    for (const TimelineEvent *e : byRow[row]) {
      double left = x(e->startUs);
      double width = std::max(0.5, x(e->startUs + e->durationUs) - left);
      std::string title = llvm::formatv(
          "{0} stage {1} microbatch {2}: {3:f3} ms at {4:f3} ms",
          escapeXML(e->name), e->stage, e->microbatch, e->durationUs / 1000,
          (e->startUs - extent.startUs) / 1000);
      if (e->category == "compute") {
        llvm::StringRef kind = computeKind(e->name);
        os << llvm::formatv("<rect class=\"compute {0}\" x=\"{1}\" y=\"{2}\" "
                            "width=\"{3}\" height=\"22\" fill=\"{4}\" "
                            "stroke=\"white\" stroke-width=\"0.5\"><title>{5}"
                            "</title></rect>\n",
                            kind, num(left), num(y + 3), num(width),
                            computeColour(kind), title);
        std::string label = eventLabel(*e);
        if (width >= kCharWidth * label.size() + 4)
          os << llvm::formatv("<text class=\"event\" x=\"{0}\" y=\"{1}\" "
                              "text-anchor=\"middle\" fill=\"white\">{2}"
                              "</text>\n",
                              num(left + width / 2), num(y + 18),
                              escapeXML(label));
        continue;
      }
      // Sends and receives: a thin dark bar under the row; waits: a light
      // band across its middle; anything else: a hairline.
      bool message = e->category == "send" || e->category == "recv";
      bool wait = e->category == "wait";
      double top = message ? y + 25 : wait ? y + 11 : y + 27;
      double barHeight = message ? 4 : wait ? 6 : 2;
      llvm::StringRef fill = message ? "#888888" : wait ? "#d0d0d0" : "#bbbbbb";
      os << llvm::formatv("<rect class=\"{0}\" x=\"{1}\" y=\"{2}\" "
                          "width=\"{3}\" height=\"{4}\" fill=\"{5}\">"
                          "<title>{6}</title></rect>\n",
                          e->category, num(left), num(top), num(width),
                          num(barHeight), fill, title);
    }
    os << "</g>\n";
  }

  // The x axis: milliseconds from the first event.
  double spanMs = extent.spanUs / 1000;
  double step = tickStep(spanMs);
  os << "<g class=\"axis\">\n";
  os << llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" "
                      "stroke=\"black\"/>\n",
                      num(kLeft), num(axisY), num(kLeft + chartWidth));
  for (int k = 0;; ++k) {
    double t = k * step;
    if (t > spanMs * (1 + 1e-9) && k > 0)
      break;
    double tx = kLeft + (spanMs > 0 ? t / spanMs : 0) * chartWidth;
    os << llvm::formatv("<line class=\"tick\" x1=\"{0}\" y1=\"{1}\" "
                        "x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/><text "
                        "class=\"tick\" x=\"{0}\" y=\"{3}\" "
                        "text-anchor=\"middle\">{4}</text>\n",
                        num(tx), num(axisY), num(axisY + 5), num(axisY + 17),
                        tickLabel(t));
    if (spanMs <= 0)
      break;
  }
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\">time "
                      "(ms)</text>\n",
                      num(kLeft + chartWidth), num(axisY + 32));
  os << "</g>\n</svg>\n";
}

} // namespace ppc
