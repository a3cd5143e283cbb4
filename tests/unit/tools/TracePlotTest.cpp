//===- tests/unit/tools/TracePlotTest.cpp - A trace drawn as SVG ----------===//
#include "tools/ppc/TracePlot.h"

#include "tests/unit/tools/TraceBuilders.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <string>

using namespace ppc;
using namespace ppc::test;

namespace {
std::string svgOf(const Timeline &timeline, const PlotOptions &options = {}) {
  std::string svg;
  llvm::raw_string_ostream os(svg);
  renderTimelineSVG(timeline, os, options);
  os.flush();
  return svg;
}
} // namespace

TEST(TraceSVGTest, RowsBoxesLabelsAndEscaping) {
  auto timeline = readTraceFile(traceFixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  timeline->events[0].name = "<F&>";
  std::string svg;
  llvm::raw_string_ostream os(svg);
  renderTimelineSVG(*timeline, os);
  os.flush();
  auto count = [&](llvm::StringRef needle) {
    return llvm::StringRef(svg).count(needle);
  };
  EXPECT_EQ(count("<g class=\"rank\""), 2u);
  EXPECT_EQ(count(">rank 0</text>"), 1u);
  EXPECT_EQ(count(">rank 1</text>"), 1u);
  EXPECT_EQ(count("<rect class=\"compute "), 8u);
  EXPECT_EQ(count("<rect class=\"compute B\""), 4u);
  EXPECT_EQ(count("<rect class=\"compute other\""), 1u); // the renamed one
  EXPECT_EQ(count("&lt;F&amp;&gt;"), 2u);                // its title and label
  EXPECT_EQ(count("<F&>"), 0u);
  EXPECT_EQ(count(">1F0</text>"), 1u);
  EXPECT_EQ(count(">time (ms)</text>"), 1u);
  // Each event is drawn as itself.
  EXPECT_EQ(count("merged"), 0u);
}

// A dense trace is drawn with merged boxes: at most kMaxPlotBoxes of them,
// every event in exactly one, no labels on merged ones.
TEST(TraceSVGTest, DenseTracesAreMergedIntoBoundedBoxes) {
  Timeline timeline;
  timeline.ranks = {0, 1};
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    bool send = i % 3 == 0;
    timeline.events.push_back({i % 2, send ? "SEND_F" : "F",
                               send ? "send" : "compute", 0, i,
                               static_cast<double>(i), 1});
  }
  std::string svg;
  llvm::raw_string_ostream os(svg);
  renderTimelineSVG(timeline, os);
  os.flush();
  size_t boxes = 0, events = 0, merged = 0;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(svg).split(lines, '\n');
  for (llvm::StringRef line : lines) {
    if (!line.startswith("<rect class=\"compute") &&
        !line.startswith("<rect class=\"send"))
      continue;
    ++boxes;
    size_t at = line.find("data-events=\"");
    uint64_t count = 1;
    if (at != llvm::StringRef::npos) {
      ++merged;
      llvm::StringRef digits = line.drop_front(at + 13);
      ASSERT_FALSE(digits.take_until([](char c) { return c == '"'; })
                       .getAsInteger(10, count))
          << line.str();
    }
    events += count;
  }
  EXPECT_EQ(events, static_cast<size_t>(n));
  EXPECT_GT(merged, 0u);
  EXPECT_LE(boxes, kMaxPlotBoxes);
  EXPECT_EQ(llvm::StringRef(svg).count("<text class=\"event\""), 0u);
  EXPECT_LT(svg.size(), size_t(4) << 20);
}

TEST(TraceSVGTest, RangeWidthMarkersAndLegend) {
  Timeline t = threeSteps();
  std::string whole = svgOf(t);
  auto count = [](const std::string &svg, llvm::StringRef needle) {
    return llvm::StringRef(svg).count(needle);
  };
  EXPECT_EQ(count(whole, "<rect class=\"compute F\""), 6u);
  EXPECT_EQ(count(whole, "<g class=\"marker step\""), 3u);
  EXPECT_EQ(count(whole, ">step 1</text>"), 1u);
  EXPECT_EQ(count(whole, ">step 3</text>"), 1u);
  EXPECT_EQ(count(whole, "width=\"1200\" height="), 1u);
  // Only F is drawn: the legend has F alone, and marks are not boxes.
  EXPECT_EQ(count(whole, "<rect class=\"legend\""), 1u);
  EXPECT_EQ(count(whole, "data-kind=\"F\""), 1u);
  EXPECT_EQ(count(whole, "<rect class=\"other"), 0u);

  PlotOptions options;
  options.width = 600;
  options.range = TimeRange{1200, 1400};
  std::string part = svgOf(t, options);
  EXPECT_EQ(count(part, "width=\"600\" height="), 1u);
  EXPECT_EQ(count(part, "<rect class=\"compute F\""), 2u);
  EXPECT_EQ(count(part, "<g class=\"marker step\" data-index=\"2\""), 1u);
  EXPECT_EQ(count(part, "<g class=\"marker"), 1u); // step 3 starts at the end
  // Rank 0's F of step 2 starts 5 us into the 200 us range of a 510-pixel
  // chart.
  EXPECT_EQ(count(part, "class=\"compute F\" x=\"82.75\""), 1u);
  // The axis: 0.2 .. 0.4 ms from the trace's start.
  EXPECT_EQ(count(part, "class=\"tick\" x=\"70.00\""), 1u);
  EXPECT_EQ(count(part, ">0.2</text>"), 1u);
  EXPECT_EQ(count(part, ">0.4</text>"), 1u);
  EXPECT_EQ(count(part, ">0.1</text>"), 0u);

  auto fixtureTimeline = readTraceFile(traceFixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(fixtureTimeline));
  std::string svg = svgOf(*fixtureTimeline);
  for (const char *kind : {"F", "B", "message", "wait", "other-event"})
    EXPECT_EQ(count(svg, std::string("data-kind=\"") + kind + "\""), 1u)
        << kind;
  EXPECT_EQ(count(svg, "<rect class=\"legend\""), 5u);
}
