"""Benchmark 44.t of bench/run.py: the default threads against one thread, quiet and beside a busy core.

Issue #44's row: one rank decoding the decode benchmark's LLaMA (bench/
decode_race.py's program for b = 8, one stage, P = 64, N = 32) with the
default threads (every core: 2 here) and with `--threads 1`, each on a quiet
machine and with a busy loop (one Python process spinning) on another core,
in interleaved rounds, timed by generate's own total_ms. The targets: the
default at most 1.1x one thread's time beside the busy core, and faster than
one thread when quiet.
"""
import json
import os
import subprocess
import sys

import decode_race

# bench/run.py's module; run.py assigns it before calling bench_threads().
R = None

B, P, N = 8, 64, 32


def bench_threads(cfg):
    decode_race.R = R
    decode_race.make_programs(cfg, [B], [[P, N]])
    manifest = R.split(os.path.join(R.MODELS, "prefill.b%d.pt2" % B),
                       os.path.join(R.WORK, "threads.b%d.1" % B), "--stages", 1)

    def run(threads, busy):
        js = os.path.join(R.WORK, "threads.json")
        if os.path.exists(js):
            os.remove(js)
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            args = ["generate", manifest, "--prompt", os.path.join(R.MODELS, "prefill.P%d.pt" % P),
                    "--max-new-tokens", N, "--output", os.path.join(R.WORK, "threads.out.pt"),
                    "--stats-json", js]
            if threads:
                args += ["--threads", threads]
            # The user's environment as it is (no OMP_NUM_THREADS): what a
            # person who types the command gets.
            env = {k: v for k, v in R.ENV.items() if k not in R.THREAD_ENV}
            R.sh(R.launch(1, *args), timeout=1200, env=env)
        finally:
            if spinner:
                spinner.kill()
                spinner.wait()
        with open(js) as f:
            return json.load(f)["total_ms"] / 1000

    configs = {(t, busy): (lambda t=t, busy=busy: run(t, busy))
               for t in (None, 1) for busy in (False, True)}
    runs = R.rounds(configs, cfg.get("decode_race_reps", 3))
    rows = []
    for busy in (False, True):
        mine, one = R.stats(runs[(None, busy)]), R.stats(runs[(1, busy)])
        ratio = mine["median"] / one["median"]
        target = "<= 1.1x" if busy else "< 1.0x"
        rows.append(R.row(
            "44.t threads", "1 rank decoding (LLaMA 8×512, b=%d, P=%d, N=%d), default threads, %s" % (
                B, P, N, "a busy loop on another core" if busy else "quiet"),
            mine, "s", "--threads 1, same conditions", one, ratio, target,
            ratio <= 1.1 if busy else ratio < 1.0,
            "time of the default over one thread's (lower is better)", runs={
                "default": runs[(None, busy)], "one": runs[(1, busy)]}))
    return rows
