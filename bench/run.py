#!/usr/bin/python3
"""ppc's benchmark suite (issue #7): one command, every figure a ratio.

Usage: bench/run.py [--quick] [--only 1,4,...] [--build-dir build-system] [--jobs 2]
                    [--venv DIR]

Builds what it needs (ppc, bench/plain_forward, bench/transport_bench) in the
system LibTorch configuration (Debian's 1.13 and OpenBLAS, build-system/;
docs/build.md), whose Python is Debian's /usr/bin/python3; what runs
PyTorch 2.x (9's peer, 21.6's MKL, 30) takes its Python from --venv
(default build/venv, the one scripts/python.sh makes), and 30 its ppc from
build/ (the PyTorch 2.x build). It generates its models once (cached in
BUILD/bench-models), runs each benchmark with warm-up and repetitions, and
writes bench/results/latest.json (per benchmark: raw samples, median,
min-max spread, baseline, ratio, target, met) and bench/results/latest.md
(the table, also printed).

Every figure is compared with a baseline measured in the same run, because
the machine is shared and absolute times drift: the configurations of one
benchmark run in interleaved rounds (A B A B ...), after one untimed warm-up
round, so drift hits both sides alike. Medians are reported with the min-max
of the samples. Every process is bounded to one compute thread:
OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 in the environment (Debian's
OpenBLAS ignores at::set_num_threads) and --threads 1 on every ppc rank.

The full suite takes about 6-10 minutes on 2 cores; --quick runs every
benchmark with fewer repetitions and smaller sizes (about 3 minutes).
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"  # Debian's, which has torch and torchvision
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
ENV = dict(os.environ, **THREAD_ENV)

# Set by main(): the build directory and where models and scratch files go.
BUILD = MODELS = WORK = PPC = ""


def pytorch2_venv(cfg=None):
    """The prefix of the PyTorch 2.x configuration's Python (its bin/python
    and bin/torchrun): PPC_RACE_VENV, else --venv, else build/venv (the venv
    scripts/python.sh makes; a python3 of your own with torch 2.x is given
    as its prefix, e.g. --venv /usr/local)."""
    return (os.environ.get("PPC_RACE_VENV") or (cfg or {}).get("race_venv")
            or os.path.join(ROOT, "build", "venv"))


# ---------------------------------------------------------------- helpers

class Sample:
    """One finished command: its stdout+stderr, wall seconds, CPU seconds of
    it and its children (ppc launch waits for its ranks, so theirs count)."""

    def __init__(self, out, wall_s, cpu_s):
        self.out, self.wall_s, self.cpu_s = out, wall_s, cpu_s


def sh(cmd, timeout=600, env=None):
    """Runs cmd (a list) with the bounded-thread environment (or `env`);
    returns a Sample, or raises with the command's output when it fails."""
    cmd = [str(c) for c in cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, env=env or ENV, cwd=ROOT)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), proc.returncode,
                                                   proc.stdout[-3000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(proc.stdout, wall, cpu)


def stats(samples):
    """{"samples", "median", "min", "max", "n"} of a list of numbers."""
    s = [float(x) for x in samples]
    return {"samples": [round(x, 4) for x in s], "median": statistics.median(s),
            "min": min(s), "max": max(s), "n": len(s)}


def rounds(configs, reps, warmup=1, warm_inside=()):
    """Runs each config (name -> function returning a result) in interleaved
    rounds: `warmup` untimed rounds, then `reps` rounds; returns name -> the
    list of results of the timed rounds. Each round starts one config later
    than the one before (A B C, B C A, C A B, ...): a run right after another
    can be slower or faster, and rotating spreads that over all configs.
    Configs named in `warm_inside` warm themselves up and skip the untimed
    rounds."""
    out = {name: [] for name in configs}
    names = list(configs)
    for r in range(warmup + reps):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            if r < warmup and name in warm_inside:
                continue
            result = configs[name]()
            if r >= warmup:
                out[name].append(result)
    return out


def launch(nproc, *args, exe=None):
    """`ppc launch` of `ppc ARGS` on nproc local ranks (EXE: another ppc than
    the build directory's)."""
    exe = exe or PPC
    return [exe, "launch", "--nproc-per-node", nproc, "--master-port", "0", "--", exe, *args]


STATS_LINE = re.compile(r"stats: (rank=\d+ .*)")


def parse_stats(text):
    """Every `stats:` line as a dict of its key=value pairs (numbers as floats)."""
    rows = []
    for m in STATS_LINE.finditer(text):
        row = {}
        for pair in m.group(1).split():
            key, _, value = pair.partition("=")
            try:
                row[key] = float(value)
            except ValueError:
                row[key] = value
        rows.append(row)
    return rows


def trace_summary(path):
    """`ppc trace summary PATH`'s machine-readable lines: {"ranks": {R: {...}},
    "all": {...}}."""
    out = sh([PPC, "trace", "summary", path]).out
    result = {"ranks": {}, "all": {}}
    for line in out.splitlines():
        if not line.startswith("trace: "):
            continue
        kv = dict(p.split("=", 1) for p in line[len("trace: "):].split())
        kv = {k: float(v) if re.match(r"^-?[\d.]+$", v) else v for k, v in kv.items()}
        if "rank" in kv:
            result["ranks"][int(kv["rank"])] = kv
        else:
            result["all"] = kv
    return result


def is_mark(e):
    """A batch or step event (docs/trace.md): it spans a whole batch or step,
    set-up and optimizer included, so the spans below leave it out."""
    return e.get("name") in ("batch", "step") and e.get("cat") == "other"


def trace_events(path):
    """The complete (ph X) events of a Chrome trace file that ppc wrote, but
    the batch and step marks."""
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and not is_mark(e)]


def durations_ms(events, name, rank=None, stage=None):
    """Durations (ms) of the events called `name`, optionally of one rank/stage."""
    return [e["dur"] / 1000.0 for e in events if e["name"] == name
            and (rank is None or e["pid"] == rank)
            and (stage is None or e["args"].get("stage") == stage)]


def split(model, outdir, *how, exe=None):
    """`ppc split MODEL -o OUTDIR HOW...` (by EXE, default the build
    directory's ppc), unless OUTDIR already holds a split of this model that
    is newer than it (splits are cached like models)."""
    manifest = os.path.join(outdir, "manifest.json")
    stamp = os.path.join(outdir, "bench.split-args")
    want = " ".join(map(str, how))
    if (os.path.exists(manifest) and os.path.exists(stamp)
            and os.path.getmtime(manifest) > os.path.getmtime(model)):
        with open(stamp) as f:
            if f.read() == want:
                return manifest
    # ppc split refuses to replace a directory holding files it did not
    # write (the stamp); this one is the benchmarks' own scratch.
    shutil.rmtree(outdir, ignore_errors=True)
    sh([exe or PPC, "split", model, "-o", outdir, *how])
    with open(stamp, "w") as f:
        f.write(want)
    return manifest


def row(bench, name, figure, unit, baseline_name, baseline, ratio, target=None,
        met=None, notes="", **extra):
    """One result: figure and baseline are stats() dicts (or None)."""
    r = {"benchmark": bench, "name": name, "unit": unit, "figure": figure,
         "baseline": {"name": baseline_name, **(baseline or {})}, "ratio": ratio,
         "target": target, "met": met, "notes": notes}
    r.update(extra)
    return r


def fmt(x, unit=""):
    if x is None:
        return "—"
    if abs(x) >= 1000:
        s = "%.0f" % x
    elif abs(x) >= 100:
        s = "%.1f" % x
    elif abs(x) >= 1:
        s = "%.2f" % x
    else:
        s = "%.3g" % x
    return s + (" " + unit if unit else "")


def fmt_stats(s, unit):
    if not s or "median" not in s:
        return "—"
    if s["n"] == 1:
        return fmt(s["median"], unit)
    return "%s (%s–%s)" % (fmt(s["median"], unit), fmt(s["min"]), fmt(s["max"]))


# ------------------------------------------------------------ benchmarks

def batch_ends_us(events):
    """The end (µs, one clock on one host) of each batch of a traced run:
    every rank ends a batch with one 'flush' event, and a batch is done when
    its last rank is."""
    ranks = sorted({e["pid"] for e in events})
    per_rank = [sorted(e["ts"] + e["dur"] for e in events
                       if e["name"] == "flush" and e["pid"] == r) for r in ranks]
    return [max(ends) for ends in zip(*per_rank)]


def wide_runs(cfg):
    """The 16 x Linear(1024) MLP, 4096 rows in 32 microbatches, shared by
    benchmarks 1, 3 and 8: an unsplit (1-stage) run on 1 rank, 2 stages on 2
    ranks under 1f1b and gpipe (traced: F durations and waits), and the plain
    forward program. Every ppc run has a valid meta cache (the warm-up round
    writes it), so no run infers shapes.

    Steady state: each ppc run processes the batch `wide_repeat` times in one
    launch (`ppc run --repeat`); a batch's time is the time between the end of
    the first batch and the end of the last, divided by the batches in
    between (a batch ends when its last rank flushed; one clock on one host).
    So the first batch's costs (the modules' first, profiling calls, the
    ranks' start-up skew) are left out, as plain_forward leaves out its cold
    batch. Stage times t_i are the medians of the F events after batch 1."""
    M, R = 32, cfg["wide_repeat"]  # one execution per batch: --stream-window 0
    model, inp = os.path.join(MODELS, "wide.pt"), os.path.join(MODELS, "wide.input.pt")
    one = split(model, os.path.join(WORK, "wide.1"), "--stages", "1")
    two = split(model, os.path.join(WORK, "wide.2"), "--split-at", "layers.8")
    out = os.path.join(WORK, "wide.out.pt")

    def ppc_run(manifest, nproc, schedule, tag):
        trace = os.path.join(WORK, "wide.%s.trace.json" % tag)
        s = sh(launch(nproc, "run", manifest, "--input", inp, "--output", out,
                      "--microbatches", M, "--threads", 1, "--schedule", schedule,
                      "--repeat", R, "--stream-window", 0, "--stats", "--trace", trace))
        st = parse_stats(s.out)
        assert len(st) == nproc, s.out
        events = trace_events(trace)
        ends = batch_ends_us(events)
        assert len(ends) == R, (len(ends), R)
        steady = trace_events(steady_trace(trace, trace + ".steady.json"))
        stages = sorted({e["args"]["stage"] for e in steady if e["name"] == "F"})
        summary = trace_summary(trace + ".steady.json")
        return {"batch_ms": (ends[-1] - ends[0]) / 1000.0 / (R - 1),
                "blas": sorted({r["blas"] for r in st}),
                # From the first action of any rank to the end of batch 1.
                "first_batch_ms": (ends[0] - min(e["ts"] for e in events)) / 1000.0,
                "total_ms": max(r["total_ms"] for r in st),
                "meta": sorted({r["meta"] for r in st}),
                "wall_s": s.wall_s, "cpus": s.cpu_s / s.wall_s,
                "f_ms": {k: statistics.median(durations_ms(steady, "F", stage=k))
                         for k in stages},
                "f_sum_ms": {k: sum(durations_ms(steady, "F", stage=k)) / (R - 1)
                             for k in stages},
                "summary": summary}

    def plain():
        s = sh([os.path.join(BUILD, "bin", "plain_forward"), model, inp, M, 1,
                cfg["plain_cold"], 1, cfg["plain_reps"]])
        return json.loads(s.out.strip().splitlines()[-1])

    return rounds({
        "unsplit": lambda: ppc_run(one, 1, "1f1b", "unsplit"),
        "1f1b": lambda: ppc_run(two, 2, "1f1b", "1f1b"),
        "gpipe": lambda: ppc_run(two, 2, "gpipe", "gpipe"),
        "plain": plain,
    }, cfg["wide_reps"], warm_inside=("plain",)), M


def bench_speedup(cfg, wide):
    runs, M = wide
    unsplit = stats([r["batch_ms"] for r in runs["unsplit"]])
    split2 = stats([r["batch_ms"] for r in runs["1f1b"]])
    plain = stats([x for r in runs["plain"] for x in r["warm_ms"]])
    # The table shows the ratio of medians; the JSON also has the speed-up of
    # each round (its two runs ran back to back).
    paired = [u["batch_ms"] / s["batch_ms"] for u, s in zip(runs["unsplit"], runs["1f1b"])]
    f1 = statistics.median(sum(r["f_sum_ms"].values()) for r in runs["unsplit"])
    f2 = statistics.median(sum(r["f_sum_ms"].values()) for r in runs["1f1b"])
    cpus = statistics.median(r["cpus"] for r in runs["1f1b"])
    # The summary covers the R - 1 steady batches.
    busy = statistics.median(max(v["busy_ms"] for v in r["summary"]["ranks"].values())
                             for r in runs["1f1b"]) / (cfg["wide_repeat"] - 1)
    notes = ("compute of all stages: %s ms in the 2-rank run vs %s ms unsplit (%.2fx: "
             "ranks slow each other down); busiest rank computes %.0f%% of the run; "
             "the 2-rank launch used %.2f CPUs on average over its life"
             % (fmt(f2), fmt(f1), f2 / f1, 100 * busy / split2["median"], cpus))
    speed = unsplit["median"] / split2["median"]
    notes += "; speed-up per round: %s" % ", ".join("%.2f" % x for x in paired)
    notes += "; " + same_kernel_note(runs, ("unsplit", "1f1b"))
    return [
        row("1 speed-up", "16×Linear(1024), 4096 rows, M=32: 2 stages / 2 ranks, a warm batch",
            split2, "ms", "1 stage / 1 rank", unsplit, speed, ">= 1.7x",
            speed >= 1.7, notes, paired_speedups=paired,
            first_batch_ms={"unsplit": stats([r["first_batch_ms"] for r in runs["unsplit"]]),
                            "2 stages": stats([r["first_batch_ms"] for r in runs["1f1b"]])}),
        row("1 speed-up", "same 2 stages / 2 ranks vs a plain torch::jit forward, 1 thread",
            split2, "ms", "plain forward (warm)", plain, plain["median"] / split2["median"],
            None, None, "plain_forward: same microbatching, median of warm batches "
            "(which include the split and the concatenation)"),
    ]


def same_kernel_note(runs, names):
    """"BLAS openblas:Cooperlake on every side (pinned: ...)": the kernels
    the --stats of the runs `names` name, asserted to be one."""
    kernels = sorted({b for n in names for r in runs[n] for b in r["blas"]})
    assert len(kernels) == 1, "the sides ran different BLAS kernels: %s" % kernels
    return "BLAS %s on every side (%s)" % (kernels[0], BLAS_PIN)


def bench_speedup_kernel(cfg, wide):
    """Issue #21 target 3: benchmark 1's speed-up, both sides on the same,
    best kernel (main() pins it), with the issue's target."""
    first = bench_speedup(cfg, wide)[0]
    speed = first["ratio"]
    return [dict(first, benchmark="21.3 speed-up, same kernel", target=">= 1.8x",
                 met=speed >= 1.8)]


def gflops(ms, m=128, k=1024, n=1024):
    return 2.0 * m * k * n / (ms * 1e-3) / 1e9


MATMUL_SCRIPT = r"""
import ctypes, json, sys, time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
a, w = torch.randn(128, 1024), torch.randn(1024, 1024)
for _ in range(5):
    a @ w
ms = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    a @ w
    ms.append((time.perf_counter() - t) * 1e3)
core = "mkl" if torch.backends.mkl.is_available() else ""
if not core:
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = "openblas:" + lib.openblas_get_corename().decode()
    except OSError:
        core = "unknown"
print("matmul: " + json.dumps({"blas": core, "ms": ms}))
"""


def bench_blas(cfg):
    """Issue #21 target 6: single-thread 128x1024x1024 matmul throughput
    under each OpenBLAS core type that loads (Debian's python3-torch, the
    same libopenblas as ppc's LibTorch) and PyTorch 2.x's MKL (the torch
    wheel's, pytorch2_venv(), if there is one), against a ppc rank's: a
    1-stage `ppc launch` of one Linear(1024, 1024, bias=False) on 128 rows,
    the median of its traced F events (the first batch left out), with
    OPENBLAS_CORETYPE unset (what ppc launch gives a rank on this machine)
    and with the generic kernel as OpenBLAS's default (the test hook
    PPC_TEST_BLAS_CORETYPE_IS_DEFAULT, docs/runtime.md), which ppc launch
    must correct."""
    model = os.path.join(MODELS, "matmul.pt")
    inp = os.path.join(MODELS, "matmul.input.pt")
    if not os.path.exists(inp):
        sh([PYTHON, "-c", "import torch, sys; torch.manual_seed(0); "
            "linear = torch.nn.Linear(1024, 1024, bias=False); "
            "torch.jit.save(torch.jit.script(linear), sys.argv[1]); "
            "torch.save(torch.randn(128, 1024), sys.argv[2])", model, inp])
    manifest = split(model, os.path.join(WORK, "matmul.1"), "--stages", "1")
    base = {k: v for k, v in ENV.items() if k != "OPENBLAS_CORETYPE"}
    reps, repeat = cfg["blas_reps"], cfg["blas_repeat"]

    def python(core, exe=PYTHON):
        env = dict(base, OPENBLAS_CORETYPE=core) if core else base
        s = sh([exe, "-c", MATMUL_SCRIPT, repeat], env=env)
        r = json.loads(s.out.split("matmul: ", 1)[1].splitlines()[0])
        return {"blas": r["blas"], "ms": statistics.median(r["ms"])}

    def rank(**extra):
        trace = os.path.join(WORK, "matmul.trace.json")
        s = sh(launch(1, "run", manifest, "--input", inp, "--output",
                      os.path.join(WORK, "matmul.out.pt"), "--threads", 1, "--repeat", repeat,
                      "--stats", "--trace", trace), env=dict(base, **extra))
        f = sorted((e["ts"], e["dur"] / 1000.0) for e in trace_events(trace) if e["name"] == "F")
        return {"blas": parse_stats(s.out)[0]["blas"],
                "ms": statistics.median(d for _, d in f[1:]), "out": s.out}

    configs = {}
    for core in ("Prescott", "Sandybridge", "Haswell", "Zen", "SkylakeX", "Cooperlake"):
        configs[core] = lambda c=core: python(c)
    venv_python = os.path.join(pytorch2_venv(cfg), "bin", "python")
    if os.path.exists(venv_python):
        configs["mkl"] = lambda: python("", venv_python)
    configs["rank"] = rank
    configs["rank, Prescott as default"] = lambda: rank(
        OPENBLAS_CORETYPE="Prescott", PPC_TEST_BLAS_CORETYPE_IS_DEFAULT="1")
    runs = rounds(configs, reps)
    # A core type OpenBLAS does not have (or maps to another) is left out.
    kernels = {n: rs for n, rs in runs.items() if not n.startswith("rank") and (
        n == "mkl" or all(r["blas"] == "openblas:" + n for r in rs))}
    rate = {n: stats([gflops(r["ms"]) for r in rs]) for n, rs in runs.items()}
    best = max(kernels, key=lambda n: rate[n]["median"])
    out = []
    for n in kernels:
        ratio = rate[n]["median"] / rate[best]["median"]
        out.append(row("21.6 matmul", "128x1024x1024 matmul, 1 thread, %s (python3 torch.matmul)"
                       % (n if n == "mkl" else "OpenBLAS " + n), rate[n], "GFLOP/s",
                       "best: " + best, rate[best], ratio, None, None,
                       "kernel as loaded: %s" % kernels[n][0]["blas"]))
    for n in ("rank", "rank, Prescott as default"):
        ratio = rate[n]["median"] / rate[best]["median"]
        out.append(row("21.6 matmul", "a ppc rank's F (%s), 1 thread" % n, rate[n], "GFLOP/s",
                       "best: " + best, rate[best], ratio, ">= 0.9x", ratio >= 0.9,
                       "the rank ran %s; ppc launch %s" % (
                           " / ".join(sorted({r["blas"] for r in runs[n]})),
                           "noted it chose the kernel" if "note: OpenBLAS" in runs[n][0]["out"]
                           else "chose nothing")))
    return out


def bench_plain(cfg, wide):
    runs, M = wide
    unsplit = stats([r["batch_ms"] for r in runs["unsplit"]])
    first = stats([r["first_batch_ms"] for r in runs["unsplit"]])
    warm = stats([x for r in runs["plain"] for x in r["warm_ms"]])
    cold = stats([x for r in runs["plain"] for x in r["cold_ms"]])
    f_total = statistics.median(sum(r["f_sum_ms"].values()) for r in runs["unsplit"])
    ratio = unsplit["median"] / warm["median"]
    notes = ("steady state (ppc run --repeat %d, batches 2..%d); ppc's F events take %s ms "
             "of its %s ms per batch; ratio of the minimums %.2fx"
             % (cfg["wide_repeat"], cfg["wide_repeat"], fmt(f_total), fmt(unsplit["median"]),
                unsplit["min"] / warm["min"]))
    return [
        row("3 1-stage vs plain", "ppc run, 1 stage / 1 rank, a warm batch", unsplit, "ms",
            "plain forward, warm batches", warm, ratio, "<= 1.05x", ratio <= 1.05, notes),
        row("3 1-stage vs plain", "same, the first batch of a launch",
            first, "ms", "plain forward, cold batch", cold, first["median"] / cold["median"],
            None, None, "both include the modules' first (profiling) calls"),
    ]


def bench_efficiency(cfg, wide):
    runs, M = wide
    rows = []
    for sched in ("gpipe", "1f1b"):
        spans, bounds, ratios = [], [], []
        for r in runs[sched]:
            t = list(r["f_ms"].values())
            bound = sum(t) + (M - 1) * max(t)
            spans.append(r["batch_ms"])
            bounds.append(bound)
            ratios.append(r["batch_ms"] / bound)
        ratio = statistics.median(ratios)
        bub = statistics.median(r["summary"]["all"]["bubble"] for r in runs[sched])
        rows.append(row(
            "8 efficiency", "%s inference, 2 stages / 2 ranks, M=%d: a warm batch"
            % (sched, M), stats(spans), "ms", "bound Σt_i + (M−1)·max t_i", stats(bounds), ratio,
            "<= 1.15x", ratio <= 1.15,
            "t_i = median F of stage i in the same run's trace; ratio = median of per-run "
            "ratios; trace bubble %.3f (formula (p−1)/(M+p−1) = %.3f)" % (bub, 1 / (M + 1)),
            paired_ratios=ratios))
    return rows


def tiny_model_and_input(M):
    """The tiny model (4 × Linear(16)) and an input of its first M rows
    (made once into WORK): M one-row microbatches."""
    inp = os.path.join(WORK, "tiny.input.%d.pt" % M)
    if not os.path.exists(inp):
        sh([PYTHON, "-c", "import torch,sys; torch.save(torch.load(sys.argv[1])[:%d], sys.argv[2])"
            % M, os.path.join(MODELS, "tiny.input.pt"), inp])
    return os.path.join(MODELS, "tiny.pt"), inp


def bench_overhead(cfg):
    """Tiny stages, M microbatches of one row: what a microbatch costs a rank
    beyond its compute (F events) and its transport (SEND_F, RECV_F and post_recv
    events, a receive including its wait for the producer), per stage it
    runs. Counted over the rank's span in the trace (its first action's
    start to its last action's end): the executor's own work between
    actions, OUT (collecting outputs) and trace recording. Not counted: the
    set-up inside Pipeline::run before the first action (splitting the
    input, the start-up agreement, where a rank also waits for a peer that
    is still loading) and the final concatenation; the JSON keeps total_ms."""
    M = cfg["tiny_mb"]
    model, inp = tiny_model_and_input(M)
    layouts = {"1 stage / 1 rank": (1, 1), "2 stages / 2 ranks": (2, 2),
               "4 stages / 2 ranks": (4, 2)}
    manifests = {k: split(model, os.path.join(WORK, "tiny.%d" % s), "--stages", s)
                 for k, (s, _) in layouts.items()}

    def one(name):
        stages, nproc = layouts[name]
        trace = os.path.join(WORK, "tiny.%d.trace.json" % stages)
        s = sh(launch(nproc, "run", manifests[name], "--input", inp, "--output",
                      os.path.join(WORK, "tiny.out.pt"), "--microbatches", M,
                      "--threads", 1, "--stats", "--trace", trace))
        st = {int(r["rank"]): r for r in parse_stats(s.out)}
        ev = trace_events(trace)
        per_rank = {}
        for rank, r in st.items():
            mine = [e for e in ev if e["pid"] == rank]
            n = len({e["args"]["stage"] for e in mine if e["name"] == "F"})
            span = (max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)) / 1000.0
            part = {k: sum(e["dur"] for e in mine if e["name"] in names) / 1000.0
                    for k, names in (("compute", ("F",)), ("transport", ("SEND_F", "RECV_F", "post_recv")),
                                     ("flush", ("flush",)), ("out", ("OUT",)))}
            rest = span - part["compute"] - part["transport"] - part["flush"]
            per_rank[rank] = {"stages": n, "total_ms": r["total_ms"], "span_ms": span, **part,
                              "overhead_us": 1000 * rest / (M * n),
                              "compute_us": 1000 * part["compute"] / (M * n),
                              "transport_us": 1000 * part["transport"] / (M * n)}
        worst = max(per_rank.values(), key=lambda v: v["overhead_us"])
        span_all = (max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)) / 1000.0
        return {"per_mb_us": 1000 * span_all / M,
                "overhead_us": worst["overhead_us"], "compute_us": worst["compute_us"],
                "transport_us": worst["transport_us"], "ranks": per_rank,
                "meta": sorted({r["meta"] for r in st.values()})}

    runs = rounds({k: (lambda k=k: one(k)) for k in layouts}, cfg["tiny_reps"])
    base = stats([r["per_mb_us"] for r in runs["1 stage / 1 rank"]])
    rows = []
    for name, rs in runs.items():
        over = stats([r["overhead_us"] for r in rs])
        comp = stats([r["compute_us"] for r in rs])
        per_mb = stats([r["per_mb_us"] for r in rs])
        trans = statistics.median(r["transport_us"] for r in rs)
        rows.append(row(
            "2 per-microbatch overhead", "%s, %d × 1 row: overhead per microbatch per stage"
            % (name, M), over, "µs", "compute (F) per microbatch per stage", comp,
            over["median"] / comp["median"], "<= 25 µs", over["median"] <= 25,
            "a microbatch takes %s µs of the trace span (1 stage / 1 rank: %s µs); "
            "send+recv incl. waiting %s µs per microbatch per stage (worst rank)"
            % (fmt(per_mb["median"]), fmt(base["median"]), fmt(trans)),
            per_microbatch_us=per_mb, runs=rs))
    return rows


def bench_coalesce(cfg):
    """An edge carrying many values (tests/models' `values`: its one cut
    carries ten wire tensors), 2 stages on 2 ranks, M one-row microbatches:
    messages per microbatch per stage and the time per microbatch (the
    trace span over M), coalesced (the default: one message per edge and
    microbatch, runtime/exec/WirePack.h) against PPC_COALESCE=0 (one message per
    wire tensor), in interleaved rounds. Messages per microbatch: rank 0's
    messages_sent at M and M/2 (meta from the cache, so no headers; the
    start-up collectives cancel), divided by M/2."""
    M = max(32, cfg["tiny_mb"] // 8)
    if not os.path.exists(os.path.join(MODELS, "values.pt")):
        sh([PYTHON, os.path.join(ROOT, "tests", "models", "make_models.py"), MODELS,
            "--only", "values"])
    manifest = split(os.path.join(MODELS, "values.pt"), os.path.join(WORK, "values.2"),
                     "--split-at", "post")
    inp = os.path.join(WORK, "values.input.%d.pt" % M)
    if not os.path.exists(inp):
        sh([PYTHON, "-c", "import torch,sys; torch.manual_seed(0); "
            "torch.save(torch.randn(%d, 8), sys.argv[1])" % M, inp])
    half = inp[:-3] + ".half.pt"
    if not os.path.exists(half):
        sh([PYTHON, "-c", "import torch,sys; torch.save(torch.load(sys.argv[1])[:%d], sys.argv[2])"
            % (M // 2), inp, half])

    def one(coalesce, mb, x, trace=None):
        extra = ["--trace", trace] if trace else []
        s = sh(["env", "PPC_COALESCE=%d" % coalesce,
                *launch(2, "run", manifest, "--input", x, "--output",
                        os.path.join(WORK, "values.out.pt"), "--microbatches", mb,
                        "--threads", 1, "--stats", *extra)])
        return {int(r["rank"]): r for r in parse_stats(s.out)}

    def timed(coalesce):
        trace = os.path.join(WORK, "values.%d.trace.json" % coalesce)
        st = one(coalesce, M, inp, trace)
        ev = trace_events(trace)
        span = max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)
        return {"per_mb_us": span / M, "meta": sorted({r["meta"] for r in st.values()})}

    messages = {}
    for c in (1, 0):
        one(c, M, inp)  # writes the meta cache
        messages[c] = (one(c, M, inp)[0]["messages_sent"]
                       - one(c, M // 2, half)[0]["messages_sent"]) / (M // 2)
    runs = rounds({"coalesced": lambda: timed(1), "PPC_COALESCE=0": lambda: timed(0)},
                  cfg["tiny_reps"])
    fig = stats([r["per_mb_us"] for r in runs["coalesced"]])
    base = stats([r["per_mb_us"] for r in runs["PPC_COALESCE=0"]])
    return [row("21.c coalesce", "values (10 wire tensors per edge), 2 stages / 2 ranks, %d × 1 row: "
                "time per microbatch" % M, fig, "µs", "one message per wire tensor "
                "(PPC_COALESCE=0)", base, fig["median"] / base["median"], None, None,
                "messages per microbatch per stage: %s coalesced, %s not"
                % (fmt(messages[1]), fmt(messages[0])),
                messages_per_microbatch={"coalesced": messages[1], "uncoalesced": messages[0]},
                runs=runs)]


def bench_overlap(cfg):
    """Issue #33: the data-parallel all-reduce overlapped with the backward.
    resnet18 (11.7M parameters, 72% of them in layer4), `ppc train
    --data-parallel 2`, batch 32 (16 rows a replica) in 4 microbatches, 1f1b,
    traced, in two layouts: 4 stages (cuts at layer2, layer3, layer4) on one
    rank a replica (2 ranks), and 2 stages (cut at layer3) on two ranks a
    replica (4 ranks); the default (each bucket starts when the backward has
    finished its gradients) against PPC_OVERLAP_ALLREDUCE=0 (all of it after
    the schedule), in interleaved rounds. Steps after the first count. From
    the trace, per run: total = the ALLREDUCE events' time (the buckets,
    overlapped or not), exposed = the time the steps waited for them after the
    schedule (ALLREDUCE_WAIT, and ALLREDUCE events of category wait); the
    figure counts, per step and replica group, the member that ends its
    schedule last (the others also wait for it to arrive: the replicas' skew,
    which no overlap hides); the notes count every rank too."""
    model = os.path.join(MODELS, "resnet18.pt")
    data = os.path.join(MODELS, "resnet18.train.pt")
    M, steps = 4, max(4, cfg["train_steps"])
    layouts = [("4 stages a rank, 2 ranks", 2,
                split(model, os.path.join(WORK, "resnet18.4dp"), "--split-at",
                      "layer2,layer3,layer4")),
               ("2 stages on 2 ranks a replica, 4 ranks", 4,
                split(model, os.path.join(WORK, "resnet18.2dp"), "--split-at", "layer3"))]

    def one(manifest, nproc, overlap):
        trace = os.path.join(WORK, "overlap.%d.%d.trace.json" % (nproc, overlap))
        s = sh(["env", "PPC_OVERLAP_ALLREDUCE=%d" % overlap,
                *launch(nproc, "train", manifest, "--data", data, "--loss", "cross_entropy",
                        "--data-parallel", 2, "--microbatches", M, "--steps", steps,
                        "--threads", 1, "--schedule", "1f1b", "--stats", "--trace", trace)])
        st = parse_stats(s.out)
        step_ms = [max(r["step_ms"] for r in st if r["step"] == k) for k in range(2, steps + 1)]
        with open(trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        # Each rank's events after the end of its first step.
        first_end = {}
        for e in events:
            if is_mark(e):
                first_end[e["pid"]] = min(first_end.get(e["pid"], float("inf")),
                                          e["ts"] + e["dur"])
        later = [e for e in events if not is_mark(e) and e["ts"] >= first_end[e["pid"]]]

        def is_exposed(e):
            return e["name"] == "ALLREDUCE_WAIT" or (e["name"] == "ALLREDUCE"
                                                     and e["cat"] == "wait")

        total = sum(e["dur"] for e in later if e["name"] == "ALLREDUCE") / 1000.0
        exposed = sum(e["dur"] for e in later if is_exposed(e)) / 1000.0
        # On the critical path: per step and replica group, the member that
        # ends its schedule (its flush) last. The others' waits include
        # waiting for it to arrive, which no overlap can hide (the replicas'
        # skew, large when 4 ranks share 2 cores).
        marks = {p: sorted((e for e in events if is_mark(e) and e["pid"] == p),
                           key=lambda e: e["ts"]) for p in range(nproc)}
        crit_total = crit_exposed = 0.0
        for k in range(1, steps):
            for r in range(nproc // 2):
                ends = {}
                for p in (r, nproc // 2 + r):
                    m = marks[p][k]
                    mine = [e for e in later if e["pid"] == p
                            and m["ts"] <= e["ts"] <= m["ts"] + m["dur"]]
                    flush = max(e["ts"] + e["dur"] for e in mine if e["name"] == "flush")
                    ends[p] = (flush, mine)
                last = max(ends, key=lambda p: ends[p][0])
                mine = ends[last][1]
                crit_total += sum(e["dur"] for e in mine if e["name"] == "ALLREDUCE") / 1000.0
                crit_exposed += sum(e["dur"] for e in mine if is_exposed(e)) / 1000.0
        return {"step_ms": step_ms, "total_ms": total, "exposed_ms": exposed,
                "crit_total_ms": crit_total, "crit_exposed_ms": crit_exposed,
                "per_rank_step": 1.0 / (nproc * (steps - 1))}

    configs = {}
    for name, nproc, manifest in layouts:
        for overlap in (1, 0):
            configs[(name, overlap)] = (lambda m=manifest, n=nproc, o=overlap: one(m, n, o))
    runs = rounds(configs, cfg["train_reps"], warmup=0)  # step 1 is the warm-up
    rows = []
    for name, nproc, _ in layouts:
        on, off = runs[(name, 1)], runs[(name, 0)]
        share = stats([r["crit_exposed_ms"] / r["crit_total_ms"] for r in on])
        off_share = stats([r["crit_exposed_ms"] / r["crit_total_ms"] for r in off])
        every = statistics.median(r["exposed_ms"] / r["total_ms"] for r in on)
        # The overlapped runs' exposed time against the whole all-reduce of
        # the runs after the schedule, which hides none of it.
        against_off = (statistics.median(r["exposed_ms"] for r in on)
                       / statistics.median(r["total_ms"] for r in off))
        step_on = stats([ms for r in on for ms in r["step_ms"]])
        step_off = stats([ms for r in off for ms in r["step_ms"]])

        def per_step(rs, key):
            return statistics.median(r[key] * r["per_rank_step"] for r in rs)

        title = "resnet18, %s, --data-parallel 2, batch 32, M=%d" % (name, M)
        rows.append(row(
            "33.dp overlap", title + ": exposed / total all-reduce time of the replica "
            "that ends its schedule last", share, "",
            "after the schedule (PPC_OVERLAP_ALLREDUCE=0)", off_share,
            share["median"] / off_share["median"], "<= 0.25", share["median"] <= 0.25,
            "every rank (waits for a later replica included): %.3f exposed; per rank and "
            "step: all-reduce %s ms overlapped (%s ms exposed), %s ms after the schedule (all "
            "exposed); overlapped exposed / the whole all-reduce after the schedule: %.3f"
            % (every, fmt(per_step(on, "total_ms")), fmt(per_step(on, "exposed_ms")),
               fmt(per_step(off, "total_ms")), against_off),
            exposed_every_rank=every, exposed_over_off_total=against_off,
            runs={"on": on, "off": off}))
        rows.append(row(
            "33.dp overlap", title + ": step time", step_on, "ms",
            "after the schedule (PPC_OVERLAP_ALLREDUCE=0)", step_off,
            step_on["median"] / step_off["median"], None, None,
            "steps 2-%d, the slowest rank's" % steps))
    return rows


def tcp_loopback_us(nbytes, iterations):
    """Median half round trip (µs) of a plain TCP ping-pong over 127.0.0.1
    between this process and a forked child (Python sockets, TCP_NODELAY):
    a reference for what the kernel alone costs."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    payload = b"x" * nbytes
    total = iterations + 5

    def pump(sock):
        view, got = bytearray(nbytes), 0
        while got < nbytes:
            got += sock.recv_into(memoryview(view)[got:])

    pid = os.fork()
    if pid == 0:
        try:
            c = socket.create_connection(("127.0.0.1", port))
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(total):
                pump(c)
                c.sendall(payload)
        finally:
            os._exit(0)
    s, _ = srv.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for i in range(total):
        t = time.perf_counter()
        s.sendall(payload)
        pump(s)
        if i >= 5:
            times.append((time.perf_counter() - t) / 2 * 1e6)
    s.close()
    srv.close()
    os.waitpid(pid, 0)
    return statistics.median(times)


def bench_transport(cfg):
    sizes = cfg["transport_sizes"]
    s = sh([PPC, "launch", "--nproc-per-node", 2, "--master-port", 0, "--",
            os.path.join(BUILD, "bin", "transport_bench"),
            *["%d:%d" % (b, n) for b, n in sizes]])
    rows = []
    for line in s.out.splitlines():
        line = line.split("] ", 1)[-1]
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        b = r["bytes"]
        lat, mem = stats(r["half_rtt_us"]), stats(r["memcpy_us"])
        tcp = tcp_loopback_us(b, max(5, min(200, dict(sizes)[b] // 4)))
        label = ("%d B" % b if b < 1024 else "%d KB" % (b >> 10) if b < 1 << 20
                 else "%d MB" % (b >> 20))
        rows.append(row(
            "4 transport", "%s: half round trip (Gloo via connectTransport)" % label, lat, "µs",
            "memcpy of the same bytes", mem, lat["median"] / mem["median"], None, None,
            "%s GB/s (memcpy %s GB/s); %.0f%% of round trips over 1 ms; plain TCP "
            "loopback ping-pong (Python sockets, same size): %s µs"
            % (fmt(b / lat["median"] / 1e3), fmt(b / mem["median"] / 1e3),
               100.0 * sum(x > 1000 for x in r["half_rtt_us"]) / len(r["half_rtt_us"]),
               fmt(tcp)),
            bytes=b, bandwidth_gbps=b / lat["median"] / 1e3, tcp_loopback_us=tcp))
    return rows


def shm_tiny_rows(cfg):
    """Target 1 of issue #21: tiny stages (4 × Linear(16), M one-row
    microbatches), 2 stages on 2 ranks and 4 stages on 2 ranks, over
    --link shm and --link gloo in interleaved rounds: the trace span (first
    action to last, every rank) per microbatch, all-in."""
    M = cfg["tiny_mb"]
    model, inp = tiny_model_and_input(M)
    manifests = {s: split(model, os.path.join(WORK, "tiny.%d" % s), "--stages", s) for s in (2, 4)}

    def one(stages, link):
        trace = os.path.join(WORK, "tiny.%d.%s.trace.json" % (stages, link))
        s = sh(launch(2, "run", manifests[stages], "--input", inp, "--output",
                      os.path.join(WORK, "tiny.out.pt"), "--microbatches", M, "--threads", 1,
                      "--link", link, "--stats", "--trace", trace))
        used = sorted({r.get("link") for r in parse_stats(s.out)})
        ev = trace_events(trace)
        span = max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)
        return {"per_mb_us": span / M, "links": used}

    configs = {(st, link): (lambda st=st, link=link: one(st, link))
               for st in (2, 4) for link in ("shm", "gloo")}
    runs = rounds(configs, cfg["tiny_reps"])
    rows = []
    for st, target in ((2, 30), (4, 60)):
        shm = stats([r["per_mb_us"] for r in runs[(st, "shm")]])
        gloo = stats([r["per_mb_us"] for r in runs[(st, "gloo")]])
        rows.append(row(
            "21.1 shared-memory link", "tiny stages, %d stages / 2 ranks, %d × 1 row: µs per "
            "microbatch all-in (--link shm)" % (st, M), shm, "µs",
            "the same over --link gloo", gloo, shm["median"] / gloo["median"],
            "<= %d µs" % target, shm["median"] <= target,
            "trace span / M; links %s vs %s" % (runs[(st, "shm")][0]["links"],
                                                 runs[(st, "gloo")][0]["links"]),
            runs={"shm": runs[(st, "shm")], "gloo": runs[(st, "gloo")]}))
    return rows


def shm_ring_rows(cfg):
    """Target 2 of issue #21: a crossing over the shared-memory link
    (transport_bench --link shm: Transport, tags, the link's queue and
    thread) against a bare ping over the same rings (transport_bench
    --bare-ring: two processes, ShmRing alone), 64 B to 64 MB; and the 64 MB
    crossing's bandwidth against memcpy's."""
    sizes = cfg["shm_sizes"]
    bench = os.path.join(BUILD, "bin", "transport_bench")
    args = ["%d:%d" % (b, n) for b, n in sizes]

    def parse(text):
        out = {}
        for line in text.splitlines():
            line = line.split("] ", 1)[-1]
            if line.startswith("{"):
                r = json.loads(line)
                out[r["bytes"]] = r
        return out

    link = parse(sh([PPC, "launch", "--nproc-per-node", 2, "--master-port", 0, "--", bench,
                     "--link", "shm", *args]).out)
    bare = parse(sh([bench, "--bare-ring", *args]).out)
    rows = []
    for b, _ in sizes:
        lat, base = stats(link[b]["half_rtt_us"]), stats(bare[b]["half_rtt_us"])
        label = ("%d B" % b if b < 1024 else "%d KB" % (b >> 10) if b < 1 << 20
                 else "%d MB" % (b >> 20))
        rows.append(row(
            "21.1 shared-memory link", "%s: half round trip over --link shm" % label, lat, "µs",
            "bare ping over the same rings", base, lat["median"] / base["median"], "<= 1.3×",
            lat["median"] / base["median"] <= 1.3, "link %s" % link[b].get("link"), bytes=b))
    big = max(b for b, _ in sizes)
    lat, mem = stats(link[big]["half_rtt_us"]), stats(link[big]["memcpy_us"])
    ratio = mem["median"] / lat["median"]
    rows.append(row(
        "21.1 shared-memory link", "%d MB crossing: bandwidth against memcpy" % (big >> 20),
        stats([big / x / 1e3 for x in link[big]["half_rtt_us"]]), "GB/s",
        "memcpy of the same bytes", stats([big / x / 1e3 for x in link[big]["memcpy_us"]]), ratio,
        ">= 0.7× (issue 33)", ratio >= 0.7,
        "half round trip %s µs, memcpy %s µs" % (fmt(lat["median"]), fmt(mem["median"])),
        bytes=big))
    return rows


def bench_shm(cfg):
    return shm_tiny_rows(cfg) + shm_ring_rows(cfg)


def bench_split(cfg):
    """`ppc split --stages 4` on MLPs of n Linear layers. The split runs on
    one thread, so its CPU time (user + sys) is its work, and unlike wall
    time hardly grows when other processes take the cores; less the CPU time
    of the process start (`ppc split --help`, same rounds)."""
    sizes = cfg["split_sizes"]

    def cpu_ms(*args):
        s = sh([PPC, "split", *args])
        return {"cpu": s.cpu_s * 1000, "wall": s.wall_s * 1000}

    configs = {"start": lambda: cpu_ms("--help")}
    for n in sizes:
        configs[n] = (lambda n=n: cpu_ms(os.path.join(MODELS, "mlp_%d.pt" % n), "-o",
                                         os.path.join(WORK, "split.%d" % n), "--stages", 4))
    runs = rounds(configs, cfg["split_reps"])
    start = statistics.median(r["cpu"] for r in runs["start"])
    net = {n: stats([r["cpu"] - start for r in runs[n]]) for n in sizes}
    wall = {n: stats([r["wall"] for r in runs[n]]) for n in sizes}
    rows = []
    for a, b in zip(sizes, sizes[1:]):
        ratio = net[b]["median"] / net[a]["median"]
        rows.append(row("5 split time", "ppc split --stages 4, %d Linear layers: CPU time" % b,
                        net[b], "ms", "%d layers" % a, net[a], ratio, "<= 2.3x", ratio <= 2.3,
                        "net of the process start (%s ms CPU); ratio of the minimums %.2fx; "
                        "wall %s ms vs %s ms"
                        % (fmt(start), net[b]["min"] / net[a]["min"], fmt(wall[b]["median"]),
                           fmt(wall[a]["median"])),
                        wall_ms={a: wall[a], b: wall[b]}))
    return rows


def steady_trace(path, out_path, skip_steps=1):
    """Writes the events of PATH after each rank's first `skip_steps` steps
    (every executed step ends with one 'flush' event per rank), but the batch
    and step marks, to OUT_PATH."""
    with open(path) as f:
        doc = json.load(f)
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    kept = []
    for rank in sorted({e["pid"] for e in doc["traceEvents"] if e.get("ph") == "X"}):
        mine = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X" and e["pid"] == rank
                       and not is_mark(e)), key=lambda e: e["ts"])
        flushes = [i for i, e in enumerate(mine) if e["name"] == "flush"]
        kept += mine[flushes[skip_steps - 1] + 1:]
    doc["traceEvents"] = meta + kept
    with open(out_path, "w") as f:
        json.dump(doc, f)
    return out_path


def simulated_bubble(schedule, *how):
    """The bubble `ppc schedule` simulates for SCHEDULE (a fraction)."""
    out = sh([PPC, "schedule", "--schedule", schedule, *how]).out
    return float(re.search(r"^bubble: ([\d.]+)%", out, re.M).group(1)) / 100


def bench_training(cfg):
    """resnet18 (32×32, 10 classes), batch 32 in 8 microbatches, 6 steps:
    4 stages (cuts at layer2, layer3, layer4: unbalanced, the last stage holds
    half the time) on 2 ranks per schedule, vs the unsplit model (1 stage)
    trained on 1 rank. Steps after the first count. The split is profiled
    (--cost profile on one microbatch), so each stage's predicted cost is its
    measured forward time; --schedule auto picks from those, and its pick's
    measured step is compared with the best measured schedule's."""
    model = os.path.join(MODELS, "resnet18.pt")
    data = os.path.join(MODELS, "resnet18.train.pt")
    M, P, steps, batch = 8, 2, cfg["train_steps"], 32
    example = os.path.join(WORK, "resnet18.microbatch.pt")
    if not os.path.exists(example):
        sh([PYTHON, "-c", "import torch, sys; torch.manual_seed(0); "
            "torch.save(torch.randn(%d, 3, 32, 32), sys.argv[1])" % (batch // M), example])
    four = split(model, os.path.join(WORK, "resnet18.4"), "--split-at", "layer2,layer3,layer4",
                 "--cost", "profile", "--example-input", example)
    one = split(model, os.path.join(WORK, "resnet18.1"), "--stages", "1")

    def train(manifest, nproc, schedule, tag):
        trace = os.path.join(WORK, "train.%s.trace.json" % tag)
        s = sh(launch(nproc, "train", manifest, "--data", data, "--loss", "cross_entropy",
                      "--microbatches", M, "--steps", steps, "--threads", 1,
                      "--schedule", schedule, "--stats", "--trace", trace))
        st = parse_stats(s.out)
        step_ms = [max(r["step_ms"] for r in st if r["step"] == k) for k in range(2, steps + 1)]
        peaks = {}
        for r in st:
            if r["step"] == steps and r["peak_activations"] != "none":
                for pair in r["peak_activations"].split(","):
                    stage, count = pair.split(":")
                    peaks[int(stage)] = int(count)
        steady = steady_trace(trace, trace + ".steady.json")
        summary = trace_summary(steady)
        picked = re.search(r"--schedule auto picked ([\w-]+):", s.out)
        return {"step_ms": step_ms, "peaks": dict(sorted(peaks.items())),
                "bubble": summary["all"]["bubble"], "picked": picked and picked.group(1),
                "forward_ms": sum(durations_ms(trace_events(steady), "F")) / (steps - 1),
                "busy_ms": {k: v["busy_ms"] for k, v in summary["ranks"].items()}}

    configs = {"unsplit": lambda: train(one, 1, "1f1b", "unsplit")}
    for sched in cfg["schedules"] + ["auto"]:
        configs[sched] = (lambda sched=sched: train(four, P, sched, sched))
    runs = rounds(configs, cfg["train_reps"], warmup=0)  # step 1 is the warm-up

    def throughput(rs):
        return stats([batch / (ms / 1000.0) for r in rs for ms in r["step_ms"]])

    base = throughput(runs["unsplit"])
    rows = []
    for sched in cfg["schedules"]:
        rs = runs[sched]
        thr = throughput(rs)
        bub = statistics.median(r["bubble"] for r in rs)
        unit = simulated_bubble(sched, "--stages", 4, "--ranks", P, "--microbatches", M)
        costed = simulated_bubble(sched, "--manifest", four, "--ranks", P, "--microbatches", M)
        peaks = " ".join("s%d:%d" % kv for kv in rs[-1]["peaks"].items())
        busy = " / ".join(fmt(statistics.median(r["busy_ms"][k] for r in rs))
                          for k in sorted(rs[0]["busy_ms"]))
        rows.append(row(
            "6 training", "resnet18 %s, 4 stages / 2 ranks, batch %d, M=%d: samples/s"
            % (sched, batch, M), thr, "samples/s", "unsplit, 1 rank", base,
            thr["median"] / base["median"], None, None,
            "bubble %.3f measured (trace summary of steps 2–%d) vs %.3f simulated at unit "
            "costs, %.3f with the split's profiled stage costs; compute (busy) ms of rank 0 / "
            "rank 1 in those steps: %s; peak activations %s"
            % (bub, steps, unit, costed, busy, peaks),
            bubble_measured=[r["bubble"] for r in rs], bubble_simulated_unit=unit,
            bubble_simulated_profile=costed, peak_activations=rs[-1]["peaks"]))
    # --schedule auto: its pick's measured step against the best one's. This
    # machine's speed swings by up to 2x between runs minutes apart, which raw
    # step times would compare; each run's step is therefore taken relative
    # to the run's own forward compute (all F actions' ms per step: the same
    # work under every schedule, unlike B, which zero-bubble schedules split
    # into I and W), so the ratio is the schedule's, not the machine's.
    def relative(rs):
        return stats([ms / r["forward_ms"] for r in rs for ms in r["step_ms"]])

    # auto runs exactly its pick (the training tests check the losses bit for
    # bit), so the pick's runs under its own name count for it too.
    picked = runs["auto"][0]["picked"]
    rel = {s: relative(runs[s]) for s in cfg["schedules"] + ["auto"]}
    raw = {s: statistics.median(ms for r in runs[s] for ms in r["step_ms"])
           for s in cfg["schedules"] + ["auto"]}
    best = min(cfg["schedules"], key=lambda s: rel[s]["median"])
    mine = relative(runs["auto"] + runs.get(picked, []))
    ratio = rel[best]["median"] / mine["median"]
    rows.append(row(
        "6 training", "resnet18 --schedule auto (picked %s), 4 stages / 2 ranks, M=%d: step / "
        "forward compute per step" % (picked, M), mine, "", "best measured schedule (%s)" % best,
        rel[best], ratio, ">= 0.95", ratio >= 0.95,
        "ratio = best's / the pick's step relative to the run's own forward compute (all F "
        "ms per step; the pick's runs under auto and under its name: %.3f and %.3f); auto "
        "simulates every schedule with the split's profiled costs; relative steps: "
        % (rel["auto"]["median"], rel.get(picked, rel["auto"])["median"]) +
        ", ".join("%s %.3f" % (s, rel[s]["median"]) for s in cfg["schedules"]) +
        "; raw step medians: " + ", ".join("%s %s" % (s, fmt(raw[s], "ms"))
                                           for s in cfg["schedules"] + ["auto"])))
    return rows


def bench_evaluation(cfg):
    """Issue 33: forward-only evaluation. The 16 x Linear(1024) MLP in 2
    stages on 2 ranks (1f1b), batches of 256 rows in M=8: `ppc train` with
    the training batch as --eval-data and --eval-every 1 (a cycle: a step and
    an evaluation) against the same training without evaluation (a cycle: a
    step), in interleaved rounds. A cycle is read on the loss rank from the
    --log-file's seconds (step, plus evaluation), so that the ranks' offsets
    cancel: one rank's evaluation alone would include the wait for the
    other to finish its step. Step 1 is left out (warm-up). An evaluated
    batch costs (cycle with - cycle without) / cycle without; target: at
    most 0.4x a training step."""
    M, rows, steps = 8, 256, cfg.get("eval_steps", 8)
    model = os.path.join(MODELS, "wide.pt")
    manifest = split(model, os.path.join(WORK, "wide.2"), "--split-at", "layers.8")
    data = os.path.join(WORK, "eval.data.pt")
    if not os.path.exists(data):
        sh([PYTHON, "-c", "import torch,sys; torch.manual_seed(0); x=torch.load(sys.argv[1]); "
            "torch.save((x[:%d], torch.randn(%d, 1024)), sys.argv[2])" % (rows, rows),
            os.path.join(MODELS, "wide.input.pt"), data])

    def one(evaluate):
        log = os.path.join(WORK, "eval.log.jsonl")
        if os.path.exists(log):
            os.remove(log)
        extra = ["--eval-data", data, "--eval-every", 1] if evaluate else []
        sh(launch(2, "train", manifest, "--data", data, *extra, "--loss", "mse", "--lr", "0.001",
                  "--microbatches", M, "--steps", steps, "--threads", 1, "--schedule", "1f1b",
                  "--log-file", log))
        with open(log) as f:
            records = [json.loads(line) for line in f]
        step = {r["step"]: r["seconds"] for r in records if "loss" in r}
        ev = {r["step"]: r["seconds"] for r in records if "eval_loss" in r}
        return {"cycle_ms": statistics.median(
                    (step[k] + ev.get(k, 0)) * 1e3 for k in range(2, steps + 1)),
                "eval_ms": statistics.median(ev[k] * 1e3 for k in range(2, steps + 1))
                if evaluate else None}

    runs = rounds({"with": lambda: one(True), "without": lambda: one(False)},
                  cfg.get("eval_reps", 3))
    ratios = [w["cycle_ms"] / wo["cycle_ms"] - 1 for w, wo in zip(runs["with"], runs["without"])]
    ratio = statistics.median(ratios)
    return [row(
        "33 evaluation", "16×Linear(1024), 256 rows, M=8, 2 stages / 2 ranks, 1f1b: an "
        "evaluated batch (forward-only), cycle with − cycle without",
        stats([w["cycle_ms"] - wo["cycle_ms"] for w, wo in zip(runs["with"], runs["without"])]),
        "ms", "a training step of the same batch (cycle without)",
        stats([r["cycle_ms"] for r in runs["without"]]), ratio, "<= 0.4x", ratio <= 0.4,
        "cycle = a step (+ its evaluation) on the loss rank, median of steps 2-%d; ratio = "
        "median over interleaved rounds (%s); the loss rank's own evaluation time %s ms "
        "(includes waiting for the other rank's step); load average %.2f"
        % (steps, ", ".join("%.3f" % r for r in ratios),
           fmt(statistics.median(r["eval_ms"] for r in runs["with"])), os.getloadavg()[0]),
        runs=runs)]


def bench_startup(cfg):
    """A 2-rank `ppc run` of resnet18 (2 stages, batch 5, 5 microbatches)
    inferring its boundary metadata (--no-meta-cache) vs reading the meta
    cache that the warm-up round wrote. first_output_ms is the output rank's
    (rank 1): when the first microbatch's output exists. Rank 0's also holds
    its wait in the start-up agreement for rank 1, which loads the larger
    stage (both are in the JSON)."""
    model = os.path.join(MODELS, "resnet18.pt")
    manifest = split(model, os.path.join(WORK, "resnet18.2"), "--split-at", "layer3")
    inp = os.path.join(MODELS, "resnet18.input.pt")

    def run(*extra):
        s = sh(launch(2, "run", manifest, "--input", inp, "--output",
                      os.path.join(WORK, "startup.out.pt"), "--microbatches", 5,
                      "--threads", 1, "--stats", *extra))
        st = parse_stats(s.out)
        out_rank = [r for r in st if r["rank"] == 1][0]  # stage 1's: the output rank
        return {"first_output_ms": out_rank["first_output_ms"], "wall_s": s.wall_s,
                "first_output_ms_by_rank": {int(r["rank"]): r["first_output_ms"] for r in st},
                "meta": sorted({r["meta"] for r in st}),
                "meta_messages_sent": sum(r["meta_messages_sent"] for r in st)}

    runs = rounds({"infer": lambda: run("--no-meta-cache"), "cache": lambda: run()},
                  cfg["startup_reps"])
    ok = all(r["meta"] == ["cache"] and r["meta_messages_sent"] == 0 for r in runs["cache"])
    check = ("cached runs: meta=cache, meta_messages_sent=0 on every rank" if ok else
             "WARNING: a cached run did not use the cache: %s" % runs["cache"])
    rows = []
    for key, label, unit, scale in (("first_output_ms", "first_output_ms (output rank)", "ms", 1),
                                    ("wall_s", "process wall time", "s", 1)):
        a = stats([r[key] * scale for r in runs["infer"]])
        b = stats([r[key] * scale for r in runs["cache"]])
        rows.append(row("7 start-up", "resnet18, 2 ranks: %s with the meta cache" % label, b,
                        unit, "without (inferring)", a, b["median"] / a["median"], None, None,
                        check))
    return rows


def bench_streaming(cfg):
    """Issue 21, target 4, and issue 33's "streaming with no drain": the
    batches of one launch as one stream. 50 batches of 256 rows of the
    16 x Linear(1024) MLP, M=8, 2 stages on 2 ranks (1f1b), in one `ppc run`
    launch, run in the background in windows of 8 batches (--stream-window
    64: 7 windows, the last partial), of 32 (--stream-window 256, the
    default) and of one batch each (--stream-window 0). A batch's time is
    (end of batch 50 - end of batch 1) / 49, a batch ending when its last
    rank's batch mark ends, so the first batch's cold calls are left out;
    t_i is the median F of stage i in the same run's trace (each stage's
    first M F events left out). The bound without a bubble between batches
    is M * max t_i. No drain between windows: at each window boundary the
    trace shows whether stage 0's first F of the next window started before
    the last stage's last F of the window ended."""
    M, B, rows = 8, 50, 256
    model = os.path.join(MODELS, "wide.pt")
    manifest = split(model, os.path.join(WORK, "wide.2"), "--split-at", "layers.8")
    inp = os.path.join(WORK, "stream%d.input.pt" % B)
    if not os.path.exists(inp):
        sh([PYTHON, "-c", "import torch,sys; x=torch.load(sys.argv[1]); "
            "torch.save([(x[k %% 2 * %d:(k %% 2 + 1) * %d] * (1 + k / 64))"
            " for k in range(%d)], sys.argv[2])"
            % (rows, rows, B), os.path.join(MODELS, "wide.input.pt"), inp])

    def one(window):
        trace = os.path.join(WORK, "stream.%d.trace.json" % window)
        s = sh(launch(2, "run", manifest, "--input", inp, "--output",
                      os.path.join(WORK, "stream.out.pt"), "--microbatches", M,
                      "--threads", 1, "--stats", "--stream-window", window, "--trace", trace))
        st = parse_stats(s.out)
        assert len(st) == 2 and all(r["batches"] == B for r in st), s.out
        with open(trace) as f:
            everything = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        marks = {}
        for e in sorted((e for e in everything if is_mark(e)), key=lambda e: e["ts"]):
            marks.setdefault(e["pid"], []).append(e["ts"] + e["dur"])
        ends = [max(per) for per in zip(*marks.values())]
        assert len(ends) == B, (len(ends), B)
        t, mean_t, fs = {}, {}, {}
        for stage in sorted({e["args"]["stage"] for e in everything if e["name"] == "F"}):
            fs[stage] = sorted((e for e in everything if e["name"] == "F"
                                and e["args"]["stage"] == stage), key=lambda e: e["ts"])
            t[stage] = statistics.median(e["dur"] / 1000.0 for e in fs[stage][M:])
            mean_t[stage] = statistics.mean(e["dur"] / 1000.0 for e in fs[stage][M:])
        # Window boundaries: the windows hold W batches, the last the rest.
        W = max(1, window // M)
        sizes = [W] * (B // W) + ([B % W] if B % W else [])
        first, last, overlapped = min(fs), max(fs), 0
        k = 0
        for size in sizes[:-1]:
            k += size * M
            leave = fs[last][k - 1]
            overlapped += fs[first][k]["ts"] < leave["ts"] + leave["dur"]
        batch_ms = (ends[-1] - ends[0]) / 1000.0 / (B - 1)
        return {"batch_ms": batch_ms, "t_ms": t, "bound_ms": M * max(t.values()),
                "ratio": batch_ms / (M * max(t.values())), "wall_s": s.wall_s,
                "mean_ratio": batch_ms / (M * max(mean_t.values())),
                "boundaries": len(sizes) - 1, "overlapped": overlapped,
                "meta": sorted({r["meta"] for r in st})}

    configs = (("stream", 64, "windows of 8 batches (--stream-window 64)"),
               ("default", 256, "windows of 32 batches (--stream-window 256)"),
               ("single", 0, "a window per batch (--stream-window 0)"))
    runs = rounds({name: (lambda w=w: one(w)) for name, w, _ in configs},
                  cfg.get("stream_reps", 3))
    per_batch = statistics.median(r["batch_ms"] for r in runs["single"])
    rows_out = []
    for name, _, label in configs:
        rs = runs[name]
        ratio = statistics.median(r["ratio"] for r in rs)
        target = name != "single"
        rows_out.append(row(
            "21.4 streaming", "16×Linear(1024), %d batches × 256 rows, M=%d, 2 stages / 2 "
            "ranks, 1f1b, in the background: a batch, %s" % (B, M, label),
            stats([r["batch_ms"] for r in rs]), "ms",
            "M · max t_i", stats([r["bound_ms"] for r in rs]), ratio,
            "<= 1.03x" if target else None, ratio <= 1.03 if target else None,
            "batch = (end of batch %d − end of batch 1) / %d; t_i = median F of stage i in the "
            "same run's trace (first M per stage left out); ratio = median of per-run ratios "
            "(%s); with t_i = mean F instead (a loaded machine stretches some F far past the "
            "median): %s; vs a window per batch: %.3fx; window boundaries where stage 0's next "
            "F started before the last stage's last F ended: %s"
            % (B, B - 1, ", ".join("%.3f" % r["ratio"] for r in rs),
               ", ".join("%.3f" % r["mean_ratio"] for r in rs),
               statistics.median(r["batch_ms"] for r in rs) / per_batch,
               ", ".join("%d/%d" % (r["overlapped"], r["boundaries"]) for r in rs)),
            runs=rs))
    return rows_out


def bench_partition(cfg):
    """Benchmark 10, in bench/partition.py: per model and stage count, the
    max/mean of the stage times (each stage alone on its real inputs, one
    thread) of the --cost profile split against the params and flops ones."""
    import partition
    rows = partition.partition_rows(PPC, MODELS, WORK, reps=cfg["partition_reps"])
    out = []
    for model, stages in sorted({(r["model"], r["stages"]) for r in rows}):
        by = {r["cost"]: r for r in rows if r["model"] == model and r["stages"] == stages}
        prof, params = by["profile"]["max_over_mean"], by["params"]["max_over_mean"]
        out.append(row(
            "10 partition", "%s, %d stages, --cost profile: max/mean stage time" % (model, stages),
            stats([prof]), "x", "--cost params", stats([params]), prof / params, "<= 1.10",
            prof <= 1.10, "flops: %.3f; profile stage ms: %s; split took %.1f s (params %.1f s)"
            % (by["flops"]["max_over_mean"], " / ".join("%.2f" % t for t in by["profile"]["stage_ms"]),
               by["profile"]["split_s"], by["params"]["split_s"]),
            max_over_mean={c: r["max_over_mean"] for c, r in by.items()}))
    return out


# Benchmark 30's Python side (PyTorch 2.x's): greedy decoding of PROMPT's
# rows by the unsplit program, as ppc generate feeds it, REPEAT times from the
# program's initial buffers; prints each decode's seconds, saves the tokens.
DECODE_SCRIPT = r"""
import json, sys, time, torch
torch.set_num_threads(1)
path, prompt_path, new_tokens, repeat, out = sys.argv[1:6]
new_tokens, repeat = int(new_tokens), int(repeat)
prompt = torch.load(prompt_path)
module = torch.export.load(path).module()
initial = {k: v.clone() for k, v in module.named_buffers()}
seconds = []
with torch.no_grad():
    for _ in range(repeat):
        start = time.perf_counter()
        for k, v in module.named_buffers():
            v.copy_(initial[k])
        tokens = []
        for t in range(prompt.size(1) + new_tokens - 1):
            ids = prompt[:, t:t + 1] if t < prompt.size(1) else tokens[-1]
            logits = module(input_ids=ids, cache_position=torch.tensor([t]))
            if t >= prompt.size(1) - 1:
                tokens.append(logits[:, -1, :].argmax(-1, keepdim=True))
        seconds.append(time.perf_counter() - start)
torch.save(torch.cat(tokens, 1), out)
print("decode: " + json.dumps({"seconds": seconds}))
"""

SAME_SCRIPT = r"""
import json, sys, torch
files = sys.argv[1:]
print("same: " + json.dumps([torch.equal(torch.load(a), torch.load(b))
                             for a, b in zip(files[::2], files[1::2])]))
"""


def busy_cpu_s():
    """Seconds all CPUs of the machine have been busy (user, nice, system,
    interrupts, and time the hypervisor stole), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def sh_others(cmd):
    """sh(cmd), and the CPUs that other processes kept busy meanwhile (the
    machine's busy time less the command's own CPU time, over its wall)."""
    before = busy_cpu_s()
    s = sh(cmd)
    return s, max(0.0, busy_cpu_s() - before - s.cpu_s) / s.wall_s


def pt2_ppc():
    """A ppc built against PyTorch 2.x (it reads .pt2 programs, and its
    LibTorch is the torch wheel's, MKL included): the build directory's when
    its LibTorch is 2.x, else the PyTorch 2.x build's (build/,
    scripts/build.sh)."""
    for exe in (PPC, os.path.join(ROOT, "build", "bin", "ppc")):
        if os.path.exists(exe):
            text = subprocess.run([exe, "--version"], stdout=subprocess.PIPE, text=True).stdout
            if re.search(r"^LibTorch [2-9]", text, re.M):
                return exe
    raise RuntimeError("no ppc built against PyTorch 2.x: build that configuration "
                       "(scripts/build.sh ppc) into build/")


def bench_generate(cfg):
    """Issue #30: `ppc generate` of a LLaMA decoder (bench/make_decoder.py:
    8 layers, hidden 512, 26.7M parameters, static batch b = 4, randomly
    initialised), tokens/s from the collecting rank's --stats-json (B * N new
    tokens over the call's time, prompt included). 2 stages on 2 ranks
    against the 1-stage program on 1 rank, with M = 2, 4, 8 groups (B = M *
    b rows, P = 8, N new tokens); and the 1-stage program on 1 rank at M = 1
    against the unsplit program's greedy decode loop in Python (PyTorch 2.x's
    torch, torch.export.load(...).module() fed token by token, one thread;
    its first decode in a fresh process, as ppc's one call per launch).
    Interleaved rounds; then one traced run of each side at M = 4 for the
    notes (where the time goes). Runs the build directory's ppc if it reads
    .pt2, else build/'s (the PyTorch 2.x build)."""
    global PPC
    own = PPC
    PPC = pt2_ppc()
    try:
        return generate_rows(cfg)
    finally:
        PPC = own


def generate_rows(cfg):
    python = os.path.join(pytorch2_venv(cfg), "bin", "python")
    sh([python, os.path.join(ROOT, "bench", "make_decoder.py"), MODELS])
    model = os.path.join(MODELS, "decoder.pt2")
    with open(os.path.join(MODELS, "decoder.json")) as f:
        meta = json.load(f)
    b, P, N, groups = meta["batch"], meta["prompt_length"], cfg["gen_tokens"], (2, 4, 8)
    manifests = {s: split(model, os.path.join(WORK, "decoder.%d" % s), "--stages", s)
                 for s in (1, 2)}

    def prompt(M):
        return os.path.join(MODELS, "decoder.prompt.%d.pt" % M)

    def ppc(stages, M, trace=None):
        tag = "%d.%d" % (stages, M)
        out, js = (os.path.join(WORK, "decoder.%s.%s" % (tag, x)) for x in ("out.pt", "json"))
        if os.path.exists(js):
            os.remove(js)
        extra = ["--trace", trace] if trace else []
        s, others = sh_others(launch(
            stages, "generate", manifests[stages], "--prompt", prompt(M), "--max-new-tokens", N,
            "--output", out, "--microbatches", M, "--threads", 1, "--stats-json", js, *extra))
        with open(js) as f:
            st = json.load(f)
        return {"tps": st["tokens_per_second"], "total_ms": st["total_ms"],
                "first_token_ms": st["first_token_ms"], "step_ms": st["step_ms"],
                "meta": st["meta"], "out": out, "cpus": s.cpu_s / s.wall_s, "others": others}

    def loop():
        out = os.path.join(WORK, "decoder.python.out.pt")
        s, others = sh_others([python, "-c", DECODE_SCRIPT, model, prompt(1), N, 2, out])
        r = json.loads(s.out.split("decode: ", 1)[1].splitlines()[0])
        return {"tps": b * N / r["seconds"][0], "warm_tps": b * N / r["seconds"][-1],
                "out": out, "others": others}

    configs = {"python": loop, (1, 1): lambda: ppc(1, 1)}
    for M in groups:
        configs[(2, M)] = lambda M=M: ppc(2, M)
        configs[(1, M)] = lambda M=M: ppc(1, M)
    runs = rounds(configs, cfg["gen_reps"])
    traces = {s: os.path.join(WORK, "decoder.%d.trace.json" % s) for s in (1, 2)}
    for s in traces:
        ppc(s, 4, traces[s])
    pairs = [x for M in groups for x in (runs[(2, M)][-1]["out"], runs[(1, M)][-1]["out"])]
    pairs += [runs[(1, 1)][-1]["out"], runs["python"][-1]["out"]]
    same = json.loads(sh([python, "-c", SAME_SCRIPT, *pairs]).out.split("same: ", 1)[1]
                      .splitlines()[0])
    return generate_table(runs, traces, same, b, P, N, groups)


def generate_trace_note(traces):
    """Where a traced M = 4 run's time goes: F per stage and step, bubble."""
    f = {}
    for s, path in traces.items():
        ev = trace_events(path)
        for k in sorted({e["args"]["stage"] for e in ev if e["name"] == "F"}):
            f[(s, k)] = statistics.median(durations_ms(ev, "F", stage=k))
    two = trace_summary(traces[2])
    busy = " / ".join("%s" % fmt(v["busy_ms"]) for _, v in sorted(two["ranks"].items()))
    return ("traced M=4: F per group and step %s ms (stage 0) + %s ms (stage 1) on 2 ranks vs "
            "%s ms unsplit (sum/unsplit %.2fx); 2-rank bubble %.3f, busy ms %s of span %s"
            % (fmt(f[(2, 0)]), fmt(f[(2, 1)]), fmt(f[(1, 0)]),
               (f[(2, 0)] + f[(2, 1)]) / f[(1, 0)], two["all"]["bubble"], busy,
               fmt(two["all"]["span_ms"])))


def generate_rounds_note(two, one, same):
    """The per-round ratios of 2-rank runs TWO to 1-rank runs ONE, with the
    CPUs that other processes kept busy meanwhile: this machine is shared."""
    paired = [x["tps"] / y["tps"] for x, y in zip(two, one)]
    quiet = [p for p, x, y in zip(paired, two, one) if max(x["others"], y["others"]) < 0.25]
    return paired, (
        "per round, the ratio / the CPUs other processes kept busy during the 2-rank run: %s "
        "(the rounds where other processes kept under 0.25 CPUs busy during both runs: "
        "median %s of %d); tokens %s; the 2-rank launch used %.2f CPUs"
        % (", ".join("%.2f/%.2f" % (p, x["others"]) for p, x in zip(paired, two)),
           "%.2fx" % statistics.median(quiet) if quiet else "none", len(quiet),
           "identical" if same else "DIFFER", statistics.median(x["cpus"] for x in two)))


def generate_table(runs, traces, same, b, P, N, groups):
    def tps(key):
        return stats([r["tps"] for r in runs[key]])

    note = generate_trace_note(traces)
    rows = []
    for i, M in enumerate(groups):
        two, one = tps((2, M)), tps((1, M))
        ratio = two["median"] / one["median"]
        paired, notes = generate_rounds_note(runs[(2, M)], runs[(1, M)], same[i])
        rows.append(row(
            "30 generate", "LLaMA 8×512 (26.7M), b=%d, M=%d (B=%d), P=%d, N=%d: 2 stages / 2 "
            "ranks" % (b, M, M * b, P, N), two, "tokens/s", "1 stage / 1 rank", one, ratio,
            ">= 1.7x" if M >= 4 else None, ratio >= 1.7 if M >= 4 else None,
            notes + ("; " + note if M == 4 else ""), paired_ratios=paired,
            runs={"2": runs[(2, M)], "1": runs[(1, M)]}))
    mine, theirs = tps((1, 1)), stats([r["tps"] for r in runs["python"]])
    ratio = mine["median"] / theirs["median"]
    rows.append(row(
        "30 generate", "same decoder, M=1 (B=%d), 1 stage / 1 rank" % b, mine, "tokens/s",
        "Python decode loop (ExportedProgram.module(), 1 thread)", theirs, ratio, ">= 1.0x",
        ratio >= 1.0, "both cold (first decode of a process); Python's second decode in the "
        "same process %s tokens/s; ppc first token %s ms, then %s ms a step; tokens %s; "
        "other processes kept %.2f CPUs busy (median over these runs)"
        % (fmt(statistics.median(r["warm_tps"] for r in runs["python"])),
           fmt(statistics.median(r["first_token_ms"] for r in runs[(1, 1)])),
           fmt(statistics.median(r["step_ms"] for r in runs[(1, 1)])),
           "identical" if same[-1] else "DIFFER",
           statistics.median(r["others"] for r in runs[(1, 1)] + runs["python"])),
        runs={"ppc": runs[(1, 1)], "python": runs["python"]}))
    return rows


def with_pt2_ppc(module_name, function, cfg):
    """bench/MODULE_NAME.py's FUNCTION(cfg), with ppc's pt2 build as PPC
    (pt2_ppc(): it reads .pt2 programs); the module gets this one as R."""
    import importlib
    module = importlib.import_module(module_name)
    module.R = sys.modules[__name__]
    global PPC
    own = PPC
    PPC = pt2_ppc()
    try:
        return getattr(module, function)(cfg)
    finally:
        PPC = own


def bench_decode_race(cfg):
    """Benchmark 42, in bench/decode_race.py."""
    return with_pt2_ppc("decode_race", "bench_decode_race", cfg)


def bench_serve(cfg):
    """Benchmark 43, in bench/serve_race.py."""
    return with_pt2_ppc("serve_race", "bench_serve", cfg)


def bench_threads(cfg):
    """Benchmark 44.t, in bench/threads_load.py."""
    return with_pt2_ppc("threads_load", "bench_threads", cfg)


def bench_race(cfg, issue21=False, pytorch2=False):
    """Benchmarks 9, 21.5 and 33, in bench/race.py."""
    import race
    race.R = sys.modules[__name__]
    return race.bench_race(cfg, issue21, pytorch2)


# How main() pinned the BLAS kernel, for the notes.
BLAS_PIN = ""


def pin_blas_kernel():
    """Every benchmark runs the best OpenBLAS kernel for this CPU (`ppc
    --version` names it): OPENBLAS_CORETYPE in ENV unless the environment
    sets it. Returns what was done, for the notes."""
    global BLAS_PIN
    text = subprocess.run([PPC, "--version"], stdout=subprocess.PIPE, text=True).stdout
    m = re.search(r"best OpenBLAS core type: (\w+)", text)
    blas = re.search(r"^blas: (.*)$", text, re.M)
    if "OPENBLAS_CORETYPE" in os.environ:
        BLAS_PIN = "OPENBLAS_CORETYPE=%s from the environment" % os.environ["OPENBLAS_CORETYPE"]
    elif m and blas and blas.group(1).startswith("openblas"):
        ENV["OPENBLAS_CORETYPE"] = m.group(1)
        BLAS_PIN = "pinned OPENBLAS_CORETYPE=%s, the best for this CPU" % m.group(1)
    else:
        BLAS_PIN = blas.group(1) if blas else "BLAS unknown"
    return BLAS_PIN


# ------------------------------------------------------------------ main

FULL = {"wide_reps": 5, "wide_repeat": 4, "plain_cold": 1, "plain_reps": 2, "tiny_mb": 2048, "tiny_reps": 3,
        "transport_sizes": [(8, 2000), (64 << 10, 300), (1 << 20, 100), (16 << 20, 20),
                            (64 << 20, 8)],
        "split_sizes": [256, 512, 1024, 2048], "split_reps": 7,
        "train_steps": 6, "train_reps": 3,
        "schedules": ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "looped-bfs",
                      "interleaved-zb", "zbv", "dualpipev"], "startup_reps": 4,
        "race_reps": 3, "race_repeat": 4, "partition_reps": 15, "blas_reps": 3,
        "blas_repeat": 20,
        "gen_reps": 5, "gen_tokens": 32, "decode_race_reps": 3,
        "shm_sizes": [(64, 2000), (4 << 10, 1000), (64 << 10, 300), (1 << 20, 100),
                      (16 << 20, 20), (64 << 20, 8)]}
QUICK = dict(FULL, wide_reps=2, wide_repeat=3, plain_reps=1, tiny_mb=256, tiny_reps=2,
             transport_sizes=[(8, 500), (64 << 10, 100), (1 << 20, 30), (16 << 20, 8),
                              (64 << 20, 4)],
             split_sizes=[256, 512, 1024], split_reps=2, train_steps=3, train_reps=1,
             startup_reps=2, race_reps=1, gen_reps=2, gen_tokens=16, race_repeat=3, partition_reps=7, blas_reps=2,
             decode_race_reps=1,
             shm_sizes=[(64, 500), (4 << 10, 300), (64 << 10, 100), (1 << 20, 30),
                        (16 << 20, 8), (64 << 20, 4)])


def build(build_dir, jobs):
    """Configures (as `scripts/build.sh system` does: Debian's LibTorch)
    when needed, then builds only the targets the benchmarks run."""
    if not os.path.exists(os.path.join(build_dir, "build.ninja")):
        launcher = []
        if shutil.which("ccache"):
            launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                        "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=Release", *launcher], check=True)
    subprocess.run(["cmake", "--build", build_dir, "-j", str(jobs), "--target", "ppc",
                    "plain_forward", "transport_bench"], check=True,
                   env=dict(os.environ, CCACHE_BASEDIR=ROOT))


def make_models(cfg):
    sh([PYTHON, os.path.join(ROOT, "bench", "make_models.py"), MODELS])
    sh([PYTHON, os.path.join(ROOT, "tests", "models", "make_models.py"), MODELS,
        "--only", "resnet18", "--mlp-layers", ",".join(map(str, cfg["split_sizes"]))])


def machine():
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    nproc = subprocess.run(["nproc"], stdout=subprocess.PIPE, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True).stdout.strip()
    return {"nproc": int(nproc), "cpu": model, "kernel": platform.release(),
            "commit": commit, "threads_env": THREAD_ENV}


def markdown(results):
    m = results["machine"]
    lines = ["Run %s on %s CPUs (%s), commit %s, %s; load average %s at start, %s at end. "
             "Figures are medians (min–max) of interleaved repetitions after a warm-up."
             % (results["date"], m["nproc"], m["cpu"], m["commit"],
                "quick" if results["quick"] else "full suite",
                "/".join("%.1f" % x for x in results["load_start"]),
                "/".join("%.1f" % x for x in results["load_end"])),
             "",
             "| benchmark | figure | baseline | ratio | target | met? | notes |",
             "|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        if "error" in r:
            lines.append("| %s | failed: %s | | | | | |" % (r["benchmark"], r["error"]))
            continue
        met = "—" if r["met"] is None else ("met" if r["met"] else "missed")
        lines.append("| %s | %s: %s | %s: %s | %.3gx | %s | %s | %s |" % (
            r["benchmark"], r["name"], fmt_stats(r["figure"], r["unit"]),
            r["baseline"]["name"], fmt_stats(r["baseline"], r["unit"]), r["ratio"],
            r["target"] or "—", met, r["notes"]))
    return "\n".join(lines) + "\n"


def main():
    global BUILD, MODELS, WORK, PPC
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, smaller sizes")
    ap.add_argument("--only", help="comma-separated benchmark keys (1-10; issue #21: "
                    "21.1, 21.3, 21.4, 21.5, 21.6, 21.c; issue #30: 30; issue #33: 33, 33.e, 33.dp; "
                    "issue #42: 42; issue #43: 43; issue #44: 44.t); "
                    "default: all")
    ap.add_argument("--venv", help="the prefix of a Python with torch 2.x for benchmarks 9, "
                    "21.6 and 30 (PPC_RACE_VENV overrides it; default build/venv)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-system"),
                    help="the system LibTorch build the benchmarks build and run "
                    "(default build-system)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("PPC_JOBS", "2")))
    ap.add_argument("--no-build", action="store_true", help="use the binaries as they are")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"),
                    help="where latest.json and latest.md go")
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    if args.venv:
        cfg["race_venv"] = os.path.abspath(args.venv)
    only = set(args.only.split(",")) if args.only else None
    BUILD = os.path.abspath(args.build_dir)
    MODELS, WORK = os.path.join(BUILD, "bench-models"), os.path.join(BUILD, "bench-work")
    PPC = os.path.join(BUILD, "bin", "ppc")
    os.makedirs(WORK, exist_ok=True)

    t0 = time.monotonic()
    if not args.no_build:
        build(BUILD, args.jobs)
    make_models(cfg)
    print("bench: built and generated in %.0f s" % (time.monotonic() - t0), flush=True)
    print("bench: BLAS: %s" % pin_blas_kernel(), flush=True)

    results = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "quick": args.quick, "machine": dict(machine(), blas=BLAS_PIN), "config": cfg,
               "load_start": list(os.getloadavg()), "rows": [], "seconds": {}}
    wide = None

    def need_wide():
        nonlocal wide
        if wide is None:
            wide = wide_runs(cfg)
        return wide

    plan = [("1", "speed-up", lambda: bench_speedup(cfg, need_wide())),
            ("2", "per-microbatch overhead", lambda: bench_overhead(cfg)),
            ("3", "1-stage vs plain forward", lambda: bench_plain(cfg, need_wide())),
            ("4", "transport", lambda: bench_transport(cfg)),
            ("5", "split time", lambda: bench_split(cfg)),
            ("6", "training", lambda: bench_training(cfg)),
            ("7", "start-up", lambda: bench_startup(cfg)),
            ("8", "pipeline efficiency", lambda: bench_efficiency(cfg, need_wide())),
            ("33", "race on equal footing: PyTorch 2.x against torch.distributed.pipelining",
             lambda: bench_race(cfg, pytorch2=True)),
            ("33.e", "forward-only evaluation against a training step",
             lambda: bench_evaluation(cfg)),
            ("9", "race against torch.distributed.pipelining (system LibTorch)",
             lambda: bench_race(cfg)),
            ("10", "partition balance", lambda: bench_partition(cfg)),
            ("21.1", "shared-memory link (targets 1, 2)", lambda: bench_shm(cfg)),
            ("21.3", "speed-up, same best kernel", lambda: bench_speedup_kernel(cfg, need_wide())),
            ("21.5", "race, same kernel class", lambda: bench_race(cfg, issue21=True)),
            ("21.6", "matmul throughput per kernel", lambda: bench_blas(cfg)),
            ("21.4", "streaming across batches", lambda: bench_streaming(cfg)),
            ("21.c", "an edge's values as one message", lambda: bench_coalesce(cfg)),
            ("33.dp", "data-parallel all-reduce overlapped with the backward",
             lambda: bench_overlap(cfg)),
            ("30", "generate: pipelined decoding", lambda: bench_generate(cfg)),
            ("42", "generate against transformers' generate()",
             lambda: bench_decode_race(cfg)),
            ("43", "serve under concurrent clients against generate",
             lambda: bench_serve(cfg)),
            ("44.t", "default threads against one thread, quiet and beside a busy core",
             lambda: bench_threads(cfg))]
    for key, name, fn in plan:
        if only is not None and key not in only:
            continue
        start = time.monotonic()
        print("bench %s: %s ..." % (key, name), flush=True)
        try:
            results["rows"] += fn()
        except Exception as e:  # one failed benchmark must not lose the others
            msg = str(e).strip().splitlines()
            results["rows"].append({"benchmark": "%s %s" % (key, name),
                                    "error": " ".join(msg[:1] + msg[-2:])[:300]})
        results["seconds"][key] = round(time.monotonic() - start, 1)
        print("bench %s: %.0f s" % (key, results["seconds"][key]), flush=True)
    results["load_end"] = list(os.getloadavg())
    results["seconds"]["total"] = round(time.monotonic() - t0, 1)

    os.makedirs(args.results, exist_ok=True)
    text = markdown(results)
    for name, content in (("latest.json", json.dumps(results, indent=1) + "\n"),
                          ("latest.md", text)):
        path = os.path.join(args.results, name)
        with open(path + ".tmp", "w") as f:
            f.write(content)
        os.replace(path + ".tmp", path)
    print()
    print(text)
    print("bench: %.0f s; wrote %s/latest.{json,md}" % (results["seconds"]["total"], args.results))
    return 1 if any("error" in r for r in results["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
