#!/usr/bin/python3
"""Tests `ppc trace summary` and `ppc trace plot` on trace fixtures, and
that the files ppc writes follow the trace event format (trace_format.py).

Run: PPC=build-system/bin/ppc PPC_MODELS_DIR=build-system/models /usr/bin/python3 \
  tests/cli/test_trace.py -v
Fixtures: tests/unit/fixtures/trace/summary.json (hand-written; its
numbers are worked out in its "otherData" and in TraceTest.cpp) and
written.json (what writeTraceFile writes for TraceTest's two ranks).
RangeTest and MarksTest build multi-step traces in Python (pipeline_trace)
and compute what `plot --from/--to` must draw and what `summary
--skip-steps` must print from the events; RealRunTest traces `ppc run
--repeat` and `ppc train` of the 2-stage MLP and checks their batch and step
events and the per-stage table against the files.
TraceLimitsTest writes traces at and over the event limit (about 60 MB
each) into a temporary directory and bounds ppc's memory and the SVG's size.
"""
import json
import os
import re
import subprocess
import sys
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PPC, ROOT, class_tmpdir, launch, model_path, tmpdir  # noqa: E402
from trace_format import assert_valid_trace, load_trace, trace_problems  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "trace")
SUMMARY = os.path.join(FIXTURES, "summary.json")
WRITTEN = os.path.join(FIXTURES, "written.json")
SVG = "{http://www.w3.org/2000/svg}"

RANK_LINE = re.compile(r"^trace: rank=(\d+) (.*)$", re.M)
TOTAL_LINE = re.compile(r"^trace: span_ms=(.*)$", re.M)


def trace_cmd(*args):
    return subprocess.run([PPC, "trace", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def fields(text):
    """{"busy_ms": "6.000", ...} from "busy_ms=6.000 ..."."""
    return dict(item.split("=", 1) for item in text.split())


class TraceSummaryTest(unittest.TestCase):
    def test_prints_the_hand_computed_numbers(self):
        r = trace_cmd("summary", SUMMARY)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        ranks = {int(m.group(1)): fields(m.group(2)) for m in RANK_LINE.finditer(r.stdout)}
        common = {"events": "10", "compute": "4", "send": "2", "recv": "2", "wait": "1",
                  "other": "1"}
        self.assertEqual(ranks, {
            0: dict(busy_ms="6.000", wait_ms="2.800", bubble="0.4000", **common),
            1: dict(busy_ms="5.500", wait_ms="1.250", bubble="0.4500", **common),
        })
        total = TOTAL_LINE.search(r.stdout)
        self.assertIsNotNone(total, r.stdout)
        self.assertEqual(fields("span_ms=" + total.group(1)), {
            "span_ms": "10.000", "ranks": "2", "bubble": "0.4250",
            "slowest_f_stage": "1", "slowest_f_ms": "1.500",
            "slowest_b_stage": "0", "slowest_b_ms": "2.000"})
        # The table: a header and one aligned row per rank.
        lines = r.stdout.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("rank "))
        rows = lines[header:header + 3]
        self.assertEqual([row.split()[0] for row in rows], ["rank", "0", "1"])
        self.assertEqual(len({len(row) for row in rows}), 1, rows)
        self.assertIn("slowest stage: 1 (F mean 1.500 ms over 2)", r.stdout)

    def test_reads_what_the_writer_writes(self):
        r = trace_cmd("summary", WRITTEN)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        ranks = {int(m.group(1)): fields(m.group(2)) for m in RANK_LINE.finditer(r.stdout)}
        # TraceTest's two ranks: rank 0 computes 500 of the 1260 us span,
        # rank 1 700 us, and waits over [1000, 1550).
        self.assertEqual(ranks[0]["busy_ms"], "0.500")
        self.assertEqual(ranks[1]["busy_ms"], "0.700")
        self.assertEqual(ranks[1]["wait_ms"], "0.550")
        self.assertIn("span_ms=1.260 ", r.stdout)


class TracePlotTest(unittest.TestCase):
    def plot(self, trace):
        out = os.path.join(tmpdir(self), "timeline.svg")
        r = trace_cmd("plot", trace, "-o", out)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout, "wrote %s\n" % out)
        return ET.parse(out).getroot()

    def check_plot(self, trace_path):
        root = self.plot(trace_path)
        self.assertEqual(root.tag, SVG + "svg")
        events = [e for e in load_trace(trace_path)["traceEvents"] if e["ph"] == "X"]
        ranks = sorted({e["pid"] for e in events})
        rows = [g for g in root.iter(SVG + "g") if g.get("class") == "rank"]
        self.assertEqual([int(g.get("data-rank")) for g in rows], ranks)
        labels = [t.text for t in root.iter(SVG + "text") if re.fullmatch(r"rank \d+", t.text or "")]
        self.assertEqual(labels, ["rank %d" % r for r in ranks])
        boxes = [r for r in root.iter(SVG + "rect")
                 if (r.get("class") or "").split()[:1] == ["compute"]]
        compute = [e for e in events if e["cat"] == "compute"]
        self.assertEqual(len(boxes), len(compute))
        self.assertEqual(sorted(b.get("class").split()[1] for b in boxes),
                         sorted(e["name"] for e in compute))
        # Each rank's boxes sit in its own row.
        for g in rows:
            mine = [e for e in compute if e["pid"] == int(g.get("data-rank"))]
            self.assertEqual(len([r for r in g.iter(SVG + "rect")
                                  if r.get("class", "").startswith("compute")]), len(mine))
        # F, B, I and W differ in colour.
        colours = {}
        for b in boxes:
            colours.setdefault(b.get("class").split()[1], set()).add(b.get("fill"))
        self.assertTrue(all(len(c) == 1 for c in colours.values()), colours)
        self.assertEqual(len({c.pop() for c in colours.values()}), len(colours))
        return root

    def test_rows_boxes_labels_and_axis(self):
        root = self.check_plot(SUMMARY)
        texts = [t.text for t in root.iter(SVG + "text")]
        for label in ("0F0", "0F1", "1F0", "1B1", "0B0"):
            self.assertIn(label, texts)
        ticks = [t.text for t in root.iter(SVG + "text") if t.get("class") == "tick"]
        # The summary fixture spans 10 ms: ticks 0, 2, ..., 10.
        self.assertEqual(ticks, ["0", "2", "4", "6", "8", "10"])
        self.assertIn("time (ms)", texts)

    def test_plots_what_the_writer_writes(self):
        self.check_plot(WRITTEN)


LEFT, RIGHT = 70, 20   # the chart's margins in the SVG (runtime/exec/Trace.cpp)


def pipeline_trace(marks="step", steps=4, microbatches=2, warmup=10):
    """The trace of a 2-rank, 2-stage pipeline as ppc writes it, with `steps`
    steps (marks="step", forward and backward) or batches (marks="batch",
    forward only), each enclosed by a mark event on both ranks. The first
    one is `warmup` times slower, as a first batch is."""
    events = [{"name": "process_name", "ph": "M", "pid": r, "tid": 0, "ts": 0,
               "args": {"name": "rank %d" % r}} for r in (0, 1)]

    def x(rank, name, cat, stage, mb, ts, dur):
        events.append({"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": rank,
                       "tid": 0, "args": {"stage": stage, "microbatch": mb}})
        return ts + dur

    t = 1000000
    for k in range(steps):
        c = warmup if k == 0 else 1
        end = t
        for m in range(microbatches):
            f0 = t + m * 1000 * c
            x(0, "F", "compute", 0, m, f0, 700 * c)
            x(0, "SEND_F", "send", 0, m, f0 + 700 * c, 100 * c)
            x(1, "RECV_F", "recv", 1, m, f0 + 500 * c, 300 * c)
            end = max(end, x(1, "F", "compute", 1, m, f0 + 800 * c, 900 * c))
        if marks == "step":
            for m in range(microbatches):
                b1 = end + m * 2000 * c
                x(1, "B", "compute", 1, m, b1, 1200 * c)
                x(1, "SEND_B", "send", 1, m, b1 + 1200 * c, 100 * c)
                x(0, "RECV_B", "recv", 0, m, b1 + 1000 * c, 300 * c)
                x(0, "B", "compute", 0, m, b1 + 1300 * c, 600 * c)
            end += microbatches * 2000 * c
        for r in (0, 1):
            x(r, "flush", "wait", -1, -1, end, 50)
            x(r, marks, "other", -1, -1, t, end + 60 - t)
        t = end + 100
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(test, trace, name="t.json"):
    path = os.path.join(tmpdir(test), name)
    with open(path, "w") as f:
        json.dump(trace, f)
    return path


def complete_events(trace):
    return [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace)
            if e["ph"] == "X"]


def mark_spans(events, kind):
    """[(start, end)] of step (batch) k = the k-th mark event of each rank."""
    per_rank = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        if e["name"] == kind and e["cat"] == "other":
            per_rank.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"]))
    return [(min(s for s, _ in spans), max(e for _, e in spans))
            for spans in zip(*per_rank.values())]


def skip_first(events, kind, k):
    """What `summary --skip-steps k` keeps: per rank, the events that start
    no earlier than its own step (batch) k + 1."""
    kept = []
    for rank in sorted({e["pid"] for e in events}):
        mine = [e for e in events if e["pid"] == rank]
        starts = sorted(e["ts"] for e in mine if e["name"] == kind and e["cat"] == "other")
        kept += [e for e in mine if e["ts"] >= starts[k]]
    return kept


def compute_boxes(root):
    return [r for r in root.iter(SVG + "rect") if (r.get("class") or "").split()[:1] == ["compute"]]


def legend_kinds(root):
    return [r.get("data-kind") for r in root.iter(SVG + "rect") if r.get("class") == "legend"]


def markers(root):
    """[(class, index, x, label or None)] of the step and batch markers."""
    out = []
    for g in root.iter(SVG + "g"):
        if (g.get("class") or "").split()[:1] != ["marker"]:
            continue
        line = g.find(SVG + "line")
        text = g.find(SVG + "text")
        out.append((g.get("class"), int(g.get("data-index")), float(line.get("x1")),
                    None if text is None else text.text))
    return out


class RangeTest(unittest.TestCase):
    def plot(self, path, *args):
        out = os.path.join(tmpdir(self), "range.svg")
        r = trace_cmd("plot", path, "-o", out, *args)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        return ET.parse(out).getroot()

    def expected_xs(self, events, start, end, width):
        """The left edges of the compute boxes of `events` in [start, end)."""
        chart = width - LEFT - RIGHT
        return sorted(round(LEFT + (max(e["ts"], start) - start) / (end - start) * chart, 2)
                      for e in events if e["cat"] == "compute"
                      and e["ts"] < end and e["ts"] + e["dur"] > start)

    def assert_boxes(self, root, events, start, end, width=1200):
        xs = sorted(float(b.get("x")) for b in compute_boxes(root))
        want = self.expected_xs(events, start, end, width)
        self.assertEqual(len(xs), len(want))
        for got, expected in zip(xs, want):
            self.assertAlmostEqual(got, expected, delta=0.011)
        for b in compute_boxes(root):
            self.assertGreaterEqual(float(b.get("x")), LEFT - 0.01)
            self.assertLessEqual(float(b.get("x")) + float(b.get("width")),
                                 width - RIGHT + 0.01)

    def test_from_to_steps_draws_only_those_steps(self):
        trace = pipeline_trace("step", steps=4)
        path = write_trace(self, trace)
        events = complete_events(trace)
        spans = mark_spans(events, "step")
        root = self.plot(path, "--from", "step:2", "--to", "step:3")
        self.assert_boxes(root, events, spans[1][0], spans[2][1])
        # 2 steps x 2 microbatches x (F and B) x 2 ranks; the warm-up is gone.
        self.assertEqual(len(compute_boxes(root)), 16)
        self.assertEqual([(c, i, t) for c, i, _, t in markers(root)],
                         [("marker step", 2, "step 2"), ("marker step", 3, "step 3")])
        self.assertEqual(markers(root)[0][2], LEFT)
        # The axis is in ms from the trace's start: it begins at step 2.
        ticks = [float(t.text) for t in root.iter(SVG + "text") if t.get("class") == "tick"]
        first_ms = (spans[1][0] - min(e["ts"] for e in events)) / 1000
        self.assertGreaterEqual(ticks[0], first_ms)
        self.assertLessEqual(ticks[-1], (spans[2][1] - min(e["ts"] for e in events)) / 1000)

    def test_from_a_time_and_from_a_step_to_the_end(self):
        trace = pipeline_trace("step", steps=4)
        path = write_trace(self, trace)
        events = complete_events(trace)
        origin = min(e["ts"] for e in events)
        end = max(e["ts"] + e["dur"] for e in events)
        root = self.plot(path, "--from", "12.5ms")
        self.assert_boxes(root, events, origin + 12500, end)
        # Boxes cut at the left edge: an event running at 12.5 ms starts at x = LEFT.
        self.assertTrue(any(e["ts"] < origin + 12500 < e["ts"] + e["dur"]
                            for e in events if e["cat"] == "compute"))
        self.assertEqual(min(float(b.get("x")) for b in compute_boxes(root)), LEFT)
        spans = mark_spans(events, "step")
        root = self.plot(path, "--from", "step:4")
        self.assert_boxes(root, events, spans[3][0], end)
        self.assertEqual([i for _, i, _, _ in markers(root)], [4])
        root = self.plot(path, "--to", "step:1")
        self.assert_boxes(root, events, origin, spans[0][1])
        self.assertEqual(len(compute_boxes(root)), 8)

    def test_markers_of_a_whole_training_plot(self):
        trace = pipeline_trace("step", steps=4)
        path = write_trace(self, trace)
        events = complete_events(trace)
        spans = mark_spans(events, "step")
        root = self.plot(path)
        origin = min(e["ts"] for e in events)
        end = max(e["ts"] + e["dur"] for e in events)
        got = markers(root)
        self.assertEqual([(c, i, t) for c, i, _, t in got],
                         [("marker step", k, "step %d" % k) for k in (1, 2, 3, 4)])
        for (_, _, x, _), (start, _) in zip(got, spans):
            self.assertAlmostEqual(x, LEFT + (start - origin) / (end - origin) * 1110, delta=0.011)
        # Mark events are markers, not boxes.
        self.assertEqual(len([r for r in root.iter(SVG + "rect")
                              if (r.get("class") or "").startswith("other")]), 0)
        self.assertEqual(legend_kinds(root), ["F", "B", "message", "wait"])

    def test_inference_plot_has_batch_markers_and_no_backward_legend(self):
        trace = pipeline_trace("batch", steps=3)
        path = write_trace(self, trace)
        root = self.plot(path, "--from", "batch:2")
        self.assertEqual([(c, i, t) for c, i, _, t in markers(root)],
                         [("marker batch", 2, "batch 2"), ("marker batch", 3, "batch 3")])
        self.assertEqual(legend_kinds(root), ["F", "message", "wait"])
        legend_text = [t.text for g in root.iter(SVG + "g") if g.get("class") == "legend"
                       for t in g.iter(SVG + "text")]
        self.assertEqual(legend_text, ["F", "send/recv", "wait"])
        self.assertEqual(len(compute_boxes(root)), 2 * 2 * 2)
        # A range with only receives and sends in it lists only them.
        events = complete_events(trace)
        recv = next(e for e in events if e["name"] == "RECV_F" and e["args"]["microbatch"] == 0)
        origin = min(e["ts"] for e in events)
        f0 = next(e for e in events if e["name"] == "F" and e["pid"] == 0)
        # rank 0's first F ends at 7 ms; rank 1's first F starts at 8 ms.
        self.assertLess(f0["ts"] + f0["dur"], recv["ts"] + recv["dur"])
        root = self.plot(path, "--from", "%gms" % ((f0["ts"] + f0["dur"] - origin) / 1000 + 0.1),
                         "--to", "%gms" % ((recv["ts"] + recv["dur"] - origin) / 1000 - 0.1))
        self.assertEqual(compute_boxes(root), [])
        self.assertEqual(legend_kinds(root), ["message"])

    def test_width_scales_the_plot(self):
        trace = pipeline_trace("step", steps=2)
        path = write_trace(self, trace)
        events = complete_events(trace)
        root = self.plot(path, "--width", "800")
        self.assertEqual(root.get("width"), "800")
        self.assertTrue(root.get("viewBox").startswith("0 0 800 "))
        self.assert_boxes(root, events, min(e["ts"] for e in events),
                          max(e["ts"] + e["dur"] for e in events), width=800)
        wide = self.plot(path, "--width", "20000")
        self.assertEqual(wide.get("width"), "20000")

    def test_old_traces_without_marks_still_plot(self):
        root = self.plot(WRITTEN)
        self.assertEqual(markers(root), [])
        self.assertEqual(len(compute_boxes(root)), 2)
        root = self.plot(WRITTEN, "--from", "0.2ms", "--to", "1ms")
        # rank 0's F [0, 0.5) ms and rank 1's F [0.55, 1.25) ms both overlap.
        self.assertEqual(len(compute_boxes(root)), 2)

    def test_bad_values_are_one_line_errors(self):
        trace = pipeline_trace("step", steps=4)
        path = write_trace(self, trace)
        inference = write_trace(self, pipeline_trace("batch", steps=2), "i.json")
        out = os.path.join(tmpdir(self), "x.svg")
        bad = "is not a time (e.g. 120ms, step:3, batch:2)"
        cases = [
            (["--from", "120"], "--from: '120' " + bad),
            (["--from", "step:0"], "--from: 'step:0' " + bad + ": steps count from 1"),
            (["--from", "step:9"], "--from step:9: the trace has 4 steps"),
            (["--from", "batch:1"], "--from batch:1: the trace has no batch events "
                                    "(it has step events)"),
            (["--from", "900ms"], "--from 900ms: the trace ends at "),
            (["--from", "step:3", "--to", "step:2"], "--from step:3 is not before --to step:2"),
            (["--width", "100"], "--width: 100 is not an integer in 400..20000"),
        ]
        # (parseTimePoint's and resolveTimeRange's other refusals are in
        # TraceTest.cpp.)
        for args, message in cases:
            with self.subTest(args=args):
                r = trace_cmd("plot", path, "-o", out, *args)
                self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
                self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
                self.assertTrue(r.stderr.startswith("error: " + message), r.stderr)
        self.assertFalse(os.path.exists(out))
        r = trace_cmd("plot", inference, "-o", out, "--to", "step:1")
        self.assertEqual(r.stderr, "error: --to step:1: the trace has no step events "
                         "(it has batch events)\n")
        r = trace_cmd("plot", WRITTEN, "-o", out, "--from", "step:1")
        self.assertEqual(r.stderr, "error: --from step:1: the trace has no step events "
                         "(traces of ppc older than its step and batch marks have none)\n")


def stage_lines(text):
    return {int(m.group(1)): fields(m.group(2))
            for m in re.finditer(r"^trace: stage=(\d+) (.*)$", text, re.M)}


def expected_busy_ms(events, rank):
    """Compute time of `rank` (ppc's events of one rank do not overlap)."""
    return sum(e["dur"] for e in events if e["pid"] == rank and e["cat"] == "compute") / 1000


class SkipStepsTest(unittest.TestCase):
    def test_skipping_the_warm_up(self):
        trace = pipeline_trace("step", steps=4)
        path = write_trace(self, trace)
        events = complete_events(trace)
        full = trace_cmd("summary", path)
        skipped = trace_cmd("summary", path, "--skip-steps", "1")
        for r in (full, skipped):
            self.assertEqual((r.returncode, r.stderr), (0, ""))
        kept = skip_first(events, "step", 1)
        # The ranks of pipeline_trace start each step together.
        self.assertEqual(len(kept), len([e for e in events
                                         if e["ts"] >= mark_spans(events, "step")[1][0]]))
        for r, evs in ((full, events), (skipped, kept)):
            ranks = {int(m.group(1)): fields(m.group(2)) for m in RANK_LINE.finditer(r.stdout)}
            span_us = max(e["ts"] + e["dur"] for e in evs) - min(e["ts"] for e in evs)
            total = fields("span_ms=" + TOTAL_LINE.search(r.stdout).group(1))
            self.assertEqual(total["span_ms"], "%.3f" % (span_us / 1000))
            for rank in (0, 1):
                busy = expected_busy_ms(evs, rank)
                self.assertEqual(ranks[rank]["busy_ms"], "%.3f" % busy)
                self.assertEqual(ranks[rank]["bubble"], "%.4f" % (1 - busy * 1000 / span_us))
                self.assertEqual(int(ranks[rank]["events"]),
                                 len([e for e in evs if e["pid"] == rank]))
        # The warm-up step is 10 times slower: skipping it lowers the span
        # from 13 steps' worth to 3.
        span = lambda r: float(TOTAL_LINE.search(r.stdout).group(1).split()[0])  # noqa: E731
        self.assertLess(span(skipped), span(full) / 3)
        # Per stage, F time over the kept steps only.
        for stage, row in stage_lines(skipped.stdout).items():
            f = sum(e["dur"] for e in kept if e["name"] == "F" and e["args"]["stage"] == stage)
            self.assertEqual(row["f_ms"], "%.3f" % (f / 1000))
            self.assertEqual(row["forwards"], "6")

    def test_bad_skip_step_counts_are_refused(self):
        path = write_trace(self, pipeline_trace("batch", steps=4))
        cases = [
            ([path, "--skip-steps", "4"],
             "--skip-steps 4: the trace has 4 batches; skipping 4 leaves none"),
            ([path, "--skip-steps", "-1"],
             "--skip-steps: -1 is not an integer in 0..2147483647"),
            ([WRITTEN, "--skip-steps", "1"],
             "--skip-steps 1: the trace has no step or batch events to skip (traces of ppc "
             "older than its step and batch marks have none)"),
        ]
        for args, message in cases:
            with self.subTest(args=args[1:]):
                r = trace_cmd("summary", *args)
                self.assertEqual((r.returncode, r.stdout), (2, ""))
                self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
                self.assertTrue(r.stderr.startswith("error: " + message), r.stderr)
        r = trace_cmd("summary", WRITTEN, "--skip-steps", "0")
        self.assertEqual((r.returncode, r.stderr), (0, ""))


class StageTableTest(unittest.TestCase):
    def test_a_row_per_stage_matching_the_events(self):
        trace = pipeline_trace("step", steps=3)
        path = write_trace(self, trace)
        events = complete_events(trace)
        r = trace_cmd("summary", path)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        rows = stage_lines(r.stdout)
        self.assertEqual(sorted(rows), [0, 1])
        for stage, row in rows.items():
            def total(pred):
                return "%.3f" % (sum(e["dur"] for e in events
                                     if e["args"]["stage"] == stage and pred(e)) / 1000)
            self.assertEqual(row, {
                "f_ms": total(lambda e: e["name"] == "F"),
                "b_ms": total(lambda e: e["name"] == "B"),
                "i_ms": "0.000", "w_ms": "0.000",
                "send_ms": total(lambda e: e["cat"] == "send"),
                "recv_ms": total(lambda e: e["cat"] == "recv"),
                "forwards": "6"})
        # The table: a header naming the kinds that occur (no I or W), a row
        # per stage with its rank.
        lines = r.stdout.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("stage "))
        self.assertEqual(lines[header].split(),
                         ["stage", "rank", "F_ms", "B_ms", "send_ms", "recv_ms", "forwards"])
        self.assertEqual([l.split()[:3] for l in lines[header + 1:header + 3]],
                         [["0", "0", rows[0]["f_ms"]], ["1", "1", rows[1]["f_ms"]]])
        # The lines scripts read are still there, and the whole-trace line last.
        self.assertEqual(len(RANK_LINE.findall(r.stdout)), 2)
        self.assertTrue(lines[-1].startswith("trace: span_ms="), lines[-1])


class RealRunTest(unittest.TestCase):
    """Traces of real runs of the 2-stage MLP on 2 ranks: `ppc run --repeat
    3` (batch marks) and `ppc train --steps 3` (step marks)."""

    @classmethod
    def setUpClass(cls):
        from training import split_under, train, write_data
        d = cls.tmp = class_tmpdir(cls)
        manifest = split_under(d, "mlp", 2)
        cls.run_trace = os.path.join(d, "run.json")
        r = launch(2, "run", manifest, "--input", model_path("mlp", ".input.pt"),
                   "--output", os.path.join(d, "out.pt"), "--microbatches", 2, "--repeat", 3,
                   "--no-meta-cache", "--timeout", 60, "--trace", cls.run_trace,
                   # One run of the executor per batch (test_stream.py checks
                   # the marks of streamed batches).
                   "--stream-window", 0)
        if r.returncode != 0:
            raise AssertionError(r.stdout + r.stderr)
        data = os.path.join(d, "mlp.data.pt")
        write_data(data, "mlp", "cross_entropy")
        cls.train_trace = os.path.join(d, "train.json")
        t = train(2, manifest, data, "--loss", "cross_entropy", "--steps", 3,
                  "--microbatches", 2, "--no-meta-cache", "--trace", cls.train_trace)
        if t.proc.returncode != 0:
            raise AssertionError(t.output)

    def check_marks(self, path, kind, other):
        trace = assert_valid_trace(self, path)
        events = complete_events(trace)
        for rank in (0, 1):
            mine = sorted((e for e in events if e["pid"] == rank), key=lambda e: e["ts"])
            marks = [e for e in mine if e["name"] == kind]
            self.assertEqual(len(marks), 3, (rank, kind))
            self.assertEqual({e["cat"] for e in marks}, {"other"})
            self.assertEqual({(e["args"]["stage"], e["args"]["microbatch"]) for e in marks},
                             {(-1, -1)})
            self.assertFalse([e for e in mine if e["name"] == other])
            # Every action of the rank lies in one of its marks, and each
            # mark holds one run of the executor (it ends with a flush).
            for e in mine:
                if e["name"] != kind:
                    self.assertEqual(len([m for m in marks if m["ts"] <= e["ts"]
                                          and e["ts"] + e["dur"] <= m["ts"] + m["dur"]]), 1, e)
            for m in marks:
                # Contained, as above: over shared memory a batch's last
                # flush can end on the microsecond its mark ends.
                inside = [e for e in mine if e["name"] != kind and m["ts"] <= e["ts"]
                          and e["ts"] + e["dur"] <= m["ts"] + m["dur"]]
                self.assertEqual(len([e for e in inside if e["name"] == "flush"]), 1)
                self.assertEqual(len([e for e in inside if e["name"] == "F"]), 2)
        return events

    def test_run_trace_has_batch_marks(self):
        events = self.check_marks(self.run_trace, "batch", "step")
        out = os.path.join(tmpdir(self), "run.svg")
        # Wide: over shared memory the two batches are short beside the
        # trace's end (the ranks' finish), and a label needs its room.
        r = trace_cmd("plot", self.run_trace, "-o", out, "--from", "batch:2", "--width", 8000)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        root = ET.parse(out).getroot()
        self.assertEqual([(c, i, t) for c, i, _, t in markers(root)],
                         [("marker batch", 2, "batch 2"), ("marker batch", 3, "batch 3")])
        # Inference: no B, I or W in the legend.
        self.assertEqual([k for k in legend_kinds(root) if k in ("F", "B", "I", "W")], ["F"])
        # The range starts where the first rank starts batch 2 (rank 1 may
        # still be in batch 1 then): the F boxes are the F events after it.
        spans = mark_spans(events, "batch")
        self.assertEqual(len(compute_boxes(root)),
                         len([e for e in events if e["name"] == "F"
                              and e["ts"] + e["dur"] > spans[1][0]]))
        self.assertGreaterEqual(len(compute_boxes(root)), 8)
        # The per-stage table against the file, whole and without batch 1.
        for skip, evs in ((0, events), (1, skip_first(events, "batch", 1))):
            s = trace_cmd("summary", self.run_trace, "--skip-steps", skip)
            self.assertEqual((s.returncode, s.stderr), (0, ""))
            rows = stage_lines(s.stdout)
            self.assertEqual(sorted(rows), [0, 1])
            for stage, row in rows.items():
                f = [e["dur"] for e in evs if e["name"] == "F" and e["args"]["stage"] == stage]
                self.assertEqual(len(f), 2 * (3 - skip))
                self.assertEqual(row["forwards"], str(len(f)))
                self.assertAlmostEqual(float(row["f_ms"]), sum(f) / 1000, delta=0.0015)
                self.assertEqual(row["b_ms"], "0.000")
            ranks = {int(m.group(1)): fields(m.group(2)) for m in RANK_LINE.finditer(s.stdout)}
            for rank in (0, 1):
                self.assertAlmostEqual(float(ranks[rank]["busy_ms"]),
                                       expected_busy_ms(evs, rank), delta=0.0015)

    def test_train_trace_has_step_marks(self):
        events = self.check_marks(self.train_trace, "step", "batch")
        out = os.path.join(tmpdir(self), "train.svg")
        r = trace_cmd("plot", self.train_trace, "-o", out, "--from", "step:2", "--to", "step:2")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        root = ET.parse(out).getroot()
        # Step 2 runs from its first start to its last end on any rank (by
        # then, rank 0 may have begun step 3).
        start, end = mark_spans(events, "step")[1]
        self.assertEqual(markers(root)[0][:2], ("marker step", 2))
        self.assertEqual([i for _, i, _, _ in markers(root)][1:], [3] * (len(markers(root)) - 1))
        kinds = sorted(b.get("class").split()[1] for b in compute_boxes(root))
        self.assertEqual(kinds, sorted(e["name"] for e in events if e["cat"] == "compute"
                                       and e["ts"] < end and e["ts"] + e["dur"] > start))
        # At least step 2's 2 microbatches x 2 stages of F and of B.
        self.assertGreaterEqual(kinds.count("F"), 4)
        self.assertGreaterEqual(kinds.count("B"), 4)
        s = trace_cmd("summary", self.train_trace)
        rows = stage_lines(s.stdout)
        for stage, row in rows.items():
            b = sum(e["dur"] for e in events if e["name"] == "B" and e["args"]["stage"] == stage)
            self.assertAlmostEqual(float(row["b_ms"]), b / 1000, delta=0.0015)


class TraceFormatTest(unittest.TestCase):
    def test_fixtures_follow_the_trace_event_format(self):
        # written.json is writeTraceFile's output (TraceTest keeps it so).
        for path in (SUMMARY, WRITTEN):
            with self.subTest(path=os.path.basename(path)):
                trace = assert_valid_trace(self, path)
                self.assertEqual(trace["displayTimeUnit"], "ms")
        written = load_trace(WRITTEN)["traceEvents"]
        names = {e["pid"]: e["args"]["name"] for e in written
                 if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(names, {0: "rank 0", 1: "rank 1"})
        self.assertEqual(sorted(e["ph"] for e in written if e["ph"] in "sf"), ["f", "s"])

    def test_the_checker_finds_problems(self):
        good = load_trace(WRITTEN)
        self.assertEqual(trace_problems(good), [])

        def broken(change):
            trace = load_trace(WRITTEN)
            change(trace["traceEvents"])
            return trace_problems(trace)

        def first(events, ph):
            return next(e for e in events if e["ph"] == ph)

        self.assertTrue(broken(lambda ev: first(ev, "X").update(dur=-1)))
        self.assertTrue(broken(lambda ev: first(ev, "X").pop("ts")))
        self.assertTrue(broken(lambda ev: ev.remove(first(ev, "f"))))
        self.assertTrue(broken(lambda ev: first(ev, "f").update(id=12345)))
        self.assertTrue(broken(lambda ev: first(ev, "f").pop("bp")))
        self.assertTrue(broken(lambda ev: first(ev, "s").update(ts=10 ** 9)))
        self.assertTrue(trace_problems({"traceEvents": 3}))
        # Batch and step marks: -1 stage and microbatch, one rank's do not overlap.
        marked = pipeline_trace("batch", steps=2)
        self.assertEqual(trace_problems(marked), [])
        mark = next(e for e in marked["traceEvents"] if e.get("name") == "batch")
        mark["args"]["stage"] = 0
        self.assertEqual(len(trace_problems(marked)), 1)
        mark["args"]["stage"] = -1
        mark["dur"] *= 100
        self.assertEqual(len(trace_problems(marked)), 1, trace_problems(marked))


class TraceErrorsTest(unittest.TestCase):
    def check_error(self, args, message):
        r = trace_cmd(*args)
        self.assertEqual(r.returncode, 2, r)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertRegex(r.stderr, "^error: " + message)

    def trace_file(self, text):
        path = os.path.join(tmpdir(self), "t.json")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_one_line_errors(self):
        bad_dur = self.trace_file('[{"ph": "X", "name": "F", "cat": "compute", "pid": 0, '
                                  '"tid": 0, "ts": 0, "dur": -3}]')
        no_pid = self.trace_file('{"traceEvents": [{"ph": "X", "name": "F", "cat": "compute", '
                                 '"tid": 0, "ts": 0, "dur": 3}]}')
        cases = [
            (["summary", self.trace_file("not json")],
             re.escape("trace '") + ".*' is not valid JSON: "),
            (["summary", bad_dur],
             re.escape("trace '%s': event 0: \"dur\" must be a number in [0, 1e+15] (got -3)"
                       % bad_dur)),
            (["plot", no_pid, "-o", os.path.join(tmpdir(self), "x.svg")],
             re.escape("trace '%s': event 0: missing \"pid\"" % no_pid)),
            (["summary", "/nonexistent/t.json"],
             re.escape("cannot read trace '/nonexistent/t.json': No such file or directory")),
            (["summary", tmpdir(self)], ".* is not a regular file \\(a directory\\)"),
            (["plot", SUMMARY, "-o", "/nonexistent/dir/t.svg"], ".*/nonexistent/dir/t.svg"),
            (["summary"], "trace is required"),
            (["frobnicate", SUMMARY], ".*"),
        ]
        for args, message in cases:
            with self.subTest(args=args[:1]):
                self.check_error(args, message)

    def test_failed_plot_leaves_the_output_alone(self):
        d = tmpdir(self)
        out = os.path.join(d, "t.svg")
        with open(out, "w") as f:
            f.write("old")
        r = trace_cmd("plot", self.trace_file("[]"), "-o", out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("has no complete events", r.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "old")
        self.assertEqual(os.listdir(d), ["t.svg"])


# Runs a command in a Python process of its own and prints its result and the
# peak resident memory of the command (KiB, RUSAGE_CHILDREN of that process
# holds only the command).
MEASURE = r"""
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""

MiB = 1 << 20
MAX_TRACE_BYTES = 64 * MiB     # kMaxTraceBytes (runtime/exec/Trace.h)
MAX_TRACE_EVENTS = 1000000     # kMaxTraceEvents
MAX_PLOT_BOXES = 16384         # kMaxPlotBoxes


def measured_trace_cmd(*args):
    """trace_cmd's result and ppc's peak resident memory in MiB."""
    r = subprocess.run([sys.executable, "-c", MEASURE, PPC, "trace", *map(str, args)],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise AssertionError("the measuring process failed:\n" + r.stderr)
    out = json.loads(r.stdout)
    return subprocess.CompletedProcess(args, out["rc"], out["stdout"], out["stderr"]), \
        out["maxrss_kib"] / 1024


def write_events(path, events, count):
    """Writes a bare-array trace of `count` events, event(i) each, in chunks."""
    with open(path, "w") as f:
        f.write("[")
        for start in range(0, count, 100000):
            f.write(("," if start else "") +
                    ",".join(events(i) for i in range(start, min(count, start + 100000))))
        f.write("]")


# The dense trace at the event limit: 8 ranks, each doing 125,000 one-microsecond
# steps F, B, SEND_F, wait and an instant (not read), so 800,000 complete events;
# the largest such file that fits kMaxTraceBytes (about 61 MB).
DENSE_RANKS = 8
DENSE_KINDS = [("F", "compute"), ("B", "compute"), ("SEND_F", "send"), ("wait", "wait"), None]


def dense_event(i):
    rank, step = i % DENSE_RANKS, i // DENSE_RANKS
    kind = DENSE_KINDS[step % 5]
    if kind is None:
        return '{"ph":"i"}'
    return ('{"ph":"X","name":"%s","cat":"%s","pid":%d,"tid":0,"ts":%d,"dur":1}'
            % (kind + (rank, step)))


class TraceLimitsTest(unittest.TestCase):
    """Traces at and over the event limit: the reader holds one event's JSON at a
    time and counts the events before it parses any, and the plot is decimated.
    The bounds are on memory and size, not time: each command may take as long
    as the machine needs."""

    # Peak resident memory of ppc beyond what it takes to read a tiny trace
    # (LibTorch alone is 160 MiB or more, depending on the build). Measured: 45
    # MiB over the limit (the 55 MB file), 125 MiB at the limit (the 61 MB file
    # and 800,000 events of ~100 bytes); before the streaming reader, 7 GiB and
    # more (bad_alloc under an 8 GB limit) and 4.5 GiB.
    OVER_LIMIT_MAX_EXTRA_RSS_MIB = 150
    AT_LIMIT_MAX_EXTRA_RSS_MIB = 400
    # renderTimelineSVG's bound with ppc's short names is about 4 MB for up to
    # 4096 ranks (runtime/exec/Trace.h). Measured: 2.2 MB; 139 MB before the boxes
    # were merged.
    MAX_SVG_BYTES = 8 * MiB

    @classmethod
    def setUpClass(cls):
        cls.dir = class_tmpdir(cls)
        cls.dense = os.path.join(cls.dir, "dense.json")
        write_events(cls.dense, dense_event, MAX_TRACE_EVENTS)
        r, cls.base_rss = measured_trace_cmd("summary", SUMMARY)
        if r.returncode != 0:
            raise AssertionError(r.stderr)

    def test_five_million_events_are_refused_before_they_are_parsed(self):
        path = os.path.join(self.dir, "huge.json")
        write_events(path, lambda i: '{"ph":"i"}', 5000000)
        self.assertLess(os.path.getsize(path), MAX_TRACE_BYTES)
        r, rss = measured_trace_cmd("summary", path)
        os.remove(path)
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertEqual(r.stderr, "error: trace '%s' has 5000000 events, over the limit of "
                         "1000000\n" % path)
        self.assertLess(rss - self.base_rss, self.OVER_LIMIT_MAX_EXTRA_RSS_MIB)

    def test_summary_at_the_event_limit(self):
        self.assertLess(os.path.getsize(self.dense), MAX_TRACE_BYTES)
        r, rss = measured_trace_cmd("summary", self.dense)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        ranks = {int(m.group(1)): fields(m.group(2)) for m in RANK_LINE.finditer(r.stdout)}
        self.assertEqual(sorted(ranks), list(range(DENSE_RANKS)))
        for rank in ranks.values():
            # 25,000 F and 25,000 B back to back: 50 ms busy out of 125.
            self.assertEqual({k: rank[k] for k in ("events", "compute", "send", "wait",
                                                   "busy_ms", "wait_ms")},
                             {"events": "100000", "compute": "50000", "send": "25000",
                              "wait": "25000", "busy_ms": "50.000", "wait_ms": "25.000"})
        self.assertLess(rss - self.base_rss, self.AT_LIMIT_MAX_EXTRA_RSS_MIB)

    def test_plot_at_the_event_limit_is_decimated(self):
        out = os.path.join(self.dir, "dense.svg")
        r, rss = measured_trace_cmd("plot", self.dense, "-o", out)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertLess(rss - self.base_rss, self.AT_LIMIT_MAX_EXTRA_RSS_MIB)
        self.assertLess(os.path.getsize(out), self.MAX_SVG_BYTES)
        root = ET.parse(out).getroot()
        rows = [g for g in root.iter(SVG + "g") if g.get("class") == "rank"]
        self.assertEqual([int(g.get("data-rank")) for g in rows], list(range(DENSE_RANKS)))
        boxes = [b for g in rows for b in g.iter(SVG + "rect")]
        self.assertLessEqual(len(boxes), MAX_PLOT_BOXES)
        # Every complete event is in exactly one box, and the boxes keep their kinds.
        self.assertEqual(sum(int(b.get("data-events", "1")) for b in boxes),
                         DENSE_RANKS * 100000)
        kinds = {b.get("class").split()[0] for b in boxes}
        self.assertEqual(kinds, {"compute", "send", "wait"})
        self.assertTrue(all("merged" in b.get("class").split() for b in boxes))
        # Merged boxes carry no labels.
        self.assertEqual([t for t in root.iter(SVG + "text") if t.get("class") == "event"], [])


if __name__ == "__main__":
    unittest.main()
