#!/usr/bin/python3
"""Tests what differs between ppc's two build configurations (docs/build.md).

1. `ppc --version` names ppc's version, the LibTorch it was built against and
   whether CUDA and NCCL are compiled in, and these agree with the Python torch
   that holds that LibTorch (PPC_TORCH_PYTHON in the PyTorch 2.x build;
   Debian's /usr/bin/python3 in the system LibTorch build).
2. Models scripted by PyTorch 2.x (tests/models/make_wheel_models.py, run with
   common.pytorch2_python() and cached in PPC_BUILD_DIR/wheel-models): one
   using scaled_dot_product_attention, one using aten::rms_norm. A ppc built
   against LibTorch 2.x splits, verifies and runs them on 2 ranks with the
   outputs that Python computed; one built against LibTorch 1.x refuses each
   with one exact `error:` line. Skipped, with the reason, when there is no
   PyTorch 2.x Python (scripts/python.sh build makes one in build/venv; the
   system LibTorch build gets it as PPC_PT2_PYTHON from scripts/test.sh).
3. The other way round: models scripted by torch 1.13 (Debian's Python) split,
   verify bitwise and run in the PyTorch 2.x build, whose own tests script
   theirs with torch 2.x.

Env: PPC, PPC_MODELS_DIR, PPC_BUILD_DIR, and in the PyTorch 2.x build
PPC_TORCH_PYTHON (tests/CMakeLists.txt); in the system LibTorch build
PPC_PT2_PYTHON.
"""
import json
import os
import re
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, ROOT, assert_outputs_close, launch, main, ppc,  # noqa: E402
                    pytorch2_python, tmpdir)

# The Python whose torch holds the LibTorch ppc links (empty: the system
# LibTorch build, whose torch is Debian's).
TORCH_PYTHON = os.environ.get("PPC_TORCH_PYTHON", "")
# A Python with torch 2.x to script the models.
PT2_PYTHON = pytorch2_python()
MODELS_2X = os.path.join(BUILD, "wheel-models")
GENERATOR = os.path.join(ROOT, "tests", "models", "make_wheel_models.py")

VERSION_RE = re.compile(
    r"ppc (\d+\.\d+\.\d+)\nLibTorch (\d+)\.(\d+)\.(\d+)\nCUDA: (yes|no)\nNCCL: (yes|no)\n")


def ppc_version():
    """`ppc --version` parsed: (ppc version, (major, minor, patch), cuda, nccl)."""
    r = ppc("--version")
    m = VERSION_RE.match(r.stdout)  # the blas: and cpu: lines follow
    if m is None:
        raise AssertionError("unexpected `ppc --version` output: %r" % r.stdout)
    return (m.group(1), tuple(int(m.group(i)) for i in (2, 3, 4)),
            m.group(5) == "yes", m.group(6) == "yes")


def python_torch(python):
    """(version (major, minor, patch), has CUDA, has NCCL) of `python`'s torch."""
    code = ("import re, torch, torch.distributed as d; "
            "print(*re.match(r'(\\d+)\\.(\\d+)\\.(\\d+)', torch.__version__).groups(), "
            "torch.version.cuda is not None, d.is_available() and d.is_nccl_available())")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("%s cannot import torch:\n%s" % (python, r.stderr))
    fields = r.stdout.split()
    return tuple(int(f) for f in fields[:3]), fields[3] == "True", fields[4] == "True"


class ConfigurationsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)

    def test_version_names_the_pythons_torch(self):
        version, libtorch, cuda, nccl = ppc_version()
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            project = re.search(r"project\(ppc VERSION (\S+)", f.read()).group(1)
        self.assertEqual(version, project)
        want = python_torch(TORCH_PYTHON or "/usr/bin/python3")
        self.assertEqual((libtorch, cuda, nccl), want,
                         "ppc --version disagrees with %s's torch" % (TORCH_PYTHON or
                                                                    "/usr/bin/python3"))
        if not TORCH_PYTHON:  # the system LibTorch build: Debian's CPU-only LibTorch
            self.assertEqual((libtorch[0], cuda, nccl), (1, False, False))

    # -- models scripted by PyTorch 2.x ----------------------------------

    def models_2x(self):
        """Generates (or reuses) the 2.x-scripted models; skips without a
        PyTorch 2.x Python."""
        if not os.access(PT2_PYTHON, os.X_OK):
            self.skipTest("no PyTorch 2.x to script the models: %s is missing "
                          "(scripts/python.sh build makes it)" % PT2_PYTHON)
        r = subprocess.run([PT2_PYTHON, "-W", "ignore", GENERATOR, MODELS_2X],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, "make_wheel_models.py:\n" + r.stdout + r.stderr)
        return MODELS_2X

    def needs_libtorch(self, ok, why):
        libtorch = ppc_version()[1]
        if not ok(libtorch[0]):
            self.skipTest("%s; this ppc has LibTorch %d.%d.%d" % ((why,) + libtorch))

    def check_wheel_split_verify_run(self, name):
        self.needs_libtorch(lambda major: major >= 2, "needs a ppc built against LibTorch 2.x")
        models = self.models_2x()
        with open(os.path.join(models, name + ".json")) as f:
            cuts = json.load(f)["split_at"]
        model, inp = os.path.join(models, name + ".pt"), os.path.join(models, name + ".input.pt")
        for stages in sorted(cuts):
            out = os.path.join(self.tmp, "split%s" % stages)
            ppc("split", model, "-o", out, "--split-at", ",".join(cuts[stages]))
            manifest = os.path.join(out, "manifest.json")
            r = ppc("verify", model, manifest, "--input", inp, check=False)
            self.assertEqual(r.returncode, 0, "%s, %s stages: verify:\n%s%s" % (
                name, stages, r.stdout, r.stderr))
        # Two ranks, 3 microbatches of a batch of 5, against PyTorch 2.x's own output.
        got = os.path.join(self.tmp, "out.pt")
        r = launch(2, "run", os.path.join(self.tmp, "split2", "manifest.json"), "--input", inp,
                   "--output", got, "--microbatches", "3", "--no-meta-cache", timeout=300,
                   launcher=("--timeout", "120"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        assert_outputs_close(self, torch.load(os.path.join(models, name + ".expected.pt")),
                             torch.load(got))

    def test_sdpa_splits_verifies_and_runs(self):
        self.check_wheel_split_verify_run("sdpa")

    def test_rms_norm_splits_verifies_and_runs(self):
        self.check_wheel_split_verify_run("rms_norm")

    def test_libtorch_2_reads_models_scripted_by_torch_1(self):
        """TorchScript files that an older torch saved (Debian's 1.13, when
        it is installed) split, verify bitwise and run on 2 ranks in the
        PyTorch 2.x build, against the outputs torch 1.13 computed."""
        self.needs_libtorch(lambda major: major >= 2, "a ppc built against LibTorch 1.x reads "
                            "them in every other test")
        old = "/usr/bin/python3"
        if not os.access(old, os.X_OK) or python_torch(old)[0][0] >= 2:
            self.skipTest("no torch 1.x at %s (scripts/setup.sh system installs it)" % old)
        models = os.path.join(BUILD, "models-torch1")
        r = subprocess.run([old, os.path.join(ROOT, "tests", "models", "make_models.py"), models,
                            "--only", "resnet18,two_io"], capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(r.returncode, 0, "make_models.py:\n" + r.stdout + r.stderr)
        for name in ("resnet18", "two_io"):
            model = os.path.join(models, name + ".pt")
            inp = os.path.join(models, name + ".input.pt")
            out = os.path.join(self.tmp, name)
            ppc("split", model, "-o", out, "--stages", "2")
            r = ppc("verify", model, os.path.join(out, "manifest.json"), "--input", inp,
                    "--rtol", "0", "--atol", "0", check=False)
            self.assertEqual(r.returncode, 0, "%s: verify:\n%s%s" % (name, r.stdout, r.stderr))
        got = os.path.join(self.tmp, "out.pt")
        r = launch(2, "run", os.path.join(self.tmp, "resnet18", "manifest.json"), "--input",
                   os.path.join(models, "resnet18.input.pt"), "--output", got,
                   "--microbatches", "2", "--no-meta-cache", timeout=300,
                   launcher=("--timeout", "120"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        assert_outputs_close(self, torch.load(os.path.join(models, "resnet18.expected.pt")),
                             torch.load(got))

    def test_libtorch_1_refuses_torch2_models(self):
        self.needs_libtorch(lambda major: major < 2, "only a ppc built against LibTorch 1.x "
                            "lacks these operators")
        models = self.models_2x()
        version = "%d.%d.%d" % ppc_version()[1]
        for name, op in (("sdpa", "aten::scaled_dot_product_attention"),
                         ("rms_norm", "aten::rms_norm")):
            model, out = os.path.join(models, name + ".pt"), os.path.join(self.tmp, name)
            r = ppc("split", model, "-o", out, "--stages", "2", check=False)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertEqual(r.stdout, "")
            self.assertEqual(
                r.stderr,
                "error: '%s' uses operator %s, which this ppc's LibTorch %s lacks (the model "
                "was scripted by a newer PyTorch; build ppc against that PyTorch's LibTorch: "
                "docs/build.md)\n" % (model, op, version))
            self.assertFalse(os.path.exists(out), "split left %s behind" % out)


class PythonScriptTest(unittest.TestCase):
    # (From test_feedback.py, whose other tests never skip: there they share
    # one process, tests/CMakeLists.txt.)
    def test_python_sh_prints_an_absolute_path(self):
        # The tutorial keeps it in $python and uses it outside the checkout.
        from common import ROOT, pytorch2_python
        python = pytorch2_python()
        if not os.access(python, os.X_OK):
            self.skipTest("no PyTorch 2.x Python at %s" % python)
        # Given as a path relative to the current directory, as a user may.
        where = os.path.dirname(os.path.dirname(python))
        r = subprocess.run([os.path.join(ROOT, "scripts", "python.sh"), "build"], cwd=where,
                           env=dict(os.environ, PPC_PYTHON=os.path.relpath(python, where)),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines()[-1], os.path.abspath(python))


if __name__ == "__main__":
    main()
