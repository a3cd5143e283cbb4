#!/usr/bin/python3
"""Tests that `ppc run` under `ppc launch` reproduces the unsplit models.

Each test model (tests/models/make_models.py) is split at the paths of its
NAME.json into 2, 3 and 4 stages (a split that fails fails the test) and run
on 2 to 4 ranks with 1, 3 and 8 microbatches, with batches not divisible by
the microbatch count (5 rows, and 10 rows for M=8), with more stages than
ranks, and with both schedules. OUT.pt must equal the unsplit model's output
(allclose, rtol=atol=1e-5).

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (MODEL_NAMES, assert_outputs_close, expected_output, launch, main,  # noqa: E402
                    model_path, ReportingTest, split, unsplit_output)

# (stages, ranks, microbatches, batch, schedule)
CONFIGS = [
    (2, 2, 3, 5, "1f1b"),
    (3, 3, 8, 10, "1f1b"),
    (4, 4, 1, 5, "1f1b"),
    (4, 2, 3, 5, "1f1b"),   # more stages than ranks
    (4, 2, 8, 10, "gpipe"),
    (4, 2, 4, 10, "looped-bfs"),  # inference: gpipe's forward order
]


class RunModelsTest(ReportingTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.made = {}  # (name, batch): inputs()'s, made once per class

    def inputs(self, name, batch):
        """The model's input file with `batch` rows and the expected output,
        made (and the unsplit model run) once per model and batch."""
        if (name, batch) not in self.made:
            self.made[name, batch] = self.make_inputs(name, batch)
        return self.made[name, batch]

    def make_inputs(self, name, batch):
        if batch == 5:
            return model_path(name, ".input.pt"), expected_output(name)
        path = os.path.join(self.tmp, "%s.b%d.input.pt" % (name, batch))
        inp = torch.load(model_path(name, ".input.pt"))
        grow = lambda t: torch.cat([t, t.flip(0)])[:batch]
        inp = tuple(grow(t) for t in inp) if isinstance(inp, tuple) else grow(inp)
        torch.save(inp, path)
        return path, unsplit_output(name, inp)

    def run_and_compare(self, name, stages, ranks, micro, batch, schedule):
        manifest = split(name, os.path.join(self.tmp, "%s.%d" % (name, stages)), at=stages,
                         once=True).manifest
        inp, expected = self.inputs(name, batch)
        out = os.path.join(self.tmp, "%s.out.pt" % name)
        if os.path.exists(out):
            os.remove(out)
        r = launch(ranks, "run", manifest, "--input", inp, "--output", out,
                   "--microbatches", micro, "--schedule", schedule,
                   "--no-meta-cache", "--timeout", "60")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        diff = assert_outputs_close(self, expected, torch.load(out))
        self.results.append("%-20s stages=%d ranks=%d M=%d batch=%d %-5s max_abs_diff=%.3g"
                            % (name, stages, ranks, micro, batch, schedule, diff))


def make_test(name):
    def test(self):
        for cfg in CONFIGS:
            with self.subTest(config=cfg):
                self.run_and_compare(name, *cfg)
    return test


for _name in MODEL_NAMES:
    setattr(RunModelsTest, "test_%s_runs_like_the_unsplit_model" % _name, make_test(_name))

if __name__ == "__main__":
    main()
