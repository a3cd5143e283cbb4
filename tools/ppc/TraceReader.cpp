//===- tools/ppc/TraceReader.cpp - Read a trace file back -----------------===//
//
// This file implements parseTrace and readTraceFile: two walks over a trace
// file's text with TraceJSONScanner, the first counting its events, the
// second reading them one at a time, each field checked.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TraceReader.h"
#include "tools/ppc/TraceJSONScanner.h"

#include "lib/Error.h"
#include "lib/SafeRead.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

namespace ppc {

namespace {

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
  if (name->size() > kMaxTraceNameBytes)
    return reader.fail(llvm::formatv("\"name\" is {0} bytes, over the limit "
                                     "of {1}",
                                     name->size(), kMaxTraceNameBytes));
  auto category = reader.string("cat");
  if (!category)
    return category.takeError();
  if (!isCategory(*category))
    return reader.fail("unknown category '" + printable(*category, 32) +
                       "' (expected compute, send, recv, wait or other)");
  auto pid = reader.integer("pid", 0, kMaxTraceRanks - 1);
  if (!pid)
    return pid.takeError();
  auto tid = reader.integer("tid", INT32_MIN, INT32_MAX);
  if (!tid)
    return tid.takeError();
  auto ts = reader.number("ts", 0, kMaxTraceTimeUs);
  if (!ts)
    return ts.takeError();
  auto dur = reader.number("dur", 0, kMaxTraceTimeUs);
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
  if (auto ts = reader.number("ts", 0, kMaxTraceTimeUs); !ts)
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

/// Reads one event of the file into `timeline` (complete events) or
/// `named` (ranks named by metadata), or checks it (flow events).
llvm::Error readEvent(const llvm::json::Value &value, llvm::StringRef what,
                      size_t index, Timeline &timeline,
                      std::vector<bool> &named) {
  const llvm::json::Object *event = value.getAsObject();
  if (!event)
    return makeError(
        llvm::formatv("{0}: event {1} is not an object", what, index));
  EventReader reader(*event, what, index);
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
  return llvm::Error::success();
}

/// The walk both passes of parseTrace make over a trace's text: the
/// top-level value; the elements of each array that may hold the events
/// (the top-level array, or a "traceEvents" member that is an array, of
/// which the last is the events, as llvm::json::Object keeps the last of a
/// repeated key), announced by onEvents; and every other value.
struct TraceWalk {
  llvm::function_ref<void(size_t begin)> onEvents;
  llvm::function_ref<bool(size_t index, size_t begin, size_t end)> onEvent;
  llvm::function_ref<bool(size_t begin, size_t end, bool traceEvents)> onValue;
};

/// False when a callback returns false or the text is malformed between
/// the values (scanner.error() says where).
bool walkTrace(TraceJSONScanner &scanner, const TraceWalk &walk) {
  llvm::StringRef text = scanner.text();
  size_t p = scanner.skipWhitespace(0);
  char first = p < text.size() ? text[p] : 0;
  bool ok;
  if (first == '[') {
    walk.onEvents(p);
    ok = scanner.forEachElement(p, walk.onEvent);
  } else if (first == '{') {
    ok = scanner.forEachMember(
        p, [&](llvm::StringRef key, size_t begin, size_t end) {
          bool events = key == "traceEvents";
          if (!events || begin == end || text[begin] != '[')
            return walk.onValue(begin, end, events);
          walk.onEvents(begin);
          return scanner.forEachElement(begin, walk.onEvent);
        });
  } else {
    size_t end = scanner.valueEnd(p);
    ok = walk.onValue(p, end, false);
    p = end;
  }
  return ok && scanner.checkEnd(p);
}

llvm::Error syntaxError(const TraceJSONScanner &scanner, llvm::StringRef what) {
  return makeError(what +
                   " is not valid JSON: " + scanner.describe(*scanner.error()));
}

/// The checks of the whole text that parseJSONBounded makes first.
llvm::Error checkWholeText(llvm::StringRef text, llvm::StringRef what) {
  if (nestsDeeperThan(text, kMaxJSONDepth))
    return makeError(
        llvm::formatv("{0} nests deeper than {1} levels", what, kMaxJSONDepth)
            .str());
  size_t badByte = 0;
  if (!llvm::json::isUTF8(text, &badByte)) {
    TraceJSONScanner scanner(text);
    return makeError(what + " is not valid JSON: " +
                     scanner.describe({badByte, "Invalid UTF-8 sequence"}));
  }
  return llvm::Error::success();
}

/// Where a trace's events begin and how many there are.
struct EventsOutline {
  /// The offset of the events' array; none when the text has none.
  std::optional<size_t> eventsAt;
  size_t count = 0;
};

/// Pass 1 of parseTrace: counts the events without parsing any. A syntax
/// error is reported here only with too many events (pass 2 finds it
/// otherwise).
llvm::Expected<EventsOutline> outlineEvents(llvm::StringRef text,
                                            llvm::StringRef what) {
  TraceJSONScanner outline(text);
  EventsOutline result;
  auto startEvents = [&](size_t begin) {
    result.eventsAt = begin;
    result.count = 0;
  };
  auto countEvent = [&](size_t, size_t, size_t) {
    ++result.count;
    return true;
  };
  auto skipValue = [&](size_t, size_t, bool traceEvents) {
    if (traceEvents) {
      result.eventsAt.reset();
      result.count = 0;
    }
    return true;
  };
  bool outlined = walkTrace(outline, {startEvents, countEvent, skipValue});
  if (result.count > kMaxTraceEvents) {
    if (!outlined)
      return syntaxError(outline, what);
    return makeError(llvm::formatv("{0} has {1} events, over the limit of {2}",
                                   what, result.count, kMaxTraceEvents));
  }
  return result;
}

/// Pass 2 of parseTrace: parses one value at a time; it reads the events,
/// and checks everything else is valid JSON. After the first problem with
/// an event it only checks the JSON, since a syntax error anywhere comes
/// first.
llvm::Expected<Timeline> readEvents(llvm::StringRef text, llvm::StringRef what,
                                    const EventsOutline &outline) {
  Timeline timeline;
  timeline.events.reserve(outline.count);
  std::vector<bool> named(kMaxTraceRanks, false);
  std::optional<std::string> problem;
  TraceJSONScanner scanner(text);
  bool theEvents = false;
  auto readOne = [&](size_t index, size_t begin, size_t end) {
    if (!theEvents)
      return scanner.validate(begin, end);
    if (end - begin > kMaxTraceEventBytes) {
      if (!problem)
        problem = llvm::formatv("{0}: event {1} is {2} bytes, over the limit "
                                "of {3}",
                                what, index, end - begin, kMaxTraceEventBytes)
                      .str();
      return scanner.validate(begin, end);
    }
    std::optional<llvm::json::Value> event = scanner.parse(begin, end);
    if (!event)
      return false;
    if (!problem)
      if (llvm::Error err = readEvent(*event, what, index, timeline, named))
        problem = llvm::toString(std::move(err));
    return true;
  };
  auto startReading = [&](size_t begin) {
    theEvents = outline.eventsAt == begin;
  };
  auto checkValue = [&](size_t begin, size_t end, bool) {
    return scanner.validate(begin, end);
  };
  if (!walkTrace(scanner, {startReading, readOne, checkValue}))
    return syntaxError(scanner, what);
  if (!outline.eventsAt)
    return makeError(what + ": expected an object with an array "
                            "\"traceEvents\", or an array");
  if (problem)
    return makeError(*problem);
  if (timeline.events.empty())
    return makeError(what + " has no complete events (ph \"X\")");
  for (int r = 0; r < kMaxTraceRanks; ++r)
    if (named[r])
      timeline.ranks.push_back(r);
  return timeline;
}

} // namespace

llvm::Expected<Timeline> parseTrace(llvm::StringRef text,
                                    llvm::StringRef what) {
  if (llvm::Error err = checkWholeText(text, what))
    return err;
  auto outline = outlineEvents(text, what);
  if (!outline)
    return outline.takeError();
  return readEvents(text, what, *outline);
}

llvm::Expected<Timeline> readTraceFile(llvm::StringRef path) {
  auto buffer = readFileBounded(path, kMaxTraceBytes, "trace");
  if (!buffer)
    return buffer.takeError();
  return parseTrace((*buffer)->getBuffer(), "trace '" + path.str() + "'");
}

} // namespace ppc
