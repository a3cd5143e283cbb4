"""Tests that `ppc launch` ends with the root cause of a failed pipeline run.

A 3-rank `ppc run` that fails on one rank makes the other ranks fail too,
often first: they lose the failed rank. Their lines must say they are a
consequence, and the launcher's last line must name the rank that failed
for its own reason, with that rank's error, as torchrun's "Root Cause (first
observed failure)" does.

Run: /usr/bin/python3 tests/cli/test_root_cause.py -v
Needs the test models (PPC_MODELS_DIR); about 15 s.
"""

import os
import re
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import class_tmpdir, launch, main, save_tensor, split_at  # noqa: E402

CONSEQUENCE = re.compile(r"^\[rank (\d+)\] error: (.*lost rank (\d+) \(.*\)); a consequence: "
                         r"this rank stopped because of rank (\d+)$")


class RootCauseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)

    def run_failing(self, manifest, inp):
        """Runs MANIFEST on 3 ranks under ppc launch; returns its stderr lines
        after checking that it failed and wrote nothing."""
        out = os.path.join(self.tmp, "out.pt")
        proc = launch(3, "run", manifest, "--input", inp, "--output", out, "--timeout", "20",
                      "--no-meta-cache", timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertFalse(os.path.exists(out))
        return proc.stderr.splitlines()

    def assert_root_cause(self, lines, rank, pattern):
        """The launcher's last line names RANK and the error RANK printed
        itself (matching PATTERN); every other rank's error line, if any, is
        marked as a consequence of losing a rank."""
        own = [l for l in lines if l.startswith(f"[rank {rank}] error: ")]
        self.assertEqual(len(own), 1, "\n".join(lines))
        error = own[0][len(f"[rank {rank}] error: "):]
        self.assertRegex(error, pattern)
        self.assertIsNone(CONSEQUENCE.match(own[0]), own[0])
        self.assertEqual(lines[-1], f"error: rank {rank} exited with status 2: {error}")
        others = [l for l in lines if re.match(r"^\[rank \d+\] error: ", l) and l not in own]
        for line in others:
            m = CONSEQUENCE.match(line)
            self.assertIsNotNone(m, line)
            self.assertNotEqual(m.group(1), str(rank))
            self.assertEqual(m.group(3), m.group(4), line)
        launcher = [l for l in lines if l.startswith("error: ")]
        self.assertEqual(launcher, [lines[-1]])

    def test_bad_input_on_rank_0(self):
        # The case: resnet18 in 3 stages fed 2 channels instead of 3;
        # only stage 0 (rank 0) sees the mismatch, ranks 1 and 2 lose it.
        manifest = split_at("resnet18", 3, os.path.join(self.tmp, "resnet18"))
        lines = self.run_failing(manifest, save_tensor(self.tmp, torch.randn(2, 2, 32, 32),
                                                       "bad.pt"))
        self.assert_root_cause(lines, 0, r"^stage 0 failed: .*expected input\[.*to have 3 "
                                         r"channels, but got 2 channels instead")

    def test_bad_input_on_rank_2(self):
        # two_io's second input y enters only its last stage (b, mix), so a y
        # of the wrong width fails on rank 2 alone, after ranks 0 and 1 have
        # started; they lose rank 2.
        manifest = split_at("two_io", 3, os.path.join(self.tmp, "two_io"))
        bad = save_tensor(self.tmp, (torch.randn(4, 16), torch.randn(4, 7)), "bad_y.pt")
        lines = self.run_failing(manifest, bad)
        self.assert_root_cause(lines, 2, r"^stage 2 failed: .*mat1 and mat2 shapes cannot be "
                                         r"multiplied")


if __name__ == "__main__":
    main()
