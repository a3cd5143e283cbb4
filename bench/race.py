"""Benchmarks 9 and 21.5 of bench/run.py: ppc against torch.distributed.pipelining.

Same machine, same run, same model (weights read from the file ppc splits),
batch, microbatches, cut and schedule; 2 ranks over Gloo on CPU, one
compute thread per rank; configurations in interleaved rounds. The peer is
PyTorch 2.x's pipelining (PipelineStage per rank, ScheduleGPipe /
Schedule1F1B, with static example shapes and with inferred ones), run by the
PyTorch 2.x configuration's Python (run.pytorch2_venv(): build/venv, which
scripts/python.sh makes; --venv or PPC_RACE_VENV elsewhere) under its
torchrun; see bench/race_peer.py.

Two models: "small" (8 x Linear(32), 512 rows in 32 microbatches of 16:
framework overhead shows) and "heavy" (16 x Linear(1024), 1024 rows in 8
microbatches of 128). Figures, as ratios ppc / peer or peer / ppc so that
> 1 means ppc is better:
  - steady-state throughput (a batch's time after a warm-up batch), per
    schedule, against each peer shape mode; each side's efficiency against
    its own unsplit single-thread forward (the two LibTorch builds differ
    in BLAS);
  - time to the first batch's output: ppc's total_ms of a one-batch run
    inferring shapes (--no-meta-cache) and reading its meta cache, against
    the peer's first step (which infers shapes, or validates static ones);
  - peak resident memory per rank (ppc via /usr/bin/time; the peer's own
    getrusage);
  - training: a step's time (steps after the first), MSE loss and SGD.

Which BLAS each side runs is stated in every row: ppc's from its --stats
(blas=openblas:CORE; bench/run.py pins OPENBLAS_CORETYPE to the best core
type for the CPU), the peer's from its own torch ("mkl 2024.2 (cpu
capability AVX512)"). Debian's LibTorch has no MKL and the torch wheel no
OpenBLAS, so the two sides cannot run the same library; they run the same
kernel class (AVX-512 on an AVX-512 CPU) once ppc's OpenBLAS runs its best
kernel, where Debian's default could be its generic Prescott one (issue
#21: 0.16-0.24x on heavy stages from that alone).

Benchmark 21.5 (issue #21, target 5) races "tiny" (4 x Linear(16), one-row
microbatches: 64 rows in 64) and "heavy" stages, with the issue's targets.

Benchmark 33 (issue #33) is the race on equal footing: ppc built against
PyTorch 2.x (build/, run.pt2_ppc()), whose LibTorch is the same torch wheel's
as the peer's, MKL and all, against the peer, on "tiny" stages of 1,024
one-row microbatches, "small" and "heavy" stages; inference and training,
GPipe and 1F1B. Its heavy rows also give each side's batch time against its
compute bound, sum(t_i) + (M-1) max(t_i) with t_i a stage's time per
microbatch taken from that side's own unsplit forward (two equal halves:
(M+1)/(2M) of an unsplit batch). Each model also gets ppc's 1F1B training step
against its own GPipe step at equal microbatches (target <= 1.05x). Benchmark 9 stays the race of the system
LibTorch configuration (OpenBLAS against the wheel's MKL).
"""
import hashlib
import json
import os
import re
import socket
import statistics

# bench/run.py's module (its helpers and the globals its main() set); run.py
# assigns it before calling bench_race().
R = None

SMALL = dict(name="small", width=32, depth=8, rows=512, M=32)
TINY = dict(name="tiny", width=16, depth=4, rows=64, M=64)
HEAVY = dict(name="heavy", width=1024, depth=16, rows=1024, M=8)
TINY1K = dict(name="tiny1k", width=16, depth=4, rows=1024, M=1024)
RACE_RE = re.compile(r"race: (\{[^{}]*\})")
RSS_RE = re.compile(r"\[rank (\d+)\] race_rss_kb=(\d+)")


def venv_dir(cfg):
    return R.pytorch2_venv(cfg)


def make_inputs(outdir):
    """Scripts the race models and writes inputs and training targets with
    Debian's python (the files ppc splits); cached by a stamp of this file."""
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.abspath(__file__), "rb") as f:
        stamp = hashlib.sha256(f.read()).hexdigest()[:16]
    stamp_path = os.path.join(outdir, "stamp")
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        return
    script = """
import sys, torch
sys.path.insert(0, %r)
from make_models import MLP
torch.set_num_threads(1)
out = %r
for name, width, depth, rows in %r:
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(MLP(width, depth).eval()), f"{out}/{name}.pt")
    torch.manual_seed(1)
    torch.save(torch.randn(rows, width), f"{out}/{name}.input.pt")
    x, y = torch.randn(rows, width), torch.randn(rows, width)
    torch.save((x, y), f"{out}/{name}.train.pt")
    torch.save(x, f"{out}/{name}.train_x.pt")
    torch.save(y, f"{out}/{name}.train_y.pt")
""" % (os.path.join(R.ROOT, "tests", "models"), outdir,
       [(m["name"], m["width"], m["depth"], m["rows"]) for m in (SMALL, TINY, HEAVY, TINY1K)])
    R.sh([R.PYTHON, "-c", script])
    with open(stamp_path, "w") as f:
        f.write(stamp)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peer_cmd(venv, nproc, *args):
    port = free_port()
    return [os.path.join(venv, "bin", "torchrun"), "--nproc-per-node", nproc,
            "--master-port", port, os.path.join(R.ROOT, "bench", "race_peer.py"), *args]


def peer_lines(text):
    return sorted((json.loads(m.group(1)) for m in RACE_RE.finditer(text)),
                  key=lambda r: r["rank"])


def bench_race(cfg, issue21=False, pytorch2=False):
    venv = venv_dir(cfg)
    if not os.path.exists(os.path.join(venv, "bin", "torchrun")):
        raise RuntimeError("no PyTorch 2.x torchrun in %s/bin (scripts/python.sh build "
                           "makes build/venv; or give --venv or PPC_RACE_VENV)" % venv)
    d = os.path.join(R.WORK, "race")
    make_inputs(d)
    reps, repeat = cfg["race_reps"], cfg["race_repeat"]
    if pytorch2:
        exe, bench, models = R.pt2_ppc(), "33 race (PyTorch 2.x)", (TINY1K, SMALL, HEAVY)
    elif issue21:
        exe, bench, models = R.PPC, "21.5 race", (TINY, HEAVY)
    else:
        exe, bench, models = R.PPC, "9 race (system LibTorch)", (SMALL, HEAVY)
    rows = []
    for m in models:
        rows += race_model(cfg, venv, d, m, reps, repeat, exe, bench)
    return rows


def race_model(cfg, venv, d, m, reps, repeat, exe, bench):
    name, M, K = m["name"], m["M"], m["depth"] // 2
    model, inp = os.path.join(d, name + ".pt"), os.path.join(d, name + ".input.pt")
    # Each configuration's own splits (its ppc writes the stage files).
    tag = "" if exe == R.PPC else ".pt2ppc"
    two = R.split(model, os.path.join(d, name + tag + ".2"), "--split-at", "layers.%d" % K,
                  exe=exe)
    one = R.split(model, os.path.join(d, name + tag + ".1"), "--stages", "1", exe=exe)
    out = os.path.join(d, name + ".out.pt")

    def ppc_steady(manifest, nproc, schedule):
        trace = os.path.join(d, "%s.%s.%d.trace.json" % (name, schedule, nproc))
        cmd = R.launch(nproc, "run", manifest, "--input", inp, "--output", out,
                       "--microbatches", M, "--threads", 1, "--schedule", schedule,
                       "--repeat", repeat + 1, "--stream-window", 0, "--trace", trace,
                       "--stats", exe=exe)
        # /usr/bin/time around each rank: its peak resident memory.
        cmd = cmd[:cmd.index("--") + 1] + ["/usr/bin/time", "-f", "race_rss_kb=%M"] + \
            cmd[cmd.index("--") + 1:]
        s = R.sh(cmd)
        ends = R.batch_ends_us(R.trace_events(trace))
        rss = {int(r): int(kb) for r, kb in RSS_RE.findall(s.out)}
        blas = sorted({r["blas"] for r in R.parse_stats(s.out)})
        return {"batch_ms": (ends[-1] - ends[0]) / 1000.0 / (len(ends) - 1), "rss_kb": rss,
                "blas": blas}

    def ppc_first(*extra):
        s = R.sh(R.launch(2, "run", two, "--input", inp, "--output", out, "--microbatches", M,
                          "--threads", 1, "--stats", *extra, exe=exe))
        st = R.parse_stats(s.out)
        return {"first_ms": max(r["total_ms"] for r in st), "wall_s": s.wall_s,
                "meta": sorted({r["meta"] for r in st})}

    def peer(schedule, shapes, train=False):
        args = ["--model", model, "--input", inp, "--split-at", K, "--microbatches", M,
                "--schedule", schedule, "--shapes", shapes, "--repeat", repeat]
        if train:
            args = ["--model", model, "--input", os.path.join(d, name + ".train_x.pt"),
                    "--train", os.path.join(d, name + ".train_y.pt"), "--split-at", K,
                    "--microbatches", M, "--schedule", schedule, "--shapes", shapes,
                    "--repeat", repeat]
        s = R.sh(peer_cmd(venv, 2, *args))
        lines = peer_lines(s.out)
        assert len(lines) == 2, s.out[-2000:]
        return {"batch_ms": max(r["batch_ms"] for r in lines),
                "first_ms": max(r["first_step_ms"] for r in lines),
                "first_wall_ms": max(r["first_wall_ms"] for r in lines),
                "rss_kb": {r["rank"]: r["rss_kb"] for r in lines}, "wall_s": s.wall_s,
                "blas": sorted({r["blas"] for r in lines})}

    def peer_unsplit():
        s = R.sh([os.path.join(venv, "bin", "python"), os.path.join(R.ROOT, "bench",
                  "race_peer.py"), "--unsplit", "--model", model, "--input", inp,
                  "--microbatches", M, "--repeat", repeat])
        return peer_lines(s.out)[0]

    def ppc_train(schedule):
        s = R.sh(R.launch(2, "train", two, "--data", os.path.join(d, name + ".train.pt"),
                          "--loss", "mse", "--optimizer", "sgd", "--lr", "0.01",
                          "--microbatches", M, "--steps", repeat + 1, "--threads", 1,
                          "--schedule", schedule, "--stats", "--no-meta-cache", exe=exe))
        st = R.parse_stats(s.out)
        steps = [max(r["step_ms"] for r in st if r["step"] == k)
                 for k in range(2, repeat + 2)]
        return {"batch_ms": statistics.mean(steps)}

    configs = {"ppc unsplit": lambda: ppc_steady(one, 1, "gpipe"),
               "peer unsplit": peer_unsplit,
               "ppc first infer": lambda: ppc_first("--no-meta-cache"),
               "ppc first cache": lambda: ppc_first()}
    for sched in ("gpipe", "1f1b"):
        configs["ppc " + sched] = (lambda s=sched: ppc_steady(two, 2, s))
        for shapes in ("static", "inferred"):
            configs["peer %s %s" % (sched, shapes)] = (
                lambda s=sched, sh=shapes: peer(s, sh))
        configs["ppc train " + sched] = (lambda s=sched: ppc_train(s))
        configs["peer train " + sched] = (lambda s=sched: peer(s, "inferred", train=True))
    runs = R.rounds(configs, reps, warmup=0)

    def med(key, field="batch_ms"):
        return R.stats([r[field] for r in runs[key]])

    rows = []
    label = "%s (%d x Linear(%d), %d rows, M=%d)" % (name, m["depth"], m["width"], m["rows"], M)
    kernels = "BLAS: ppc %s, peer %s" % (
        " / ".join(sorted({b for r in runs["ppc gpipe"] for b in r["blas"]})),
        " / ".join(sorted({b for r in runs["peer gpipe inferred"] for b in r["blas"]})))
    ppc_eff = med("ppc unsplit")["median"]
    peer_eff = med("peer unsplit")["median"]
    # The compute bound of two equal halves: (M+1)/(2M) of an unsplit batch.
    bound = (M + 1) / (2.0 * M)
    for sched in ("gpipe", "1f1b"):
        mine = med("ppc " + sched)
        for shapes in ("static", "inferred"):
            theirs = med("peer %s %s" % (sched, shapes))
            ratio = theirs["median"] / mine["median"]
            goal = {"small": 1.3, "tiny": 20.0, "tiny1k": 20.0}.get(name, 1.0)
            rows.append(R.row(
                bench, "%s, %s inference: ppc batch" % (label, sched), mine, "ms",
                "pipelining (%s shapes)" % shapes, theirs, ratio, ">= %gx" % goal,
                ratio >= goal,
                "ratio = peer / ppc (> 1: ppc faster); efficiency vs own unsplit 1-thread "
                "forward: ppc %.2f, peer %.2f; batch / compute bound: ppc %.3f, peer %.3f; %s"
                % (ppc_eff / mine["median"], peer_eff / theirs["median"],
                   mine["median"] / (bound * ppc_eff), theirs["median"] / (bound * peer_eff),
                   kernels)))
        mine = med("ppc train " + sched)
        theirs = med("peer train " + sched)
        goal = {"small": 1.5, "heavy": 1.0}.get(name) if "33" in bench else None
        ratio = theirs["median"] / mine["median"]
        rows.append(R.row(
            bench, "%s, %s training step (MSE, SGD): ppc" % (label, sched), mine, "ms",
            "pipelining (inferred shapes)", theirs, ratio, goal and ">= %gx" % goal,
            goal and ratio >= goal, "ratio = peer / ppc (> 1: ppc faster)"))
    if "33" in bench:
        # What 1F1B training pays over GPipe training in ppc, at equal microbatches.
        gpipe, ofob = med("ppc train gpipe"), med("ppc train 1f1b")
        ratio = ofob["median"] / gpipe["median"]
        rows.append(R.row(
            bench, "%s: ppc 1F1B training step" % label, ofob, "ms",
            "ppc GPipe training step", gpipe, ratio, "<= 1.05x", ratio <= 1.05,
            "ratio = 1F1B / GPipe (< 1: 1F1B faster); the same rounds as the race rows"))
    infer, cache = med("ppc first infer", "first_ms"), med("ppc first cache", "first_ms")
    walls = {k: statistics.median(r["wall_s"] for r in runs["ppc first " + k]) * 1e3
             for k in ("infer", "cache")}
    for shapes in ("inferred", "static"):
        peer_runs = runs["peer gpipe %s" % shapes]
        theirs = R.stats([r["first_ms"] for r in peer_runs])
        peer_wall = statistics.median(r["first_wall_ms"] for r in peer_runs)
        for what, key, mine in (("inferring", "infer", infer), ("meta cache", "cache", cache)):
            rows.append(R.row(
                bench, "%s: first batch's output, ppc %s" % (label, what), mine, "ms",
                "pipelining first step (%s shapes)" % shapes, theirs,
                theirs["median"] / mine["median"], None, None,
                "ratio = peer / ppc (> 1: ppc faster); ppc: total_ms of a one-batch run "
                "(max over ranks); peer: its first schedule.step(), max over ranks. From "
                "process start: ppc's whole one-batch launch %s ms, the peer's script "
                "start (after torchrun) to its first output %s ms"
                % (R.fmt(walls[key]), R.fmt(peer_wall))))
    mine = [max(r["rss_kb"].values()) / 1024.0 for r in runs["ppc gpipe"]]
    theirs = [max(r["rss_kb"].values()) / 1024.0 for r in runs["peer gpipe inferred"]]
    rows.append(R.row(bench, "%s: peak resident memory per rank, ppc gpipe" % label,
                      R.stats(mine), "MB", "pipelining gpipe", R.stats(theirs),
                      statistics.median(theirs) / statistics.median(mine), None, None,
                      "ratio = peer / ppc (> 1: ppc smaller); the larger rank of each run"))
    return rows
