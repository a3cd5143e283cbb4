#!/usr/bin/python3
"""Tests how `ppc run` fails: one-line errors for bad set-ups, and a lost
rank making the others exit non-zero within the timeout.

Ranks are started by hand (the torchrun variables set per process), so a
test can kill or stop one rank and watch what the others do.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import torch

PPC = os.environ.get("PPC", "build/bin/ppc")
MODELS = os.environ.get("PPC_MODELS_DIR", "build/models")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(world, args, port=None):
    port = port or free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([PPC, "run"] + args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs, timeout=60):
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
        out.append((p.returncode, o, e))
    return out


class RunFailuresTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ppc-run-failures-")
        cls.mlp = os.path.join(cls.tmp, "mlp")
        r = subprocess.run([PPC, "split", os.path.join(MODELS, "mlp.pt"), "-o", cls.mlp,
                            "--stages", "2"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        cls.resnet = os.path.join(cls.tmp, "resnet18")
        r = subprocess.run([PPC, "split", os.path.join(MODELS, "resnet18.pt"), "-o",
                            cls.resnet, "--stages", "2"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        cls.big_input = os.path.join(cls.tmp, "big.pt")
        torch.manual_seed(0)
        torch.save(torch.randn(64, 3, 32, 32), cls.big_input)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def args(self, manifest_dir, inp=None, *extra, timeout="20"):
        return [os.path.join(manifest_dir, "manifest.json"), "--input",
                inp or os.path.join(MODELS, "mlp.input.pt"), "--output",
                os.path.join(self.tmp, "out.pt"), "--no-meta-cache", "--timeout", timeout] + \
            list(extra)

    def one_line_error(self, stderr):
        errors = [l for l in stderr.splitlines() if l.startswith("error: ")]
        self.assertEqual(len(errors), 1, stderr)
        return errors[0]

    def test_no_launch_environment(self):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        r = subprocess.run([PPC, "run"] + self.args(self.mlp), env=env,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(),
                         "error: RANK is not set; start ppc run under ppc launch or torchrun")

    def test_world_size_does_not_fit(self):
        results = finish(start_ranks(3, self.args(self.mlp)))
        for code, _, err in results:
            self.assertEqual(code, 2)
            self.assertEqual(self.one_line_error(err),
                             "error: 2 stages cannot be placed on WORLD_SIZE=3 ranks: the "
                             "stage count must equal WORLD_SIZE or be a multiple of it")

    def broken_copy(self, name):
        d = os.path.join(self.tmp, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.mlp, d)
        return d

    def test_missing_stage_file(self):
        d = self.broken_copy("missing")
        os.remove(os.path.join(d, "stage_1.pt"))
        (c0, _, e0), (c1, _, e1) = finish(start_ranks(2, self.args(d)))
        self.assertEqual(c1, 2)
        self.assertEqual(self.one_line_error(e1),
                         "error: stage 1 file '%s/stage_1.pt' is missing" % d)
        self.assertEqual(c0, 2)
        self.assertTrue(self.one_line_error(e0).startswith("error: lost rank 1 ("), e0)

    def test_stage_file_hash_mismatch(self):
        d = self.broken_copy("corrupt")
        path = os.path.join(d, "stage_0.pt")
        with open(path, "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
        (c0, _, e0), (c1, _, e1) = finish(start_ranks(2, self.args(d)))
        self.assertEqual(c0, 2)
        self.assertRegex(self.one_line_error(e0),
                         r"^error: stage 0 file '.*stage_0.pt' does not match the manifest "
                         r"\(sha256 [0-9a-f]{12} != [0-9a-f]{12}\)$")
        self.assertEqual(c1, 2)
        self.assertTrue(self.one_line_error(e1).startswith("error: lost rank 0 ("), e1)

    def test_unreadable_input(self):
        missing = os.path.join(self.tmp, "nope.pt")
        (c0, _, e0), (c1, _, e1) = finish(start_ranks(2, self.args(self.mlp, missing)))
        self.assertEqual(c0, 2)
        self.assertEqual(self.one_line_error(e0),
                         "error: cannot read input '%s': No such file or directory" % missing)
        self.assertEqual(c1, 2)
        self.assertTrue(self.one_line_error(e1).startswith("error: lost rank 0 ("), e1)

    def test_input_arity_and_dtype(self):
        two = os.path.join(self.tmp, "two.pt")
        torch.save((torch.randn(5, 64), torch.randn(5, 64)), two)
        (c0, _, e0), (c1, _, _) = finish(start_ranks(2, self.args(self.mlp, two)))
        self.assertEqual((c0, c1), (2, 2))
        self.assertEqual(self.one_line_error(e0), "error: the model takes 1 input, got 2")

        ints = os.path.join(self.tmp, "ints.pt")
        torch.save(torch.ones(5, 64, dtype=torch.int64), ints)
        (c0, _, e0), (c1, _, _) = finish(start_ranks(2, self.args(self.mlp, ints)))
        self.assertEqual((c0, c1), (2, 2))
        self.assertTrue(self.one_line_error(e0).startswith("error: stage 0 failed: "), e0)

    def wait_for_schedule(self, proc):
        """Reads the rank's stdout until its schedule is printed (it has met
        the others)."""
        line = proc.stdout.readline()
        self.assertTrue(line.startswith("schedule: "), line)

    def test_killed_rank_is_named(self):
        procs = start_ranks(2, self.args(self.resnet, self.big_input, "--microbatches", "8",
                                         "--print-schedule"))
        self.wait_for_schedule(procs[1])
        procs[1].send_signal(signal.SIGKILL)
        start = time.time()
        code, _, err = finish(procs[:1], timeout=30)[0]
        finish(procs[1:])
        self.assertNotEqual(code, 0)
        self.assertLess(time.time() - start, 25)
        self.assertTrue(self.one_line_error(err).startswith("error: lost rank 1 ("), err)

    def test_stopped_rank_times_out(self):
        procs = start_ranks(2, self.args(self.resnet, self.big_input, "--microbatches", "8",
                                         "--print-schedule", timeout="3"))
        self.wait_for_schedule(procs[1])
        procs[1].send_signal(signal.SIGSTOP)
        start = time.time()
        code, _, err = finish(procs[:1], timeout=30)[0]
        procs[1].send_signal(signal.SIGKILL)
        finish(procs[1:])
        self.assertNotEqual(code, 0)
        self.assertLess(time.time() - start, 15)
        self.assertRegex(self.one_line_error(err),
                         r"^error: lost rank 1 \(no answer within 3 s while waiting for ")


if __name__ == "__main__":
    unittest.main()
