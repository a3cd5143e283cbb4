//===- tests/unit/tools/TraceBuilders.h -----------------------------------===//
//
// Trace test inputs.
//
// What the tests of the trace reader, ranges, summary and plot build their
// timelines from: the fixture files, a trace of one event, and timelines
// of hand-picked events.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_TOOLS_TRACEBUILDERS_H
#define PPC_TESTS_UNIT_TOOLS_TRACEBUILDERS_H

#include "tools/ppc/TraceReader.h"

#include "llvm/Support/Error.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ppc::test {

/// The path of fixture `name` of tests/unit/fixtures/trace.
inline std::string traceFixture(llvm::StringRef name) {
  return std::string(PPC_FIXTURES_DIR) + "/trace/" + name.str();
}

inline std::string errorOf(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : "";
}

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  return value ? "" : llvm::toString(value.takeError());
}

/// A trace of one complete event with `fields` replacing or adding to a
/// valid event's (a null value removes the field).
inline std::string oneEvent(const std::map<std::string, std::string> &fields) {
  std::map<std::string, std::string> event{
      {"name", "\"F\""}, {"cat", "\"compute\""}, {"ph", "\"X\""}, {"ts", "10"},
      {"dur", "5"},      {"pid", "0"},           {"tid", "0"}};
  for (const auto &[key, value] : fields) {
    if (value == "null")
      event.erase(key);
    else
      event[key] = value;
  }
  std::string text = "{\"traceEvents\": [{\"name\": \"process_name\", "
                     "\"ph\": \"M\", \"pid\": 0}, {";
  bool first = true;
  for (const auto &[key, value] : event) {
    text += (first ? "\"" : ", \"") + key + "\": " + value;
    first = false;
  }
  return text + "}]}";
}

/// A timeline of `ranks` ranks from events (rank, name, category, stage,
/// microbatch, start, duration).
inline Timeline timelineOf(std::vector<TimelineEvent> events) {
  Timeline t;
  std::set<int> ranks;
  for (const TimelineEvent &e : events)
    ranks.insert(e.rank);
  t.ranks.assign(ranks.begin(), ranks.end());
  t.events = std::move(events);
  return t;
}

/// Two ranks, three steps of 100 us starting at 1000, 1200 and 1400 (rank
/// 1's 10 us later, and 10 us longer), one F of 50 us at the start of each.
inline Timeline threeSteps(llvm::StringRef kind = kStepEventName) {
  std::vector<TimelineEvent> events;
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < 2; ++r) {
      double start = 1000 + 200 * k + 10 * r;
      events.push_back({r, kind.str(), "other", -1, -1, start, 100.0 + 10 * r});
      events.push_back({r, "F", "compute", r, k, start + 5, 50});
    }
  return timelineOf(std::move(events));
}

} // namespace ppc::test

#endif // PPC_TESTS_UNIT_TOOLS_TRACEBUILDERS_H
