#!/usr/bin/python3
"""Tests that `--threads N` bounds every pool that computes, BLAS included,
and that `ppc launch` sizes the pools of the workers it starts.

Debian's LibTorch multiplies matrices with OpenBLAS's pthread build, which
starts its own pool when it is loaded (sized from OPENBLAS_NUM_THREADS or
OMP_NUM_THREADS, else the cores) and ignores at::set_num_threads; a rank
asked for one thread would still compute on several. boundThreads
(runtime/platform/Threads.h) bounds it; these tests run a matmul-heavy model (16
Linear(1024, 1024) layers, split into 2 stages) under `ppc launch` with
`--threads 1` and watch each rank's threads in /proc/PID/task:

  - a thread computes when it used at least 5% of its rank's CPU time
    (and 5 ticks): the main thread, and BLAS helpers that are given work;
    Gloo's and the store's threads stay far below;
  - the baseline is the same run with OPENBLAS_NUM_THREADS=1, which keeps
    OpenBLAS from starting any helper.

Run: PPC=build-system/bin/ppc /usr/bin/python3 tests/cli/test_threads.py -v
(PPC=build/bin/ppc with the PyTorch 2.x build's Python: scripts/python.sh build)
Env: PPC (the ppc binary). Needs torch to write the model.
"""
import collections
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PPC, child_pids, class_tmpdir, main  # noqa: E402

CORES = len(os.sched_getaffinity(0))
# What ppc launch gives each of 2 workers as OMP_NUM_THREADS (runtime/platform/Threads.h
# defaultThreads; the launcher uses the same share).
SHARE = max(1, CORES // 2)
POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS")


def thread_ticks(pid):
    """{tid: user + system CPU ticks} of the threads of PID now."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


class Rank:
    def __init__(self):
        self.samples = 0
        self.seen = collections.Counter()  # tid -> samples it was in
        self.ticks = {}                    # tid -> the latest CPU ticks seen

    def add(self, ticks):
        self.samples += 1
        self.seen.update(ticks.keys())
        self.ticks.update(ticks)

    def computing(self):
        """Threads that used at least 5% of the rank's CPU time (and 5 ticks)."""
        total = sum(self.ticks.values())
        return sum(1 for t in self.ticks.values() if t >= max(5, 0.05 * total))

    def steady_threads(self):
        """Threads present in at least a quarter of the samples: those that
        live through the run (pools), not one that lives for a moment (a
        connection's). A median of the counts would not do: while a loaded
        machine links LibTorch, the process has one thread for a while."""
        return sum(1 for n in self.seen.values() if 4 * n >= self.samples)


class ThreadsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        d = cls.tmp = class_tmpdir(cls)
        torch.manual_seed(0)
        layers = [torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU())
                  for _ in range(16)]
        torch.jit.script(torch.nn.Sequential(*layers).eval()).save(os.path.join(d, "big.pt"))
        cls.input = os.path.join(d, "x.pt")
        torch.save(torch.randn(2048, 1024), cls.input)
        cls.split = os.path.join(d, "split")
        r = subprocess.run([PPC, "split", os.path.join(d, "big.pt"), "-o", cls.split,
                            "--stages", "2"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr

    def launch_samples(self, **env):
        """Runs the model on 2 ranks with --threads 1 under ppc launch, with
        the pool variables removed from the environment but for `env`;
        returns the 2 ranks' Rank samples."""
        environ = {k: v for k, v in os.environ.items() if k not in POOL_VARIABLES}
        environ.update(env)
        out = os.path.join(self.tmp, "y.pt")
        proc = subprocess.Popen(
            [PPC, "launch", "--nproc-per-node", "2", "--master-port", "0", "--timeout",
             "300", "--", PPC, "run", os.path.join(self.split, "manifest.json"), "--input",
             self.input, "--output", out, "--microbatches", "4", "--threads", "1"],
            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ranks = {}
        while proc.poll() is None:
            for pid in child_pids(proc.pid):
                rank = ranks.setdefault(pid, Rank())
                try:
                    ticks = thread_ticks(pid)
                except FileNotFoundError:
                    continue
                if ticks:
                    rank.add(ticks)
            time.sleep(0.02)
        _, err = proc.communicate()
        self.assertEqual(proc.returncode, 0, err)
        sampled = [r for r in ranks.values() if r.samples]
        self.assertEqual(len(sampled), 2, err)
        return sampled

    def report(self, name, ranks):
        print("\n  %s: computing threads %s, steady threads %s, thread ticks %s"
              % (name, [r.computing() for r in ranks], [r.steady_threads() for r in ranks],
                 [sorted(r.ticks.values(), reverse=True)[:4] for r in ranks]),
              file=sys.stderr)

    def test_launch_sets_omp_num_threads(self):
        script = ["sh", "-c", "echo ${OMP_NUM_THREADS-unset}"]
        environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}

        def values(nproc, env):
            r = subprocess.run([PPC, "launch", "--nproc-per-node", str(nproc), "--", *script],
                               env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return sorted(line.split("] ", 1)[1] for line in r.stdout.splitlines())

        self.assertEqual(values(2, environ), [str(SHARE)] * 2)
        self.assertEqual(values(3, environ), [str(max(1, CORES // 3))] * 3)
        # A value the user set is never overridden; a single worker keeps
        # the environment as it is (as under torchrun).
        self.assertEqual(values(2, dict(environ, OMP_NUM_THREADS="3")), ["3", "3"])
        self.assertEqual(values(1, environ), ["unset"])

    def test_threads_1_computes_on_one_thread(self):
        if CORES < 2:
            self.skipTest("one core: OpenBLAS starts no helper threads to bound")
        # The pool as large as the machine, as a user's OMP_NUM_THREADS (or a
        # start without ppc launch) makes it: OpenBLAS starts CORES - 1
        # helpers, and boundThreads must keep them idle.
        full = str(CORES)
        bounded = self.launch_samples(OMP_NUM_THREADS=full)
        baseline = self.launch_samples(OMP_NUM_THREADS=full, OPENBLAS_NUM_THREADS="1")
        self.report("OMP_NUM_THREADS=%s" % full, bounded)
        self.report("OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=1" % full, baseline)
        self.assertLessEqual(max(r.computing() for r in bounded),
                             max(r.computing() for r in baseline))
        # The helpers exist (a pool cannot shrink) but that is all.
        self.assertLessEqual(max(r.steady_threads() for r in bounded),
                             max(r.steady_threads() for r in baseline) + CORES - 1)

    def test_launch_default_starts_only_the_share(self):
        if CORES < 2:
            self.skipTest("one core: OpenBLAS starts no helper threads to bound")
        # Nothing set: ppc launch gives each worker OMP_NUM_THREADS=SHARE, so
        # OpenBLAS starts SHARE - 1 helpers (none on 2 or 3 cores), all idle
        # under --threads 1.
        default = self.launch_samples()
        baseline = self.launch_samples(OPENBLAS_NUM_THREADS="1")
        self.report("nothing set", default)
        self.report("OPENBLAS_NUM_THREADS=1", baseline)
        self.assertLessEqual(max(r.computing() for r in default),
                             max(r.computing() for r in baseline))
        self.assertLessEqual(max(r.steady_threads() for r in default),
                             max(r.steady_threads() for r in baseline) + SHARE - 1)


if __name__ == "__main__":
    main()
