//===- tools/ppc/TracePlot.cpp - A trace drawn as an SVG timeline ---------===//
//
// This file implements renderTimelineSVG: the frame of the drawing, the
// events it draws, then the legend, one row per rank (events of one band
// that start in one column merged into one box), the step or batch
// markers and the axis, in that order.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TracePlot.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace ppc {

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

/// Where the drawing goes: its size, the range drawn and its scale.
struct PlotFrame {
  /// Times are shown in milliseconds from the trace's first event, whatever
  /// range is drawn.
  double originUs = 0;
  TimeRange range;
  /// The range's length; 1 for an empty one.
  double rangeUs = 1;
  double width = 0, chartWidth = 0;
  size_t rows = 0;
  double axisY = 0, height = 0;

  /// The x of time `us`, clamped to the range.
  double x(double us) const {
    us = std::clamp(us, range.startUs, range.startUs + rangeUs);
    return kLeft + (us - range.startUs) / rangeUs * chartWidth;
  }
};

PlotFrame makeFrame(const Timeline &timeline, const PlotOptions &options) {
  TimeRange extent = timelineExtent(timeline);
  PlotFrame frame;
  frame.originUs = extent.startUs;
  frame.range = options.range.value_or(extent);
  frame.width = std::clamp(options.width, kMinPlotWidth, kMaxPlotWidth);
  frame.chartWidth = frame.width - kLeft - kRight;
  const TimeRange &range = frame.range;
  frame.rangeUs = range.endUs > range.startUs ? range.endUs - range.startUs : 1;
  frame.rows = timeline.ranks.size();
  frame.axisY = kTop + frame.rows * kRowHeight + 6;
  frame.height = frame.axisY + kAxisHeight;
  return frame;
}

/// The events drawn, per row: all but the step and batch marks, where they
/// overlap the range; and the compute kinds and bands among them.
struct DrawnEvents {
  std::vector<std::vector<const TimelineEvent *>> byRow;
  std::array<bool, 5> kindDrawn{};
  std::array<bool, kBands> bandDrawn{};
};

bool isDrawn(const TimelineEvent &e, const TimeRange &range) {
  if (isTimelineMark(e))
    return false;
  double end = e.startUs + e.durationUs;
  if (e.durationUs > 0)
    return e.startUs < range.endUs && end > range.startUs;
  return e.startUs >= range.startUs && e.startUs <= range.endUs;
}

DrawnEvents selectEvents(const Timeline &timeline, const TimeRange &range) {
  DrawnEvents drawn;
  drawn.byRow.resize(timeline.ranks.size());
  for (const TimelineEvent &e : timeline.events) {
    if (!isDrawn(e, range))
      continue;
    drawn
        .byRow[llvm::lower_bound(timeline.ranks, e.rank) -
               timeline.ranks.begin()]
        .push_back(&e);
    Band band = bandOf(e.category);
    drawn.bandDrawn[static_cast<size_t>(band)] = true;
    if (band == Band::Compute)
      drawn.kindDrawn[kindIndex(computeKind(e.name))] = true;
  }
  return drawn;
}

void writeHeader(llvm::raw_ostream &os, const PlotFrame &frame) {
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  os << llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" "
                      "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                      "font-family=\"sans-serif\" font-size=\"11\">\n",
                      static_cast<int>(frame.width), num(frame.height));
  os << "<rect class=\"background\" x=\"0\" y=\"0\" width=\"100%\" "
        "height=\"100%\" fill=\"white\"/>\n";
}

/// A swatch per compute kind drawn, then the thin bars drawn.
void writeLegend(llvm::raw_ostream &os, const DrawnEvents &drawn) {
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
  const std::array<bool, 5> &kinds = drawn.kindDrawn;
  for (size_t k = 0; k < kinds.size(); ++k)
    if (kinds[k])
      entry(kComputeKinds[k],
            k + 1 == kinds.size() ? llvm::StringRef("other compute")
                                  : kComputeKinds[k],
            8, 12, computeColour(kComputeKinds[k]));
  if (drawn.bandDrawn[static_cast<size_t>(Band::Message)])
    entry("message", "send/recv", 14, 4, "#888888");
  if (drawn.bandDrawn[static_cast<size_t>(Band::Wait)])
    entry("wait", "wait", 11, 6, "#d0d0d0");
  if (drawn.bandDrawn[static_cast<size_t>(Band::Other)])
    entry("other-event", "other", 16, 2, "#bbbbbb");
  os << "</g>\n";
}

/// The columns the chart is cut into: as many as keep the drawing within
/// kMaxPlotBoxes boxes (kBands per row when there are more rows than that
/// allows), at most one a pixel.
size_t plotColumns(const PlotFrame &frame) {
  return std::clamp<size_t>(kMaxPlotBoxes /
                                (kBands * std::max<size_t>(frame.rows, 1)),
                            1, static_cast<size_t>(frame.chartWidth));
}

/// One rank's group: its label, then its boxes in order of start. Events
/// of one band that start in one column are drawn as one box.
void writeRow(llvm::raw_ostream &os, const PlotFrame &frame, size_t row,
              int rank, std::vector<const TimelineEvent *> &events) {
  size_t columns = plotColumns(frame);
  double columnWidth = frame.chartWidth / columns;
  double y = kTop + row * kRowHeight;
  os << llvm::formatv("<g class=\"rank\" data-rank=\"{0}\">\n", rank);
  os << llvm::formatv("<text class=\"label\" x=\"8\" y=\"{0}\">rank {1}"
                      "</text>\n",
                      num(y + 19), rank);
  std::stable_sort(events.begin(), events.end(),
                   [](const TimelineEvent *a, const TimelineEvent *b) {
                     return a->startUs < b->startUs;
                   });
  std::array<Box, kBands> open;
  for (const TimelineEvent *e : events) {
    double left = frame.x(e->startUs);
    double right =
        left + std::max(0.5, frame.x(e->startUs + e->durationUs) - left);
    size_t column = std::min(
        columns - 1,
        static_cast<size_t>(std::max(0.0, (left - kLeft) / columnWidth)));
    Box &box = open[static_cast<size_t>(bandOf(e->category))];
    if (box.events && box.column == column) {
      box.add(*e, right);
      continue;
    }
    if (box.events)
      drawBox(os, box, y, frame.originUs);
    box = Box(*e, column, left, right);
  }
  for (const Box &box : open)
    if (box.events)
      drawBox(os, box, y, frame.originUs);
  os << "</g>\n";
}

/// A dashed line at the start of each step or batch that starts in the
/// range (not at its end), with its label above the rows where it does not
/// run into the previous one.
void writeMarkers(llvm::raw_ostream &os, const Timeline &timeline,
                  const PlotFrame &frame) {
  double labelEnd = 0;
  for (const TimelineMark &mark : timelineMarks(timeline)) {
    if (mark.startUs < frame.range.startUs || mark.startUs >= frame.range.endUs)
      continue;
    double mx = frame.x(mark.startUs);
    std::string label = mark.kind + " " + std::to_string(mark.index);
    os << llvm::formatv("<g class=\"marker {0}\" data-index=\"{1}\">"
                        "<title>{0} {1}: {2:f3} ms at {3:f3} ms</title>"
                        "<line x1=\"{4}\" y1=\"{5}\" x2=\"{4}\" y2=\"{6}\" "
                        "stroke=\"#444444\" stroke-dasharray=\"3,2\"/>",
                        mark.kind, mark.index,
                        (mark.endUs - mark.startUs) / 1000,
                        (mark.startUs - frame.originUs) / 1000, num(mx),
                        num(kTop - 12), num(frame.axisY));
    double labelWidth = kCharWidth * label.size();
    if (mx + 2 >= labelEnd + 4 && mx + 2 + labelWidth <= frame.width) {
      os << llvm::formatv("<text class=\"marker\" x=\"{0}\" y=\"{1}\">{2}"
                          "</text>",
                          num(mx + 2), num(kTop - 4), label);
      labelEnd = mx + 2 + labelWidth;
    }
    os << "</g>\n";
  }
}

/// The x axis: milliseconds from the trace's first event, with ticks.
void writeAxis(llvm::raw_ostream &os, const PlotFrame &frame) {
  double fromMs = (frame.range.startUs - frame.originUs) / 1000;
  double toMs = (frame.range.endUs - frame.originUs) / 1000;
  double spanMs = toMs - fromMs;
  double step = tickStep(spanMs);
  double axisY = frame.axisY, chartWidth = frame.chartWidth;
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
  os << "</g>\n";
}

} // namespace

void renderTimelineSVG(const Timeline &timeline, llvm::raw_ostream &os,
                       const PlotOptions &options) {
  PlotFrame frame = makeFrame(timeline, options);
  DrawnEvents drawn = selectEvents(timeline, frame.range);
  writeHeader(os, frame);
  writeLegend(os, drawn);
  for (size_t row = 0; row < frame.rows; ++row)
    writeRow(os, frame, row, timeline.ranks[row], drawn.byRow[row]);
  writeMarkers(os, timeline, frame);
  writeAxis(os, frame);
  os << "</svg>\n";
}

} // namespace ppc
