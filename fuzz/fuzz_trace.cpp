//===- fuzz/fuzz_trace.cpp - Fuzz the trace reader ------------------------===//
//
// Feeds bytes to parseTrace, the reader behind `ppc trace summary` and
// `ppc trace plot`, which parses a file one value at a time instead of
// building its JSON whole. Beyond crashes it checks that:
//   1. an error is one line;
//   2. its JSON errors are those of the whole text: when parseJSONBounded
//      (the whole DOM, with the same depth bound) refuses the text,
//      parseTrace gives exactly its message, and when it accepts the text,
//      parseTrace does not call it invalid JSON;
//   3. an accepted trace keeps the reader's bounds (events, name lengths,
//      ranks sorted and naming every event's rank) and is summarized (a row
//      per rank, every event counted once) and drawn (into a null stream).
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "lib/SafeRead.h"
#include "tools/ppc/TracePlot.h"
#include "tools/ppc/TraceRange.h"
#include "tools/ppc/TraceReader.h"
#include "tools/ppc/TraceSummary.h"

#include "llvm/ADT/STLExtras.h"

#include <string>

using namespace ppc;

namespace {
constexpr const char *kWhat = "trace 'fuzz.json'";

void checkOneLine(const std::string &text) {
  if (text.empty() || text.find('\n') != std::string::npos)
    fuzz::fail("an error that is not one line: " + text);
}

void checkAccepted(const Timeline &timeline) {
  if (timeline.events.empty() || timeline.events.size() > kMaxTraceEvents)
    fuzz::fail("accepted " + llvm::Twine(timeline.events.size()) + " events");
  if (!llvm::is_sorted(timeline.ranks) ||
      std::adjacent_find(timeline.ranks.begin(), timeline.ranks.end()) !=
          timeline.ranks.end())
    fuzz::fail("the ranks are not sorted and distinct");
  for (const TimelineEvent &e : timeline.events) {
    if (e.name.size() > kMaxTraceNameBytes)
      fuzz::fail("accepted a name of " + llvm::Twine(e.name.size()) + " bytes");
    if (!llvm::is_contained(timeline.ranks, e.rank))
      fuzz::fail("event of rank " + llvm::Twine(e.rank) + " has no lane");
  }
  TraceSummary summary = summarizeTrace(timeline);
  if (summary.ranks.size() != timeline.ranks.size())
    fuzz::fail("the summary has another number of ranks");
  int64_t counted = 0;
  for (const RankSummary &r : summary.ranks)
    counted += r.events;
  if (counted != static_cast<int64_t>(timeline.events.size()))
    fuzz::fail("the summary counts " + llvm::Twine(counted) + " of " +
               llvm::Twine(timeline.events.size()) + " events");
  llvm::raw_null_ostream null;
  printTraceSummary(summary, null);
  renderTimelineSVG(timeline, null);

  // Skipped steps and plotted ranges: a result or a one-line error.
  auto kept = skipFirstSteps(timeline, 1);
  if (kept)
    printTraceSummary(summarizeTrace(*kept), null);
  else
    checkOneLine(llvm::toString(kept.takeError()));
  TimePoint from{TimePoint::Kind::Step, 0, 1}, to{TimePoint::Kind::Ms, 0.5, 0};
  auto range = resolveTimeRange(timeline, from, to, "--from", "--to");
  if (range) {
    if (!(range->startUs < range->endUs))
      fuzz::fail("an empty range was accepted");
    PlotOptions options;
    options.width = kMinPlotWidth;
    options.range = *range;
    renderTimelineSVG(timeline, null, options);
  } else {
    checkOneLine(llvm::toString(range.takeError()));
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto timeline = parseTrace(text, kWhat);
  std::string error = timeline ? "" : llvm::toString(timeline.takeError());
  if (timeline)
    checkAccepted(*timeline);
  else
    checkOneLine(error);

  auto whole = parseJSONBounded(text, kMaxJSONDepth, kWhat);
  if (!whole) {
    std::string expected = llvm::toString(whole.takeError());
    if (error != expected)
      fuzz::fail("parseTrace says '" + error +
                 "' where the whole text gives '" + expected + "'");
  } else if (llvm::StringRef(error).startswith(std::string(kWhat) +
                                               " is not valid JSON: ") ||
             llvm::StringRef(error).startswith(std::string(kWhat) +
                                               " nests deeper than ")) {
    fuzz::fail("parseTrace refuses valid JSON: " + error);
  }
  return 0;
}
