#!/usr/bin/python3
"""How balanced ppc split's partitions are in measured time (issue #7).

Usage: bench/partition.py [--build-dir build] [--reps 15] [--models resnet18,vit]
                          [--stages 2,4] [--json FILE]

For each model (the test models of tests/models/make_models.py: resnet18 and
the small ViT, example input batch 5, 3x32x32) and stage count, splits with
--cost params, flops and profile (flops and profile run the model's example
input), then times each stage alone: every stage module runs on its real
inputs (the outputs of the stages before it on the example input), one
thread (OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1 and torch.set_num_threads(1)),
inference (no_grad), after warm-up runs, in interleaved rounds (stage 0, 1,
..., then again) so drift hits every stage alike; a stage's time is the
median CPU time of the one compute thread (time.thread_time_ns: equal to
wall time on an idle machine, and not inflated by other processes holding
the cores on a shared one). The figure per cost model is max/mean of the stage times (1.0 is a
perfect balance; the target for profile is <= 1.10).

bench/run.py can import it: partition_rows(ppc, models_dir, work_dir, ...)
returns one row per (model, stages, cost) and markdown_table(rows) the table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"  # Debian's, which has torch and torchvision
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
COSTS = ["params", "flops", "profile"]
TARGET = 1.10


def run(cmd, timeout=900):
    """Runs cmd with the one-thread environment; returns stdout, raising with
    the output when it fails."""
    proc = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=dict(os.environ, **THREAD_ENV), cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(map(str, cmd)), proc.returncode,
                                                   proc.stdout[-3000:]))
    return proc.stdout


def ensure_models(models_dir, names):
    """Generates the test models that are missing (cached by the generator)."""
    run([PYTHON, os.path.join(ROOT, "tests", "models", "make_models.py"), models_dir,
         "--only", ",".join(names)])


def split(ppc, model, example, outdir, stages, cost):
    """`ppc split` with `cost`; returns the manifest and the seconds it took."""
    args = [ppc, "split", model, "-o", outdir, "--stages", stages, "--cost", cost]
    if cost in ("flops", "profile"):
        args += ["--example-input", example]
    start = time.monotonic()
    run(args)
    seconds = time.monotonic() - start
    with open(os.path.join(outdir, "manifest.json")) as f:
        return json.load(f), seconds


def stage_times(outdir, example, reps, warmup):
    """Median ms of each stage of the split in outdir run alone (in a child
    process, so that its thread pools start bounded to one thread)."""
    out = run([PYTHON, os.path.abspath(__file__), "--stage-times", outdir, example,
               "--reps", reps, "--warmup", warmup])
    return json.loads(out.strip().splitlines()[-1])


def measure_stages(outdir, example, reps, warmup):
    """The child of stage_times(): loads the stages, computes each stage's
    real inputs by running the ones before it, then times each alone."""
    import torch
    torch.set_num_threads(1)
    with open(os.path.join(outdir, "manifest.json")) as f:
        manifest = json.load(f)
    inputs = torch.load(example)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    modules, args, outputs = [], [], []
    with torch.no_grad():
        for stage in manifest["stages"]:
            module = torch.jit.load(os.path.join(outdir, stage["file"]))
            a = [inputs[src["model_input"]] if "model_input" in src
                 else outputs[src["stage"]][src["output"]]
                 for src in (i["source"] for i in stage["inputs"])]
            outputs.append(module(*a))
            modules.append(module)
            args.append(a)
        for _ in range(warmup):
            for module, a in zip(modules, args):
                module(*a)
        samples = [[] for _ in modules]
        for _ in range(reps):
            for k, (module, a) in enumerate(zip(modules, args)):
                start = time.thread_time_ns()
                module(*a)
                samples[k].append((time.thread_time_ns() - start) / 1e6)
    return [statistics.median(s) for s in samples]


def partition_rows(ppc, models_dir, work_dir, models=("resnet18", "vit"), stage_counts=(2, 4),
                   reps=15, warmup=3):
    """One row per (model, stages, cost): the stage times, their max/mean and
    each stage's share of the predicted cost."""
    ensure_models(models_dir, models)
    rows = []
    for name in models:
        model = os.path.join(models_dir, name + ".pt")
        example = os.path.join(models_dir, name + ".input.pt")
        for stages in stage_counts:
            for cost in COSTS:
                outdir = os.path.join(work_dir, "partition.%s.%d.%s" % (name, stages, cost))
                manifest, split_s = split(ppc, model, example, outdir, stages, cost)
                times = stage_times(outdir, example, reps, warmup)
                predicted = [s["predicted_cost"] for s in manifest["stages"]]
                rows.append({
                    "model": name, "stages": stages, "cost": cost,
                    "stage_ms": [round(t, 4) for t in times],
                    "max_over_mean": max(times) / statistics.mean(times),
                    "predicted_share": [round(p / sum(predicted), 4) if sum(predicted) else 0
                                        for p in predicted],
                    "split_s": round(split_s, 2)})
                print("partition: %s %d stages %-7s max/mean %.3f  stage ms %s"
                      % (name, stages, cost, rows[-1]["max_over_mean"],
                         " ".join("%.2f" % t for t in times)), flush=True)
    return rows


def markdown_table(rows):
    """Max/mean stage time per cost model side by side, one line per model
    and stage count."""
    lines = ["| model | stages | params | flops | profile | profile <= %.2f? | profile stage ms |"
             % TARGET, "|---|---|---|---|---|---|---|"]
    keys = []
    for r in rows:
        if (r["model"], r["stages"]) not in keys:
            keys.append((r["model"], r["stages"]))
    for model, stages in keys:
        by = {r["cost"]: r for r in rows if r["model"] == model and r["stages"] == stages}
        cell = lambda c: "%.3f" % by[c]["max_over_mean"] if c in by else "—"  # noqa: E731
        prof = by.get("profile")
        met = "—" if not prof else ("met" if prof["max_over_mean"] <= TARGET else "missed")
        lines.append("| %s | %d | %s | %s | %s | %s | %s |" % (
            model, stages, cell("params"), cell("flops"), cell("profile"), met,
            " / ".join("%.2f" % t for t in prof["stage_ms"]) if prof else "—"))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="resnet18,vit")
    ap.add_argument("--stages", default="2,4")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--stage-times", nargs=2, metavar=("OUTDIR", "INPUT"),
                    help=argparse.SUPPRESS)  # the child process of stage_times()
    args = ap.parse_args()
    if args.stage_times:
        print(json.dumps(measure_stages(*args.stage_times, args.reps, args.warmup)))
        return 0
    build = os.path.abspath(args.build_dir)
    work = os.path.join(build, "bench-work")
    os.makedirs(work, exist_ok=True)
    rows = partition_rows(os.path.join(build, "bin", "ppc"), os.path.join(build, "bench-models"),
                          work, args.models.split(","), [int(s) for s in args.stages.split(",")],
                          args.reps, args.warmup)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print()
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
