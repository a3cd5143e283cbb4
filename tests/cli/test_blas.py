#!/usr/bin/python3
"""Tests that ppc reports the BLAS kernel its ranks run, warns about a kernel
below the CPU, and that `ppc launch` gives its ranks the best one after a
numerical self-check (runtime/platform/Blas.h, docs/runtime.md "The BLAS kernel").

OpenBLAS picks its kernel (core type) when it is loaded, and
OPENBLAS_CORETYPE=NAME forces one. On a machine whose OpenBLAS already picks
the best kernel by itself, the slow case is reproduced by forcing the generic
Prescott kernel, and, for `ppc launch`, with its documented test hooks:
PPC_TEST_BLAS_CORETYPE_IS_DEFAULT=1 (OPENBLAS_CORETYPE in the launcher's
environment counts as OpenBLAS's own choice, not the user's) and
PPC_TEST_BLAS_CANDIDATE=NAME (the core type self-checked instead of the best).
What the CPU supports and its best core type come from `ppc --version`, so
the tests hold on any x86 CPU; they skip where ppc does not run OpenBLAS (a
torch wheel's MKL: then --version and --stats must say mkl).

Run (the system LibTorch build: OpenBLAS):
  PPC=build-system/bin/ppc PPC_MODELS_DIR=build-system/models /usr/bin/python3 tests/cli/test_blas.py -v
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, free_port, launch, main, model_path, ppc, rank_env,  # noqa: E402
                    split_at, tmpdir)

TIMEOUT = 120
BLAS_LINE = re.compile(r"^blas: (\S+)(?: (\S+))?(?: (\S+))?(?: \((DYNAMIC_ARCH)\))?$", re.M)
BEST = re.compile(r"^cpu: .* \(best OpenBLAS core type: (\w+)\)$", re.M)
STATS_BLAS = re.compile(r"^(?:\[rank \d+\] )?stats: rank=(\d+) .* blas=(\S+)", re.M)
GENERIC = "Prescott"
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT")
# The start-up warning of a rank, and ppc launch's note and warning.
RANK_WARNING = re.compile(r"warning: OpenBLAS runs its generic Prescott kernel on a CPU with "
                          r"[^;]+; set OPENBLAS_CORETYPE=(\w+) \(see docs/runtime.md\)")
LAUNCH_NOTE = re.compile(r"^note: OpenBLAS picked its generic Prescott kernel on this CPU with "
                         r"[^;]+; the ranks run (\w+) \(OPENBLAS_CORETYPE=(\w+), its results "
                         r"checked; see docs/runtime.md\)$", re.M)
LAUNCH_WARNING = re.compile(r"^warning: OpenBLAS runs its generic Prescott kernel on a CPU with "
                            r"[^,]+, and its (\w+) kernel failed ppc's self-check \((.*)\): the "
                            r"ranks keep Prescott; set OPENBLAS_CORETYPE to a core type that "
                            r"computes correctly here \(see docs/runtime.md\)$", re.M)


def env_with(**extra):
    """This environment less any OPENBLAS_CORETYPE or test hook, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "PPC_BLAS_WARNED")
           and not k.startswith("PPC_TEST_BLAS")}
    env.update(extra)
    return env


def version(**extra):
    return ppc("--version", env=env_with(**extra)).stdout


class BlasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        text = version()
        m = BLAS_LINE.search(text)
        assert m, text
        cls.kind = m.group(1)
        best = BEST.search(text)
        assert best, text
        cls.best = best.group(1)

    def need_openblas(self):
        if self.kind != "openblas":
            self.skipTest("ppc runs %s, not OpenBLAS: there is no kernel to choose" % self.kind)

    def need_capable_cpu(self):
        self.need_openblas()
        if self.best == GENERIC:
            self.skipTest("this CPU has no AVX: the generic kernel is its best")

    def mlp_manifest(self, stages):
        if not hasattr(self, "_manifests"):
            self._manifests = {}
        if stages not in self._manifests:
            out = os.path.join(tmpdir(self), "mlp")
            if stages == 1:
                ppc("split", model_path("mlp"), "-o", out, "--stages", "1")
                self._manifests[stages] = os.path.join(out, "manifest.json")
            else:
                self._manifests[stages] = split_at("mlp", stages, out)
        return self._manifests[stages]

    def mlp_run_args(self, stages, *extra):
        out = os.path.join(tmpdir(self), "out.pt")
        return ["run", self.mlp_manifest(stages), "--input", model_path("mlp", ".input.pt"),
                "--output", out, "--stats", "--no-meta-cache", "--timeout", 60, *extra]

    def single_run(self, *extra, **env):
        """`ppc run` as a 1-rank job started without ppc launch."""
        port = free_port()
        env = env_with(**env)
        env.update({k: v for k, v in rank_env(0, 1, port).items() if k in RANK_VARIABLES})
        proc = subprocess.run([PPC, *map(str, self.mlp_run_args(1, *extra))], capture_output=True,
                              text=True, timeout=TIMEOUT, env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc

    def stats_kernels(self, text):
        return {int(r): k for r, k in STATS_BLAS.findall(text)}

    def test_version_names_the_kernel(self):
        text = version()
        self.assertRegex(text, r"(?m)^cpu: (none|avx.*) \(best OpenBLAS core type: \w+\)$")
        if self.kind == "mkl":
            self.assertRegex(text, r"(?m)^blas: mkl( [\w.]+)?$")
            return
        self.need_openblas()
        m = BLAS_LINE.search(text)
        self.assertRegex(m.group(2), r"^\d+\.\d+\.\d+$")
        # A forced kernel is the one named.
        for core in (GENERIC, "Haswell"):
            m = BLAS_LINE.search(version(OPENBLAS_CORETYPE=core))
            self.assertEqual(m.group(3), core)

    def test_stats_name_the_forced_kernel(self):
        if self.kind == "mkl":
            self.assertEqual(self.stats_kernels(self.single_run().stdout), {0: "mkl"})
            return
        self.need_openblas()
        for core in (GENERIC, "Haswell"):
            json_path = os.path.join(tmpdir(self), "stats.json")
            proc = self.single_run("--stats-json", json_path, OPENBLAS_CORETYPE=core)
            self.assertEqual(self.stats_kernels(proc.stdout), {0: "openblas:" + core})
            # blas= ends the stats of RunStats::line(); batches= follows it.
            self.assertRegex(proc.stdout, r"blas=openblas:%s batches=1\n" % core)
            with open(json_path) as f:
                self.assertEqual(json.load(f)["blas"], "openblas:" + core)

    def test_single_run_warns_once_about_the_generic_kernel(self):
        self.need_capable_cpu()
        proc = self.single_run(OPENBLAS_CORETYPE=GENERIC)
        warnings = RANK_WARNING.findall(proc.stderr)
        self.assertEqual(warnings, [self.best], proc.stderr)
        self.assertEqual(proc.stderr.count("warning:"), 1, proc.stderr)
        # --quiet silences it; the best kernel gives none.
        quiet = self.single_run("--quiet", OPENBLAS_CORETYPE=GENERIC)
        self.assertNotIn("warning", quiet.stderr)
        best = self.single_run(OPENBLAS_CORETYPE=self.best)
        self.assertNotIn("warning", best.stderr)

    def test_launch_gives_the_ranks_the_checked_kernel(self):
        self.need_capable_cpu()
        env = env_with(OPENBLAS_CORETYPE=GENERIC, PPC_TEST_BLAS_CORETYPE_IS_DEFAULT="1")
        proc = launch(2, *self.mlp_run_args(2), env=env, timeout=TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        notes = LAUNCH_NOTE.findall(proc.stderr)
        self.assertEqual(notes, [(self.best, self.best)], proc.stderr)
        self.assertEqual(self.stats_kernels(proc.stdout),
                         {0: "openblas:" + self.best, 1: "openblas:" + self.best})
        self.assertNotIn("warning", proc.stderr)
        # Passed through to the ranks, --quiet silences the note too; the
        # ranks still get the kernel.
        quiet = launch(2, *self.mlp_run_args(2, "--quiet"), env=env, timeout=TIMEOUT)
        self.assertEqual(quiet.returncode, 0, quiet.stderr)
        self.assertNotIn("note: OpenBLAS", quiet.stderr)
        self.assertEqual(set(self.stats_kernels(quiet.stdout).values()),
                         {"openblas:" + self.best})

    def test_launch_respects_the_users_kernel(self):
        self.need_capable_cpu()
        proc = launch(2, *self.mlp_run_args(2), env=env_with(OPENBLAS_CORETYPE=GENERIC),
                      timeout=TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("note: OpenBLAS", proc.stderr)
        self.assertEqual(set(self.stats_kernels(proc.stdout).values()), {"openblas:" + GENERIC})
        # Each rank warns once (they were not started with the kernel).
        self.assertEqual(len(RANK_WARNING.findall(proc.stderr)), 2, proc.stderr)

    def test_failed_self_check_warns_with_the_variable(self):
        self.need_capable_cpu()
        env = env_with(OPENBLAS_CORETYPE=GENERIC, PPC_TEST_BLAS_CORETYPE_IS_DEFAULT="1",
                       PPC_TEST_BLAS_CANDIDATE="Bogus")
        proc = launch(2, *self.mlp_run_args(2), env=env, timeout=TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        warnings = LAUNCH_WARNING.findall(proc.stderr)
        self.assertEqual(len(warnings), 1, proc.stderr)
        core, problem = warnings[0]
        self.assertEqual(core, "Bogus")
        self.assertRegex(problem, r"^OpenBLAS has no core type Bogus \(it loaded \w+\)$")
        # One warning in all: the ranks do not repeat it, and keep the kernel.
        self.assertEqual(proc.stderr.count("warning:"), 1, proc.stderr)
        self.assertNotIn("note: OpenBLAS", proc.stderr)
        self.assertEqual(set(self.stats_kernels(proc.stdout).values()), {"openblas:" + GENERIC})
        quiet = launch(2, *self.mlp_run_args(2, "--quiet"), env=env, timeout=TIMEOUT)
        self.assertEqual(quiet.returncode, 0, quiet.stderr)
        self.assertNotIn("warning", quiet.stderr)

    def test_self_check_child(self):
        self.need_openblas()
        ok = ppc("blas-check", "Haswell", env=env_with(OPENBLAS_CORETYPE="Haswell"))
        self.assertEqual(ok.stdout, "blas-check: core=Haswell ok\n")
        # The core OpenBLAS loads must be the one asked for.
        bad = ppc("blas-check", "Haswell", check=False, env=env_with(OPENBLAS_CORETYPE=GENERIC))
        self.assertEqual(bad.returncode, 1)
        self.assertEqual(bad.stdout, "blas-check: core=Prescott failed: OpenBLAS has no core type "
                                     "Haswell (it loaded Prescott)\n")
        # Not a command users see.
        self.assertNotIn("blas-check", ppc("--help").stdout)


if __name__ == "__main__":
    main()
