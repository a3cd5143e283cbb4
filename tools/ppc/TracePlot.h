//===- tools/ppc/TracePlot.h - A trace drawn as an SVG timeline -*- C++ -*-===//
//
// `ppc trace plot`: a timeline read back from a trace file
// (tools/ppc/TraceReader.h) drawn as a standalone SVG document, one row per
// rank, in a bounded number of boxes however many events there are.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_TRACEPLOT_H
#define PPC_TOOLS_PPC_TRACEPLOT_H

#include "tools/ppc/TraceRange.h"
#include "tools/ppc/TraceReader.h"

#include <cstddef>
#include <optional>

namespace llvm {
class raw_ostream;
}

namespace ppc {

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

#endif // PPC_TOOLS_PPC_TRACEPLOT_H
