#!/usr/bin/python3
"""Tests the copy rule for stages that write their inputs in place.

The `inplace` model (tests/models/make_models.py) has a stage `c` that
writes, in place, model input x (also read by stage 0), model input y (read
by no other stage) and stage 0's value v (also read by `b`). The manifest
marks these inputs `mutated`; `ppc run` must give such a stage its own copy
whenever the value has another use, so every configuration reproduces the
unsplit model (computed on a copy of the input), and nothing writes the
caller's input file. With 4 stages on 2 ranks, rank 0 runs `a` and `c`: `c`
writes v while v is still on its way to `b` on rank 1, so without the copy
rank 1 receives the written value. `ppc verify` (stages run one after the
other) must agree too.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (assert_outputs_close, class_splits, file_sha256, launch, main,  # noqa: E402
                    model_path, ppc, tmpdir, unsplit_output)

NAME = "inplace"


class RunInplaceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.splits = class_splits(cls, NAME)

    def setUp(self):
        self.tmp = tmpdir(self)
        self.input = model_path(NAME, ".input.pt")
        self.input_sha = file_sha256(self.input)
        # Computed here from the input as saved, not from NAME.expected.pt, so
        # a generator that saved a written input could not hide a bug.
        self.expected = unsplit_output(NAME, torch.load(self.input))

    def split_marking_writes(self, stages):
        """The class's split into STAGES stages, after checking that it marks
        what stage `c` writes."""
        s = self.splits[stages]
        c = s.load()["stages"][-1 if stages == 2 else 2]
        self.assertEqual(c.get("begins_at"), "c")
        written = {i["name"].split(".")[0] for i in c["inputs"] if i.get("mutated")}
        self.assertLessEqual({"x", "y", "v"}, written)
        return s.manifest

    def check_run(self, manifest, ranks, micro, schedule):
        out = os.path.join(self.tmp, "out.pt")
        if os.path.exists(out):
            os.remove(out)
        r = launch(ranks, "run", manifest, "--input", self.input, "--output", out,
                   "--microbatches", micro, "--schedule", schedule, "--no-meta-cache",
                   "--timeout", "60")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        assert_outputs_close(self, self.expected, torch.load(out))
        self.assertEqual(file_sha256(self.input), self.input_sha, "the input file changed")

    def test_stage_writing_its_inputs(self):
        for stages, ranks in ((2, 2), (3, 1), (4, 2), (4, 4)):
            manifest = self.split_marking_writes(stages)
            for micro in (1, 3):
                for schedule in ("1f1b", "gpipe"):
                    with self.subTest(stages=stages, ranks=ranks, microbatches=micro,
                                      schedule=schedule):
                        self.check_run(manifest, ranks, micro, schedule)

    def test_verify_matches_and_leaves_the_input_unchanged(self):
        for stages in (2, 3, 4):
            with self.subTest(stages=stages):
                r = ppc("verify", model_path(NAME), self.split_marking_writes(stages), "--input",
                        self.input)
                self.assertIn("verify: stages match the model", r.stdout)
                self.assertEqual(file_sha256(self.input), self.input_sha)


if __name__ == "__main__":
    main()
