//===- runtime/exec/Trace.cpp - Timeline traces of pipeline runs ----------===//
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
#include "runtime/exec/Trace.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/NumberRules.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
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
        j.attribute("tid", 0);
        j.attributeObject("args", [&] {
          j.attribute("stage", e.stage);
          j.attribute("microbatch", e.microbatch);
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

/// A place where a JSON text is malformed, and what is wrong there, in
/// llvm::json::parse's words.
struct SyntaxError {
  size_t offset = 0;
  std::string message;
};

/// Reads the structure of a JSON text without building it, so that a trace
/// is parsed one value at a time.
///
/// 1. valueEnd() finds where a value ends by reading it the way
///    llvm::json::parse does (strings with their escapes, numbers as runs of
///    number characters, brackets counted outside strings), without checking
///    it.
/// 2. parse() hands that stretch alone to llvm::json::parse. A value that is
///    malformed stops llvm::json::parse at the same byte whether it reads
///    the value alone or the whole text, so the error is the one of the
///    whole text, moved to the value's offset.
/// 3. forEachElement() and forEachMember() check what lies between the
///    values of an array or object (commas, colons, keys) with
///    llvm::json::parse's messages, and visit the values.
class JSONScanner {
public:
  explicit JSONScanner(llvm::StringRef text) : text_(text) {}

  size_t skipWhitespace(size_t p) const {
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' ||
                                text_[p] == '\r' || text_[p] == '\n'))
      ++p;
    return p;
  }

  /// The end of the value that starts at `begin` (past any whitespace). A
  /// malformed value ends no earlier than where llvm::json::parse stops.
  size_t valueEnd(size_t begin) const {
    size_t end = text_.size();
    if (begin >= end)
      return end;
    switch (text_[begin]) {
    case '"':
      return stringEnd(begin);
    case 'n':
    case 't':
      return charEnd(std::min(end, begin + 4));
    case 'f':
      return charEnd(std::min(end, begin + 5));
    case '[':
    case '{': {
      size_t depth = 0;
      for (size_t p = begin; p < end;) {
        char c = text_[p];
        if (c == '"') {
          p = stringEnd(p);
          continue;
        }
        ++p;
        if (c == '[' || c == '{')
          ++depth;
        else if ((c == ']' || c == '}') && --depth == 0)
          return p;
      }
      return end;
    }
    default: {
      size_t p = begin;
      while (p < end && isNumberChar(text_[p]))
        ++p;
      // Not a value: llvm::json::parse stops past its first character.
      return p > begin ? p : charEnd(begin + 1);
    }
    }
  }

  /// Parses the value [begin, end) alone; on failure records where the
  /// whole text is malformed.
  std::optional<llvm::json::Value> parse(size_t begin, size_t end) {
    auto value = llvm::json::parse(text_.slice(begin, end));
    if (value)
      return std::move(*value);
    // llvm::json::ParseError keeps its position to itself; its message is
    // "[line:column, byte=offset]: what".
    std::string message = llvm::toString(value.takeError());
    llvm::StringRef rest(message);
    size_t at = rest.find("byte="), close = rest.find("]: ");
    uint64_t offset = 0;
    if (at == llvm::StringRef::npos || close == llvm::StringRef::npos ||
        close < at || rest.slice(at + 5, close).getAsInteger(10, offset))
      fail(begin, message);
    else
      fail(begin + offset, rest.drop_front(close + 3));
    return std::nullopt;
  }

  /// Visits each element of the array at `p` as onElement(index, begin,
  /// end) and leaves `p` past its ']'. False when onElement returns false
  /// or the array is malformed (error() says where).
  bool forEachElement(
      size_t &p,
      llvm::function_ref<bool(size_t index, size_t begin, size_t end)>
          onElement) {
    p = skipWhitespace(p + 1);
    if (p < text_.size() && text_[p] == ']') {
      ++p;
      return true;
    }
    for (size_t index = 0;; ++index) {
      size_t begin = skipWhitespace(p);
      p = valueEnd(begin);
      if (!onElement(index, begin, p))
        return false;
      p = skipWhitespace(p);
      char c = next(p);
      if (c == ']')
        return true;
      if (c != ',')
        return fail(p, "Expected , or ] after array element");
    }
  }

  /// Visits each member of the object at `p` as onMember(key, begin, end)
  /// of its value and leaves `p` past its '}'. False when onMember returns
  /// false or the object is malformed.
  bool forEachMember(
      size_t &p,
      llvm::function_ref<bool(llvm::StringRef key, size_t begin, size_t end)>
          onMember) {
    p = skipWhitespace(p + 1);
    if (p < text_.size() && text_[p] == '}') {
      ++p;
      return true;
    }
    for (;;) {
      p = skipWhitespace(p);
      size_t keyBegin = p;
      if (next(p) != '"')
        return fail(p, "Expected object key");
      size_t keyEnd = stringEnd(keyBegin);
      std::optional<llvm::json::Value> key = parse(keyBegin, keyEnd);
      if (!key)
        return false;
      p = skipWhitespace(keyEnd);
      if (next(p) != ':')
        return fail(p, "Expected : after object key");
      size_t begin = skipWhitespace(p);
      p = valueEnd(begin);
      if (!onMember(*key->getAsString(), begin, p))
        return false;
      p = skipWhitespace(p);
      char c = next(p);
      if (c == '}')
        return true;
      if (c != ',')
        return fail(p, "Expected , or } after object property");
    }
  }

  /// Checks that [begin, end) is valid JSON while holding at most
  /// kMaxParseBytes of it parsed at a time: a larger array or object is
  /// checked member by member. `depth` bounds the recursion.
  bool validate(size_t begin, size_t end, unsigned depth = 1) {
    char c = begin < end ? text_[begin] : 0;
    if (end - begin <= kMaxParseBytes || (c != '[' && c != '{'))
      return parse(begin, end).has_value();
    if (depth > kMaxJSONDepth)
      return fail(begin, "Nested too deeply");
    size_t p = begin;
    if (c == '[')
      return forEachElement(p, [&](size_t, size_t b, size_t e) {
        return validate(b, e, depth + 1);
      });
    return forEachMember(p, [&](llvm::StringRef, size_t b, size_t e) {
      return validate(b, e, depth + 1);
    });
  }

  /// Past the top-level value at `p`: nothing but whitespace may follow.
  bool checkEnd(size_t p) {
    p = skipWhitespace(p);
    return p == text_.size() || fail(p, "Text after end of document");
  }

  /// "[3:7, byte=52]: Expected , or ] after array element", as
  /// llvm::json::ParseError prints it (column counted from 0).
  std::string describe(const SyntaxError &e) const {
    llvm::StringRef before = text_.take_front(e.offset);
    size_t line = 1 + before.count('\n');
    size_t lineStart = before.rfind('\n');
    size_t column = lineStart == llvm::StringRef::npos
                        ? e.offset
                        : e.offset - lineStart - 1;
    return llvm::formatv("[{0}:{1}, byte={2}]: {3}", line, column, e.offset,
                         e.message);
  }

  const std::optional<SyntaxError> &error() const { return error_; }
  llvm::StringRef text() const { return text_; }

private:
  /// Values up to this size are parsed whole by validate().
  static constexpr size_t kMaxParseBytes = 64 << 10;

  static bool isNumberChar(char c) {
    return (c >= '0' && c <= '9') || c == 'e' || c == 'E' || c == '+' ||
           c == '-' || c == '.';
  }

  /// `p`, or past the UTF-8 sequence it is inside, so that a value handed
  /// to llvm::json::parse alone is valid UTF-8 (the whole text is).
  size_t charEnd(size_t p) const {
    while (p < text_.size() &&
           (static_cast<unsigned char>(text_[p]) & 0xC0) == 0x80)
      ++p;
    return p;
  }

  /// llvm::json::parse's next(): the byte at `p`, then past it; 0 at the
  /// end, which does not move.
  char next(size_t &p) const { return p < text_.size() ? text_[p++] : 0; }

  /// The end of the string whose quote is at `begin`: past its closing
  /// quote, reading escapes (\uXXXX takes four more bytes) as
  /// llvm::json::parse does.
  size_t stringEnd(size_t begin) const {
    size_t end = text_.size();
    for (size_t p = begin + 1; p < end;) {
      char c = text_[p++];
      if (c == '"')
        return p;
      if (c == '\\' && p < end && text_[p++] == 'u')
        p = std::min(end, p + 4);
    }
    return end;
  }

  bool fail(size_t offset, llvm::StringRef message) {
    if (!error_)
      error_ = SyntaxError{offset, message.str()};
    return false;
  }

  llvm::StringRef text_;
  std::optional<SyntaxError> error_;
};

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
bool walkTrace(JSONScanner &scanner, const TraceWalk &walk) {
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

llvm::Error syntaxError(const JSONScanner &scanner, llvm::StringRef what) {
  return makeError(what +
                   " is not valid JSON: " + scanner.describe(*scanner.error()));
}

} // namespace

llvm::Expected<Timeline> parseTrace(llvm::StringRef text,
                                    llvm::StringRef what) {
  // The checks of the whole text that parseJSONBounded makes first.
  if (nestsDeeperThan(text, kMaxJSONDepth))
    return makeError(
        llvm::formatv("{0} nests deeper than {1} levels", what, kMaxJSONDepth)
            .str());
  size_t badByte = 0;
  if (!llvm::json::isUTF8(text, &badByte)) {
    JSONScanner scanner(text);
    return makeError(what + " is not valid JSON: " +
                     scanner.describe({badByte, "Invalid UTF-8 sequence"}));
  }

  // Pass 1 counts the events without parsing any.
  JSONScanner outline(text);
  std::optional<size_t> eventsAt;
  size_t count = 0;
  auto startEvents = [&](size_t begin) {
    eventsAt = begin;
    count = 0;
  };
  auto countEvent = [&](size_t, size_t, size_t) {
    ++count;
    return true;
  };
  auto skipValue = [&](size_t, size_t, bool traceEvents) {
    if (traceEvents) {
      eventsAt.reset();
      count = 0;
    }
    return true;
  };
  bool outlined = walkTrace(outline, {startEvents, countEvent, skipValue});
  if (count > kMaxTraceEvents) {
    if (!outlined)
      return syntaxError(outline, what);
    return makeError(llvm::formatv("{0} has {1} events, over the limit of {2}",
                                   what, count, kMaxTraceEvents));
  }

  // Pass 2 parses one value at a time: it reads the events, and checks
  // everything else is valid JSON. After the first problem with an event it
  // only checks the JSON, since a syntax error anywhere comes first.
  Timeline timeline;
  timeline.events.reserve(count);
  std::vector<bool> named(kMaxTraceRanks, false);
  std::optional<std::string> problem;
  JSONScanner scanner(text);
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
  auto startReading = [&](size_t begin) { theEvents = eventsAt == begin; };
  auto checkValue = [&](size_t begin, size_t end, bool) {
    return scanner.validate(begin, end);
  };
  bool walked = walkTrace(scanner, {startReading, readOne, checkValue});
  if (!walked)
    return syntaxError(scanner, what);
  if (!eventsAt)
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

llvm::Expected<Timeline> readTraceFile(llvm::StringRef path) {
  auto buffer = readFileBounded(path, kMaxTraceBytes, "trace");
  if (!buffer)
    return buffer.takeError();
  return parseTrace((*buffer)->getBuffer(), "trace '" + path.str() + "'");
}

//===----------------------------------------------------------------------===//
// Steps, batches and ranges
//===----------------------------------------------------------------------===//

namespace {
bool isMark(const TimelineEvent &e, llvm::StringRef kind) {
  return e.name == kind && e.category == "other";
}

bool isMark(const TimelineEvent &e) {
  return isMark(e, kStepEventName) || isMark(e, kBatchEventName);
}

/// "steps" or "batches" for a mark kind.
std::string plural(llvm::StringRef kind) {
  return kind == kBatchEventName ? "batches" : kind.str() + "s";
}

constexpr llvm::StringLiteral kNoMarks =
    "traces of ppc older than its step and batch marks have none";
} // namespace

std::vector<TimelineMark> timelineMarks(const Timeline &timeline) {
  bool steps = llvm::any_of(timeline.events, [](const TimelineEvent &e) {
    return isMark(e, kStepEventName);
  });
  llvm::StringRef kind = steps ? kStepEventName : kBatchEventName;
  std::map<int, std::vector<std::pair<double, double>>> byRank;
  for (const TimelineEvent &e : timeline.events)
    if (isMark(e, kind))
      byRank[e.rank].push_back({e.startUs, e.startUs + e.durationUs});
  std::vector<TimelineMark> marks;
  for (auto &[rank, spans] : byRank) {
    llvm::sort(spans);
    for (size_t i = 0; i < spans.size(); ++i) {
      if (i == marks.size()) {
        marks.push_back({kind.str(), static_cast<int>(i + 1), spans[i].first,
                         spans[i].second});
        continue;
      }
      marks[i].startUs = std::min(marks[i].startUs, spans[i].first);
      marks[i].endUs = std::max(marks[i].endUs, spans[i].second);
    }
  }
  return marks;
}

llvm::Expected<TimePoint> parseTimePoint(llvm::StringRef text) {
  auto bad = [&](llvm::StringRef why = "") {
    return makeError(llvm::Twine("'") + printable(text) +
                     "' is not a time (e.g. 120ms, step:3, batch:2)" + why);
  };
  TimePoint point;
  llvm::StringRef rest = text;
  bool step = rest.consume_front("step:");
  if (step || rest.consume_front("batch:")) {
    point.kind = step ? TimePoint::Kind::Step : TimePoint::Kind::Batch;
    int64_t index = 0;
    if (!IntegerRule(INT_MIN, INT_MAX).parse(rest, index).empty())
      return bad();
    if (index < 1)
      return bad(step ? ": steps count from 1" : ": batches count from 1");
    point.index = static_cast<int>(index);
    return point;
  }
  double ms = 0;
  if (!rest.consume_back("ms") || rest.empty() ||
      !RealRule::seconds(0, kMaxTimeUs / 1000).parse(rest, ms).empty())
    return bad();
  point.ms = ms;
  return point;
}

llvm::Expected<TimeRange> resolveTimeRange(const Timeline &timeline,
                                           const std::optional<TimePoint> &from,
                                           const std::optional<TimePoint> &to,
                                           llvm::StringRef fromText,
                                           llvm::StringRef toText) {
  TimeRange whole;
  whole.startUs = timeline.events.empty() ? 0 : timeline.events[0].startUs;
  whole.endUs = whole.startUs;
  for (const TimelineEvent &e : timeline.events) {
    whole.startUs = std::min(whole.startUs, e.startUs);
    whole.endUs = std::max(whole.endUs, e.startUs + e.durationUs);
  }
  std::vector<TimelineMark> marks;
  if ((from && from->kind != TimePoint::Kind::Ms) ||
      (to && to->kind != TimePoint::Kind::Ms))
    marks = timelineMarks(timeline);
  auto resolve = [&](const TimePoint &point, llvm::StringRef what,
                     bool start) -> llvm::Expected<double> {
    if (point.kind == TimePoint::Kind::Ms) {
      double us = whole.startUs + point.ms * 1000;
      if (start && us >= whole.endUs)
        return makeError(llvm::formatv("{0}: the trace ends at {1:f3} ms", what,
                                       (whole.endUs - whole.startUs) / 1000));
      return us;
    }
    llvm::StringRef kind =
        point.kind == TimePoint::Kind::Step ? kStepEventName : kBatchEventName;
    if (marks.empty())
      return makeError(what + ": the trace has no " + kind + " events (" +
                       kNoMarks + ")");
    if (marks[0].kind != kind)
      return makeError(what + ": the trace has no " + kind +
                       " events (it has " + marks[0].kind + " events)");
    if (point.index > static_cast<int>(marks.size()))
      return makeError(
          llvm::formatv("{0}: the trace has {1} {2}", what, marks.size(),
                        marks.size() == 1 ? kind.str() : plural(kind)));
    const TimelineMark &mark = marks[point.index - 1];
    return start ? mark.startUs : mark.endUs;
  };
  TimeRange range = whole;
  if (from) {
    auto us = resolve(*from, fromText, true);
    if (!us)
      return us.takeError();
    range.startUs = *us;
  }
  if (to) {
    auto us = resolve(*to, toText, false);
    if (!us)
      return us.takeError();
    range.endUs = *us;
  }
  // Ranks overlap their batches: batch 3 may begin on one rank before
  // batch 2 ends on another, yet "from batch 3 to batch 2" is no range.
  bool backwards = from && to && from->kind != TimePoint::Kind::Ms &&
                   from->kind == to->kind && from->index > to->index;
  if (backwards || range.startUs >= range.endUs)
    return makeError((from ? fromText : llvm::StringRef("the trace's start")) +
                     " is not before " +
                     (to ? toText : llvm::StringRef("the trace's end")));
  return range;
}

llvm::Expected<Timeline> skipFirstSteps(const Timeline &timeline, int steps) {
  if (steps <= 0)
    return timeline;
  std::vector<TimelineMark> marks = timelineMarks(timeline);
  if (marks.empty())
    return makeError(llvm::Twine("the trace has no step or batch events to "
                                 "skip (") +
                     kNoMarks + ")");
  llvm::StringRef kind = marks[0].kind;
  if (static_cast<size_t>(steps) >= marks.size())
    return makeError(llvm::formatv(
        "the trace has {0} {1}; skipping {2} "
        "leaves none",
        marks.size(), marks.size() == 1 ? kind.str() : plural(kind), steps));
  // Each rank's end of its steps-th mark.
  std::map<int, std::vector<double>> ends;
  for (const TimelineEvent &e : timeline.events)
    if (isMark(e, kind))
      ends[e.rank].push_back(e.startUs);
  std::map<int, double> cut;
  for (auto &[rank, starts] : ends) {
    if (starts.size() <= static_cast<size_t>(steps))
      continue; // a rank with no step after the skipped ones: all dropped
    std::nth_element(starts.begin(), starts.begin() + steps, starts.end());
    cut[rank] = starts[steps];
  }
  Timeline kept;
  kept.ranks = timeline.ranks;
  for (const TimelineEvent &e : timeline.events) {
    auto it = cut.find(e.rank);
    if (it != cut.end() && e.startUs >= it->second)
      kept.events.push_back(e);
  }
  return kept;
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
  std::map<int, StageSummary> stages;
  for (const TimelineEvent &e : timeline.events) {
    size_t i =
        llvm::lower_bound(timeline.ranks, e.rank) - timeline.ranks.begin();
    RankSummary &rank = summary.ranks[i];
    std::pair<double, double> interval{e.startUs, e.startUs + e.durationUs};
    ++rank.events;
    // OUT's stage is the number of stages (the outputs' pseudo-stage): only
    // compute, sends and receives make a stage's row.
    if (e.stage >= 0 && (e.category == "compute" || e.category == "send" ||
                         e.category == "recv")) {
      auto [it, added] = stages.try_emplace(e.stage);
      StageSummary &stage = it->second;
      if (added) {
        stage.stage = e.stage;
        stage.rank = e.rank;
      }
      if (e.category == "compute") {
        double *slot = e.name == "F"   ? &stage.forwardUs
                       : e.name == "B" ? &stage.backwardUs
                       : e.name == "I" ? &stage.inputUs
                       : e.name == "W" ? &stage.weightUs
                                       : nullptr;
        if (slot)
          *slot += e.durationUs;
        stage.forwards += e.name == "F";
      } else if (e.category == "send") {
        stage.sendUs += e.durationUs;
      } else if (e.category == "recv") {
        stage.recvUs += e.durationUs;
      }
    }
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
  for (auto &[index, stage] : stages)
    summary.stages.push_back(stage);
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
  // Per stage; the B, I and W columns only where some stage has them.
  if (!summary.stages.empty()) {
    using Column = std::pair<llvm::StringRef, double StageSummary::*>;
    std::vector<Column> columns{{"F_ms", &StageSummary::forwardUs}};
    for (Column c : {Column{"B_ms", &StageSummary::backwardUs},
                     Column{"I_ms", &StageSummary::inputUs},
                     Column{"W_ms", &StageSummary::weightUs}})
      if (llvm::any_of(summary.stages, [&](const StageSummary &st) {
            return st.*c.second > 0;
          }))
        columns.push_back(c);
    columns.push_back({"send_ms", &StageSummary::sendUs});
    columns.push_back({"recv_ms", &StageSummary::recvUs});
    os << llvm::formatv("{0,-6} {1,6}", "stage", "rank");
    for (const Column &c : columns)
      os << llvm::formatv(" {0,11}", c.first);
    os << llvm::formatv(" {0,8}\n", "forwards");
    for (const StageSummary &st : summary.stages) {
      os << llvm::formatv("{0,-6} {1,6}", st.stage, st.rank);
      for (const Column &c : columns)
        os << llvm::formatv(" {0,11:f3}", ms(st.*c.second));
      os << llvm::formatv(" {0,8}\n", st.forwards);
    }
  }
  if (const auto &f = summary.slowestForward)
    os << llvm::formatv("slowest stage: {0} (F mean {1:f3} ms over {2})\n",
                        f->stage, ms(f->meanUs), f->count);
  if (const auto &b = summary.slowestBackward)
    os << llvm::formatv("slowest backward stage: {0} (B mean {1:f3} ms over "
                        "{2})\n",
                        b->stage, ms(b->meanUs), b->count);
  for (const StageSummary &st : summary.stages)
    os << llvm::formatv("trace: stage={0} f_ms={1:f3} b_ms={2:f3} "
                        "i_ms={3:f3} w_ms={4:f3} send_ms={5:f3} "
                        "recv_ms={6:f3} forwards={7}\n",
                        st.stage, ms(st.forwardUs), ms(st.backwardUs),
                        ms(st.inputUs), ms(st.weightUs), ms(st.sendUs),
                        ms(st.recvUs), st.forwards);
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
constexpr double kLeft = 70, kRight = 20, kTop = 44;
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

std::string num(double v) { return llvm::formatv("{0:f2}", v).str(); }

/// The bands of a rank's row: compute boxes; sends and receives, a thin
/// dark bar under them; waits, a light band across their middle; anything
/// else, a hairline.
enum class Band { Compute, Message, Wait, Other };
constexpr size_t kBands = 4;

Band bandOf(llvm::StringRef category) {
  return llvm::StringSwitch<Band>(category)
      .Case("compute", Band::Compute)
      .Cases("send", "recv", Band::Message)
      .Case("wait", Band::Wait)
      .Default(Band::Other);
}

constexpr llvm::StringRef kComputeKinds[] = {"F", "B", "I", "W", "other"};

size_t kindIndex(llvm::StringRef kind) {
  return llvm::find(kComputeKinds, kind) - std::begin(kComputeKinds);
}

/// The events of one band of a row that start in one column of the
/// drawing, drawn as one box (left and right in pixels).
struct Box {
  Box() = default;
  Box(const TimelineEvent &e, size_t column, double left, double right)
      : first(&e), column(column), events(1), left(left), right(right),
        endUs(e.startUs + e.durationUs) {
    kindUs[kindIndex(computeKind(e.name))] = e.durationUs;
  }

  /// Adds `e`, which starts no earlier than the box.
  void add(const TimelineEvent &e, double eventRight) {
    ++events;
    right = std::max(right, eventRight);
    endUs = std::max(endUs, e.startUs + e.durationUs);
    kindUs[kindIndex(computeKind(e.name))] += e.durationUs;
    mixed |= e.category != first->category;
  }

  /// The compute kind of most of the box's time (its first event's on a
  /// tie).
  llvm::StringRef kind() const {
    size_t best = kindIndex(computeKind(first->name));
    for (size_t k = 0; k < kindUs.size(); ++k)
      if (kindUs[k] > kindUs[best])
        best = k;
    return kComputeKinds[best];
  }

  const TimelineEvent *first = nullptr;
  size_t column = 0, events = 0;
  double left = 0, right = 0, endUs = 0;
  /// Time per compute kind (F, B, I, W, other).
  std::array<double, 5> kindUs{};
  /// Whether the events' categories differ (sends and receives).
  bool mixed = false;
};

/// Draws `box` in the row at `y`: one event as itself, with its label where
/// it fits; several as one box with their count.
void drawBox(llvm::raw_ostream &os, const Box &box, double y, double originUs) {
  const TimelineEvent &e = *box.first;
  double width = box.right - box.left;
  Band band = bandOf(e.category);
  std::string title =
      box.events == 1
          ? llvm::formatv("{0} stage {1} microbatch {2}: {3:f3} ms at {4:f3} "
                          "ms",
                          escapeXML(e.name), e.stage, e.microbatch,
                          e.durationUs / 1000, (e.startUs - originUs) / 1000)
                .str()
          : llvm::formatv("{0} events from {1:f3} to {2:f3} ms", box.events,
                          (e.startUs - originUs) / 1000,
                          (box.endUs - originUs) / 1000)
                .str();
  // A merged box says so in its class and how many events it holds.
  llvm::StringRef merged = box.events == 1 ? "" : " merged";
  std::string count =
      box.events == 1 ? ""
                      : llvm::formatv(" data-events=\"{0}\"", box.events).str();
  if (band == Band::Compute) {
    llvm::StringRef kind = box.events == 1 ? computeKind(e.name) : box.kind();
    os << llvm::formatv("<rect class=\"compute {0}{1}\"{2} x=\"{3}\" "
                        "y=\"{4}\" width=\"{5}\" height=\"22\" fill=\"{6}\" "
                        "stroke=\"white\" stroke-width=\"0.5\"><title>{7}"
                        "</title></rect>\n",
                        kind, merged, count, num(box.left), num(y + 3),
                        num(width), computeColour(kind), title);
    std::string label = eventLabel(e);
    if (box.events == 1 && width >= kCharWidth * label.size() + 4)
      os << llvm::formatv("<text class=\"event\" x=\"{0}\" y=\"{1}\" "
                          "text-anchor=\"middle\" fill=\"white\">{2}"
                          "</text>\n",
                          num(box.left + width / 2), num(y + 18),
                          escapeXML(label));
    return;
  }
  bool message = band == Band::Message, wait = band == Band::Wait;
  double top = message ? y + 25 : wait ? y + 11 : y + 27;
  double barHeight = message ? 4 : wait ? 6 : 2;
  llvm::StringRef fill = message ? "#888888" : wait ? "#d0d0d0" : "#bbbbbb";
  llvm::StringRef category =
      box.mixed ? llvm::StringRef("message") : llvm::StringRef(e.category);
  os << llvm::formatv("<rect class=\"{0}{1}\"{2} x=\"{3}\" y=\"{4}\" "
                      "width=\"{5}\" height=\"{6}\" fill=\"{7}\">"
                      "<title>{8}</title></rect>\n",
                      category, merged, count, num(box.left), num(top),
                      num(width), num(barHeight), fill, title);
}

} // namespace

void renderTimelineSVG(const Timeline &timeline, llvm::raw_ostream &os,
                       const PlotOptions &options) {
  TraceSummary extent = summarizeTrace(timeline);
  // Times are shown in milliseconds from the trace's first event, whatever
  // range is drawn.
  double originUs = extent.startUs;
  TimeRange range =
      options.range.value_or(TimeRange{extent.startUs, extent.endUs});
  double width = std::clamp(options.width, kMinPlotWidth, kMaxPlotWidth);
  double chartWidth = width - kLeft - kRight;
  double rangeUs =
      range.endUs > range.startUs ? range.endUs - range.startUs : 1;
  auto x = [&](double us) {
    us = std::clamp(us, range.startUs, range.startUs + rangeUs);
    return kLeft + (us - range.startUs) / rangeUs * chartWidth;
  };
  size_t rows = timeline.ranks.size();
  double axisY = kTop + rows * kRowHeight + 6;
  double height = axisY + kAxisHeight;

  // The events drawn, per row: all but the step and batch marks, where
  // they overlap the range.
  auto drawn = [&](const TimelineEvent &e) {
    if (isMark(e))
      return false;
    double end = e.startUs + e.durationUs;
    if (e.durationUs > 0)
      return e.startUs < range.endUs && end > range.startUs;
    return e.startUs >= range.startUs && e.startUs <= range.endUs;
  };
  std::vector<std::vector<const TimelineEvent *>> byRow(rows);
  std::array<bool, 5> kindDrawn{};
  std::array<bool, kBands> bandDrawn{};
  for (const TimelineEvent &e : timeline.events) {
    if (!drawn(e))
      continue;
    byRow[llvm::lower_bound(timeline.ranks, e.rank) - timeline.ranks.begin()]
        .push_back(&e);
    Band band = bandOf(e.category);
    bandDrawn[static_cast<size_t>(band)] = true;
    if (band == Band::Compute)
      kindDrawn[kindIndex(computeKind(e.name))] = true;
  }

  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  os << llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" "
                      "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                      "font-family=\"sans-serif\" font-size=\"11\">\n",
                      static_cast<int>(width), num(height));
  os << "<rect class=\"background\" x=\"0\" y=\"0\" width=\"100%\" "
        "height=\"100%\" fill=\"white\"/>\n";

  // Legend: a swatch per compute kind drawn, then the thin bars drawn.
  os << "<g class=\"legend\">\n";
  double lx = kLeft;
  auto entry = [&](llvm::StringRef kind, llvm::StringRef label, double top,
                   double barHeight, llvm::StringRef fill) {
    os << llvm::formatv("<rect class=\"legend\" data-kind=\"{0}\" x=\"{1}\" "
                        "y=\"{2}\" width=\"12\" height=\"{3}\" fill=\"{4}\"/>"
                        "<text x=\"{5}\" y=\"18\">{6}</text>\n",
                        kind, num(lx), num(top), num(barHeight), fill,
                        num(lx + 16), label);
    lx += 16 + kCharWidth * label.size() + 14;
  };
  for (size_t k = 0; k < kindDrawn.size(); ++k)
    if (kindDrawn[k])
      entry(kComputeKinds[k],
            k + 1 == kindDrawn.size() ? llvm::StringRef("other compute")
                                      : kComputeKinds[k],
            8, 12, computeColour(kComputeKinds[k]));
  if (bandDrawn[static_cast<size_t>(Band::Message)])
    entry("message", "send/recv", 14, 4, "#888888");
  if (bandDrawn[static_cast<size_t>(Band::Wait)])
    entry("wait", "wait", 11, 6, "#d0d0d0");
  if (bandDrawn[static_cast<size_t>(Band::Other)])
    entry("other-event", "other", 16, 2, "#bbbbbb");
  os << "</g>\n";

  // One group per rank: its label, then its boxes in order of start.
  // Events of one band that start in one column are drawn as one box, so
  // that the drawing holds at most kMaxPlotBoxes boxes (kBands per row
  // when there are more rows than that allows).
  size_t columns =
      std::clamp<size_t>(kMaxPlotBoxes / (kBands * std::max<size_t>(rows, 1)),
                         1, static_cast<size_t>(chartWidth));
  double columnWidth = chartWidth / columns;
  for (size_t row = 0; row < rows; ++row) {
    int rank = timeline.ranks[row];
    double y = kTop + row * kRowHeight;
    os << llvm::formatv("<g class=\"rank\" data-rank=\"{0}\">\n", rank);
    os << llvm::formatv("<text class=\"label\" x=\"8\" y=\"{0}\">rank {1}"
                        "</text>\n",
                        num(y + 19), rank);
    std::vector<const TimelineEvent *> &events = byRow[row];
    std::stable_sort(events.begin(), events.end(),
                     [](const TimelineEvent *a, const TimelineEvent *b) {
                       return a->startUs < b->startUs;
                     });
    std::array<Box, kBands> open;
    for (const TimelineEvent *e : events) {
      double left = x(e->startUs);
      double right = left + std::max(0.5, x(e->startUs + e->durationUs) - left);
      size_t column = std::min(
          columns - 1,
          static_cast<size_t>(std::max(0.0, (left - kLeft) / columnWidth)));
      Box &box = open[static_cast<size_t>(bandOf(e->category))];
      if (box.events && box.column == column) {
        box.add(*e, right);
        continue;
      }
      if (box.events)
        drawBox(os, box, y, originUs);
      box = Box(*e, column, left, right);
    }
    for (const Box &box : open)
      if (box.events)
        drawBox(os, box, y, originUs);
    os << "</g>\n";
  }

  // A dashed line at the start of each step or batch that starts in the
  // range (not at its end), with its label above the rows where it does not run
  // into the previous one.
  double labelEnd = 0;
  for (const TimelineMark &mark : timelineMarks(timeline)) {
    if (mark.startUs < range.startUs || mark.startUs >= range.endUs)
      continue;
    double mx = x(mark.startUs);
    std::string label = mark.kind + " " + std::to_string(mark.index);
    os << llvm::formatv(
        "<g class=\"marker {0}\" data-index=\"{1}\">"
        "<title>{0} {1}: {2:f3} ms at {3:f3} ms</title>"
        "<line x1=\"{4}\" y1=\"{5}\" x2=\"{4}\" y2=\"{6}\" "
        "stroke=\"#444444\" stroke-dasharray=\"3,2\"/>",
        mark.kind, mark.index, (mark.endUs - mark.startUs) / 1000,
        (mark.startUs - originUs) / 1000, num(mx), num(kTop - 12), num(axisY));
    double labelWidth = kCharWidth * label.size();
    if (mx + 2 >= labelEnd + 4 && mx + 2 + labelWidth <= width) {
      os << llvm::formatv("<text class=\"marker\" x=\"{0}\" y=\"{1}\">{2}"
                          "</text>",
                          num(mx + 2), num(kTop - 4), label);
      labelEnd = mx + 2 + labelWidth;
    }
    os << "</g>\n";
  }

  // The x axis: milliseconds from the trace's first event.
  double fromMs = (range.startUs - originUs) / 1000;
  double toMs = (range.endUs - originUs) / 1000;
  double spanMs = toMs - fromMs;
  double step = tickStep(spanMs);
  os << "<g class=\"axis\">\n";
  os << llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" "
                      "stroke=\"black\"/>\n",
                      num(kLeft), num(axisY), num(kLeft + chartWidth));
  for (double k = std::ceil(fromMs / step - 1e-9);; ++k) {
    double t = k * step;
    if (t > toMs + spanMs * 1e-9 && t > fromMs)
      break;
    double tx = kLeft + (spanMs > 0 ? (t - fromMs) / spanMs : 0) * chartWidth;
    os << llvm::formatv("<line class=\"tick\" x1=\"{0}\" y1=\"{1}\" "
                        "x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/><text "
                        "class=\"tick\" x=\"{0}\" y=\"{3}\" "
                        "text-anchor=\"middle\">{4}</text>\n",
                        num(tx), num(axisY), num(axisY + 5), num(axisY + 17),
                        tickLabel(std::abs(t) < step * 1e-9 ? 0 : t));
    if (spanMs <= 0)
      break;
  }
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\">time "
                      "(ms)</text>\n",
                      num(kLeft + chartWidth), num(axisY + 32));
  os << "</g>\n</svg>\n";
}

} // namespace ppc
