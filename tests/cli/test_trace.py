#!/usr/bin/python3
"""Tests `ppc trace summary` and `ppc trace plot` on trace fixtures, and
that the files ppc writes follow the trace event format (trace_format.py).

Run: PPC=build/bin/ppc /usr/bin/python3 tests/cli/test_trace.py -v
Fixtures: tests/unit/fixtures/trace/summary.json (hand-written; its
numbers are worked out in its "otherData" and in TraceTest.cpp) and
written.json (what writeTraceFile writes for TraceTest's two ranks).
"""
import os
import re
import subprocess
import sys
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PPC, ROOT, tmpdir  # noqa: E402
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


class TraceErrorsTest(unittest.TestCase):
    def check_error(self, args, message):
        r = trace_cmd(*args)
        self.assertEqual(r.returncode, 2, r)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertRegex(r.stderr, "^error: " + message)

    def write(self, text):
        path = os.path.join(tmpdir(self), "t.json")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_one_line_errors(self):
        bad_dur = self.write('[{"ph": "X", "name": "F", "cat": "compute", "pid": 0, '
                             '"tid": 0, "ts": 0, "dur": -3}]')
        no_pid = self.write('{"traceEvents": [{"ph": "X", "name": "F", "cat": "compute", '
                            '"tid": 0, "ts": 0, "dur": 3}]}')
        cases = [
            (["summary", self.write("not json")],
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
        r = trace_cmd("plot", self.write("[]"), "-o", out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("has no complete events", r.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "old")
        self.assertEqual(os.listdir(d), ["t.svg"])


if __name__ == "__main__":
    unittest.main()
