#!/usr/bin/python3
"""Tests `--device cuda` (docs/runtime.md, "Devices"): stages on
cuda:LOCAL_RANK, values between ranks over NCCL, metadata device-free.

Two kinds of tests:
- test_device_cuda_*: what a ppc that cannot use CUDA says (one `error:` line,
  exit 2, nothing written): a CPU-only build, such as the default Debian
  LibTorch 1.13 one (those tests skip where ppc has CUDA), and a CUDA build
  with every GPU hidden (skips where ppc has no CUDA).
- test_cuda_*: need a ppc built against a CUDA LibTorch and NVIDIA GPUs;
  tests/CMakeLists.txt labels them `gpu` (ctest -L gpu, bench/gpu-check.sh)
  and they skip, with the reason, where either is missing. With one GPU the
  pipeline runs as one rank holding every stage (NCCL refuses two ranks of
  one communicator on the same device, so ranks cannot share a GPU); the
  NCCL test between two ranks needs two GPUs.

GPU results are compared with the unsplit model on the CPU with a tolerance:
cuDNN convolutions may use TF32 and reductions run in another order.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import re
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, assert_outputs_close, expected_output, free_port, launch,  # noqa: E402
                    main, model_path, parse_stats, rank_env, split_at, tmpdir)
from training import reference, split_under, train, write_data  # noqa: E402

# The error of a ppc whose LibTorch has no CUDA (runtime/link/Transport.h,
# checkCudaDevice).
CPU_ONLY = re.compile(r"error: --device cuda: this ppc's LibTorch \(\d+\.\d+\) is a "
                      r"CPU-only build, without CUDA; use --device cpu, or a ppc built "
                      r"against a LibTorch with CUDA")

# Tolerance of CUDA outputs against the CPU's (TF32 convolutions, other
# reduction orders).
GPU_TOL = 1e-3


def ppc_built_with(what):
    """Whether `ppc --version` says the ppc under test has WHAT ("CUDA", "NCCL")."""
    r = subprocess.run([PPC, "--version"], capture_output=True, text=True)
    return ("%s: yes" % what) in r.stdout


def ppc_has_cuda():
    """Whether the ppc under test can run --device cuda at all."""
    return ppc_built_with("CUDA") and ppc_built_with("NCCL")


def gpu_count():
    """NVIDIA GPUs this process may use: nvidia-smi's list, narrowed by
    CUDA_VISIBLE_DEVICES."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = sum(1 for l in r.stdout.splitlines() if l.startswith("GPU ")) if r.returncode == 0 else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = min(n, len([d for d in visible.split(",") if d.strip()]))
    return n


def cuda_skip_reason(gpus=1):
    """Why a test needing `gpus` GPUs cannot run here, or None."""
    if not ppc_has_cuda():
        return "ppc is built without CUDA and NCCL (ppc --version)"
    n = gpu_count()
    if n < gpus:
        return "needs %d NVIDIA GPU%s; nvidia-smi -L lists %d usable" % (
            gpus, "" if gpus == 1 else "s", n)
    return None


def run_mlp_alone_on_cuda(manifest, out, **env):
    """`ppc run MANIFEST --device cuda` on mlp's input as the only rank
    (RANK 0 of 1), with ENV added to its environment; returns the process."""
    full = rank_env(0, 1, free_port())
    full.update(env)
    return subprocess.run([PPC, "run", manifest, "--input", model_path("mlp", ".input.pt"),
                           "--output", out, "--device", "cuda"],
                          env=full, capture_output=True, text=True, timeout=120)


class DeviceErrorsTest(unittest.TestCase):
    """--device cuda where ppc cannot use CUDA: one line, exit 2."""

    def setUp(self):
        if ppc_built_with("CUDA"):
            self.skipTest("ppc is built with CUDA (ppc --version): these tests are for "
                          "CPU-only builds")
        self.tmp = tmpdir(self)
        self.manifest = split_at("mlp", 2, os.path.join(self.tmp, "mlp"))

    def test_device_cuda_run_without_cuda(self):
        out = os.path.join(self.tmp, "out.pt")
        r = run_mlp_alone_on_cuda(self.manifest, out)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertRegex(r.stderr.strip(), "^" + CPU_ONLY.pattern + "$")
        self.assertFalse(os.path.exists(out))

    def test_device_cuda_every_rank_says_why(self):
        out = os.path.join(self.tmp, "out.pt")
        r = launch(2, "run", self.manifest, "--input", model_path("mlp", ".input.pt"),
                   "--output", out, "--device", "cuda", timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        # Each rank checks before the rendezvous; the launcher stops the other
        # ranks once one fails, so a rank may be stopped before it says why.
        said = 0
        for rank in (0, 1):
            lines = [l for l in r.stderr.splitlines() if l.startswith("[rank %d] " % rank)]
            self.assertLessEqual(len(lines), 1, r.stderr)
            for line in lines:
                self.assertRegex(line, r"^\[rank %d\] " % rank + CPU_ONLY.pattern + "$")
            said += len(lines)
        self.assertGreaterEqual(said, 1, r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_device_cuda_train_without_cuda(self):
        data = os.path.join(self.tmp, "mlp.data.pt")
        write_data(data, "mlp", "cross_entropy")
        saved = os.path.join(self.tmp, "saved")
        run = train(1, self.manifest, data, "--loss", "cross_entropy", "--device", "cuda",
                    "--save", saved)
        self.assertEqual(run.proc.returncode, 2, run.output)
        lines = [l for l in run.output.splitlines() if l.startswith("[rank 0] ")]
        self.assertEqual(len(lines), 1, run.output)
        self.assertRegex(lines[0], r"^\[rank 0\] " + CPU_ONLY.pattern + "$")
        self.assertFalse(os.path.exists(saved))


class CudaBuildErrorsTest(unittest.TestCase):
    """--device cuda on a ppc with CUDA and NCCL where no GPU is visible: runs
    on any machine (CUDA_VISIBLE_DEVICES hides every GPU)."""

    def test_device_cuda_hidden_gpus(self):
        if not ppc_has_cuda():
            self.skipTest("ppc is built without CUDA and NCCL (ppc --version)")
        tmp = tmpdir(self)
        manifest = split_at("mlp", 2, os.path.join(tmp, "mlp"))
        out = os.path.join(tmp, "out.pt")
        r = run_mlp_alone_on_cuda(manifest, out, CUDA_VISIBLE_DEVICES="")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.strip().splitlines(), [
            "error: --device cuda: rank 0 sees no GPU (CUDA_VISIBLE_DEVICES=''); "
            "use --device cpu"])
        self.assertFalse(os.path.exists(out))


class CudaTest(unittest.TestCase):
    """Stages on CUDA; labelled gpu."""

    def need(self, gpus=1):
        reason = cuda_skip_reason(gpus)
        if reason:
            self.skipTest(reason)
        self.tmp = tmpdir(self)

    def run_one_rank(self, manifest, inp, out, *args):
        """`ppc run` as the only rank (it holds every stage); returns stdout."""
        r = subprocess.run([PPC, "run", manifest, "--input", inp, "--output", out,
                            "--timeout", "120", *args],
                           env=rank_env(0, 1, free_port()), capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_cuda_one_rank_stages_match_unsplit(self):
        # Every stage on cuda:0, values handed between stages on the device,
        # outputs (a tensor; a tuple of two) written from the CPU.
        self.need()
        for name, stages in (("mlp", 4), ("two_io", 2), ("resnet18", 2)):
            with self.subTest(model=name):
                manifest = split_at(name, stages, os.path.join(self.tmp, name))
                out = os.path.join(self.tmp, name + ".out.pt")
                for schedule in ("gpipe", "1f1b"):
                    self.run_one_rank(manifest, model_path(name, ".input.pt"), out,
                                      "--device", "cuda", "--microbatches", "2",
                                      "--schedule", schedule, "--no-meta-cache")
                    got = torch.load(out)
                    for t in (got if isinstance(got, (tuple, list)) else (got,)):
                        self.assertEqual(t.device.type, "cpu")
                    assert_outputs_close(self, expected_output(name), got,
                                         rtol=GPU_TOL, atol=GPU_TOL)

    def test_cuda_cache_written_on_cpu_reused_on_gpu(self):
        # Metadata holds no device: a cache from a CPU run serves a CUDA run
        # (no header sent), and one from a CUDA run serves a CPU run.
        self.need()
        for first, second in (("cpu", "cuda"), ("cuda", "cpu")):
            with self.subTest(first=first):
                manifest = split_at("mlp", 2, os.path.join(self.tmp, "mlp." + first))
                inp = model_path("mlp", ".input.pt")
                out = os.path.join(self.tmp, "out.pt")
                s1 = parse_stats(self.run_one_rank(manifest, inp, out, "--device", first,
                                                   "--microbatches", "2", "--stats"))
                # (meta, meta_messages_sent, ..., cache_written)
                self.assertEqual((s1[0][0], s1[0][5]), ("inferred", "1"))
                s2 = parse_stats(self.run_one_rank(manifest, inp, out, "--device", second,
                                                   "--microbatches", "2", "--stats"))
                self.assertEqual((s2[0][0], s2[0][1]), ("cache", "0"))
                assert_outputs_close(self, expected_output("mlp"), torch.load(out),
                                     rtol=GPU_TOL, atol=GPU_TOL)

    def test_cuda_train_one_rank_saves_cpu_stages(self):
        # Training on cuda:0 follows the CPU reference, and the saved stages
        # load on the CPU (they are saved from it).
        self.need()
        data = os.path.join(self.tmp, "mlp.data.pt")
        inputs, target = write_data(data, "mlp", "cross_entropy")
        manifest = split_under(self.tmp, "mlp", 2)
        saved = os.path.join(self.tmp, "saved")
        run = train(1, manifest, data, "--loss", "cross_entropy", "--device", "cuda",
                    "--steps", "3", "--microbatches", "2", "--lr", "0.1", "--save", saved)
        self.assertEqual(run.proc.returncode, 0, run.output)
        losses, ref = reference("mlp", inputs, target, 3, 2, "cross_entropy", "sgd", 0.1)
        self.assertEqual(len(run.losses), 3, run.output)
        for got, want in zip(run.losses, losses):
            self.assertAlmostEqual(got, want, delta=GPU_TOL * max(1.0, abs(want)))
        for f in sorted(os.listdir(saved)):
            if f.endswith(".pt"):
                module = torch.jit.load(os.path.join(saved, f), map_location="cpu")
                for p in module.parameters():
                    self.assertEqual(p.device.type, "cpu", f)

    def test_cuda_two_ranks_over_nccl(self):
        # Two ranks, one GPU each, boundary values over NCCL: inference with
        # both schedules, then training (gradients over NCCL too).
        self.need(gpus=2)
        manifest = split_at("mlp", 4, os.path.join(self.tmp, "mlp"))
        out = os.path.join(self.tmp, "out.pt")
        for schedule in ("gpipe", "1f1b"):
            r = launch(2, "run", manifest, "--input", model_path("mlp", ".input.pt"),
                       "--output", out, "--device", "cuda", "--microbatches", "4",
                       "--schedule", schedule, "--timeout", "120", "--stats")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            assert_outputs_close(self, expected_output("mlp"), torch.load(out),
                                 rtol=GPU_TOL, atol=GPU_TOL)
        data = os.path.join(self.tmp, "mlp.data.pt")
        inputs, target = write_data(data, "mlp", "cross_entropy")
        run = train(2, manifest, data, "--loss", "cross_entropy", "--device", "cuda",
                    "--steps", "2", "--microbatches", "4", "--lr", "0.1")
        self.assertEqual(run.proc.returncode, 0, run.output)
        losses, _ = reference("mlp", inputs, target, 2, 4, "cross_entropy", "sgd", 0.1)
        self.assertEqual(len(run.losses), 2, run.output)
        for got, want in zip(run.losses, losses):
            self.assertAlmostEqual(got, want, delta=GPU_TOL * max(1.0, abs(want)))

    def test_cuda_more_ranks_than_gpus(self):
        # Each rank needs a GPU of its own: a machine running one rank more
        # than it has GPUs gets one line from the rank left without one.
        self.need()
        n = gpu_count()
        manifest = split_at("mlp", 2, os.path.join(self.tmp, "mlp"))
        out = os.path.join(self.tmp, "out.pt")
        r = run_mlp_alone_on_cuda(manifest, out, LOCAL_RANK=str(n), LOCAL_WORLD_SIZE=str(n + 1))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.strip().splitlines(), [
            "error: --device cuda: LOCAL_WORLD_SIZE=%d ranks on this machine need a GPU "
            "each (rank 0 would use cuda:%d), but it has %d; start at most %d rank%s per "
            "machine, or use --device cpu" % (n + 1, n, n, n, "" if n == 1 else "s")])
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    main()
