"""Checks a timeline trace against the Chrome Trace Event Format, as ppc
writes it (runtime/exec/Trace.h, docs/trace.md). Importable by any CLI test:

    from trace_format import trace_problems, assert_valid_trace
    assert_valid_trace(self, "trace.json")

What is checked, per the format and what viewers (Perfetto,
chrome://tracing) rely on:
  - the file is {"traceEvents": [...], ...} or a bare array of events;
  - every event is an object with "ph" (a string), "pid" and "tid"
    (integers) and "ts" (a number);
  - complete events (ph "X") have a string "name" and "cat" and a "dur"
    >= 0; ppc's categories are compute, send, recv, wait and other, and
    "args" holds integer "stage" and "microbatch" (-1: none);
  - every flow start (ph "s") has exactly one flow end (ph "f") with the
    same id, cat and name (Perfetto matches v1 flows by those three), and
    the reverse; ends carry "bp": "e" (bind to the enclosing slice);
  - every flow event lies within a complete event of the same pid and tid
    (the slice its arrow attaches to), other than a batch or step mark;
  - the batch and step marks (complete events named "batch" or "step" of
    category other) have stage and microbatch -1, and one rank's marks do
    not overlap (its k-th mark is its batch or step k).
"""
import json
import numbers

CATEGORIES = {"compute", "send", "recv", "wait", "other"}
MARKS = {"batch", "step"}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def trace_problems(trace):
    """The list of problems with `trace` (parsed JSON); empty when valid."""
    if isinstance(trace, dict):
        events = trace.get("traceEvents")
    else:
        events = trace
    if not isinstance(events, list):
        return ["expected {\"traceEvents\": [...]} or an array of events"]
    problems = []
    slices = {}   # (pid, tid) -> [(start, end)]
    flows = {}    # (id, cat, name) -> {"s": [ts...], "f": [ts...]}
    flow_points = []
    marks = {}    # pid -> [(start, end, index)]
    for i, e in enumerate(events):
        where = "event %d" % i
        if not isinstance(e, dict):
            problems.append(where + ": not an object")
            continue
        ph = e.get("ph")
        if not isinstance(ph, str):
            problems.append(where + ": no string \"ph\"")
            continue
        missing = [k for k in ("pid", "tid") if not _is_int(e.get(k))]
        if not _is_number(e.get("ts")):
            missing.append("ts")
        if missing:
            problems.append(where + ": no " + ", ".join(missing))
            continue
        if ph == "X":
            if not isinstance(e.get("name"), str) or not isinstance(e.get("cat"), str):
                problems.append(where + ": complete event without a string name and cat")
            elif e["cat"] not in CATEGORIES:
                problems.append(where + ": unknown category %r" % e["cat"])
            dur = e.get("dur")
            if not _is_number(dur) or dur < 0:
                problems.append(where + ": \"dur\" must be a number >= 0, got %r" % (dur,))
                continue
            args = e.get("args", {})
            if not isinstance(args, dict) or not all(
                    _is_int(args.get(k, -1)) and args.get(k, -1) >= -1
                    for k in ("stage", "microbatch")):
                problems.append(where + ": bad args %r" % (args,))
            if e.get("name") in MARKS and e.get("cat") == "other":
                # Not a slice an arrow attaches to: it encloses the whole batch.
                if not isinstance(args, dict) or (args.get("stage"), args.get("microbatch")) != (-1, -1):
                    problems.append(where + ": a %s mark with stage or microbatch other than -1"
                                    % e["name"])
                marks.setdefault(e["pid"], []).append((e["ts"], e["ts"] + dur, i))
            else:
                slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + dur))
        elif ph in ("s", "f"):
            key = (e.get("id"), e.get("cat"), e.get("name"))
            if not (_is_int(key[0]) or isinstance(key[0], str)) or not all(
                    isinstance(k, str) for k in key[1:]):
                problems.append(where + ": flow event without id, cat and name")
                continue
            if ph == "f" and e.get("bp") != "e":
                problems.append(where + ": flow end without \"bp\": \"e\"")
            flows.setdefault(key, {"s": [], "f": []})[ph].append(i)
            flow_points.append((i, e["pid"], e["tid"], e["ts"]))
        elif ph == "M":
            if not isinstance(e.get("name"), str) or not isinstance(e.get("args"), dict):
                problems.append(where + ": metadata event without name and args")
    for key, ends in flows.items():
        if len(ends["s"]) != 1 or len(ends["f"]) != 1:
            problems.append("flow id %r (cat %r, name %r): %d starts (ph s), %d ends (ph f); "
                            "expected one each" % (key[0], key[1], key[2],
                                                   len(ends["s"]), len(ends["f"])))
    for pid, spans in marks.items():
        spans.sort()
        for (_, end, _), (start, _, i) in zip(spans, spans[1:]):
            if start < end:
                problems.append("event %d: a mark of pid %r that begins before the previous one "
                                "ends" % (i, pid))
    for i, pid, tid, ts in flow_points:
        if not any(start <= ts <= end for start, end in slices.get((pid, tid), [])):
            problems.append("event %d: flow event at ts %r is inside no complete event of "
                            "pid %r tid %r" % (i, ts, pid, tid))
    return problems


def load_trace(path):
    with open(path) as f:
        return json.load(f)


def assert_valid_trace(test, path):
    """Fails `test` with every problem of the trace file at `path`; returns
    the parsed trace."""
    trace = load_trace(path)
    problems = trace_problems(trace)
    test.assertEqual(problems, [], "%s is not a valid trace:\n  %s"
                     % (path, "\n  ".join(problems)))
    return trace
