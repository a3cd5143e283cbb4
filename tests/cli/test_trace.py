#!/usr/bin/python3
"""Tests `ppc trace summary` and `ppc trace plot` on trace fixtures, and
that the files ppc writes follow the trace event format (trace_format.py).

Run: PPC=build/bin/ppc /usr/bin/python3 tests/cli/test_trace.py -v
Fixtures: tests/unit/fixtures/trace/summary.json (hand-written; its
numbers are worked out in its "otherData" and in TraceTest.cpp) and
written.json (what writeTraceFile writes for TraceTest's two ranks).
TraceLimitsTest writes traces at and over the event limit (about 60 MB
each) into a temporary directory and bounds ppc's memory and the SVG's size.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
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
MAX_TRACE_BYTES = 64 * MiB     # kMaxTraceBytes (runtime/Trace.h)
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
    # 4096 ranks (runtime/Trace.h). Measured: 2.2 MB; 139 MB before the boxes
    # were merged.
    MAX_SVG_BYTES = 8 * MiB

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ppc-trace-limits-")
        cls.dense = os.path.join(cls.dir, "dense.json")
        write_events(cls.dense, dense_event, MAX_TRACE_EVENTS)
        r, cls.base_rss = measured_trace_cmd("summary", SUMMARY)
        if r.returncode != 0:
            raise AssertionError(r.stderr)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

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
