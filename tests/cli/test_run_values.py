#!/usr/bin/python3
"""Tests non-tensor boundary values through a real multi-rank pipeline.

The `values` model (tests/models/make_models.py) makes an int, a float, a
bool, an int[], a Tensor[] and a Tuple[Tensor] in stage 0 from tensor data
and uses them after every cut. Its splits must keep them as boundary values
(the manifest's kinds, and `ppc inspect`), and `ppc run` under `ppc launch`
on 2, 3 and 4 ranks must reproduce the unsplit model: with inferred metadata,
with metadata from the cache, and with user metadata written by hand.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import json
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (class_splits, expected_output, main, model_path, ppc,  # noqa: E402
                    run_pipeline, tmpdir, unsplit_output)

NAME = "values"
KINDS = {"int", "float", "bool", "int[]", "Tensor[]", "Tuple[Tensor]"}


class RunValuesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.splits = class_splits(cls, NAME)

    def setUp(self):
        self.tmp = tmpdir(self)

    def split_keeping_kinds(self, stages):
        """The class's split into STAGES stages, after checking that it keeps
        every kind as a boundary value; returns (manifest path, manifest)."""
        manifest, m = self.splits[stages].manifest, self.splits[stages].load()
        # Every non-tensor kind leaves stage 0 for a later stage.
        crossing = {o["type"] for o in m["stages"][0]["outputs"] if o["consumers"]}
        self.assertEqual(crossing - {"Tensor"}, KINDS)
        for s in m["stages"][1:]:
            for i in s["inputs"]:
                self.assertNotIn("model_input", i["source"])
        shown = ppc("inspect", manifest).stdout
        for kind in KINDS:
            self.assertRegex(shown, r"stage \d input \d: %s \S+ <- stage 0\.\d"
                             % kind.replace("[", r"\[").replace("]", r"\]"))
        return manifest, m

    def run_checked(self, manifest, ranks, *extra, inp=None, expected=None, micro=3):
        ran = run_pipeline(self, manifest, ranks, inp or model_path(NAME, ".input.pt"),
                           os.path.join(self.tmp, "out.pt"), *extra, micro=micro,
                           expected=expected_output(NAME) if expected is None else expected)
        return {s[0] for s in ran.stats.values()}

    def test_two_stages_on_two_ranks(self):
        # All six kinds cross the one cut, from rank 0 to rank 1, with rows
        # 2, 2, 1: the int and int[] differ between microbatches.
        manifest, _ = self.split_keeping_kinds(2)
        self.assertEqual(self.run_checked(manifest, 2), {"inferred"})
        self.assertEqual(self.run_checked(manifest, 2), {"cache"})
        self.assertEqual(self.run_checked(manifest, 2, "--schedule", "gpipe"), {"cache"})

    def test_three_and_four_stages(self):
        # Skip edges: stage 0's values go straight to stages 1, 2 and 3.
        for stages, ranks in ((3, 3), (4, 4), (4, 2)):
            with self.subTest(stages=stages, ranks=ranks):
                manifest, _ = self.split_keeping_kinds(stages)
                self.assertEqual(self.run_checked(manifest, ranks, "--no-meta-cache"),
                                 {"inferred"})

    def test_one_microbatch_and_a_new_batch(self):
        manifest, _ = self.split_keeping_kinds(3)
        x = torch.load(model_path(NAME, ".input.pt"))
        bigger = torch.cat([x, x.flip(0), x])  # 15 rows: 4 microbatches of 4, 4, 4, 3
        path = os.path.join(self.tmp, "bigger.pt")
        torch.save(bigger, path)
        self.assertEqual(self.run_checked(manifest, 3, micro=1), {"inferred"})
        self.assertEqual(self.run_checked(manifest, 3, inp=path, micro=4,
                                         expected=unsplit_output(NAME, bigger)),
                         {"inferred"})

    def test_user_meta_for_every_kind(self):
        # Written by hand from the model: h = relu(enc(x)) is [rows, 12];
        # chunk(h, 3, 1) is three [rows, 4]; the pair is two [rows, 12].
        manifest, m = self.split_keeping_kinds(2)
        rows = lambda *rest: {"dtype": "float32", "sizes": [-1, *rest]}
        by_kind = {
            "int": {"kind": "int"},
            "float": {"kind": "float"},
            "bool": {"kind": "bool"},
            "int[]": {"kind": "int[]", "length": 2},
            "Tensor[]": {"kind": "Tensor[]", "tensors": [rows(4), rows(4), rows(4)]},
            "Tuple[Tensor]": {"kind": "Tuple[Tensor]", "tensors": [rows(12), rows(12)]},
        }
        outputs0 = []
        for o in m["stages"][0]["outputs"]:
            # The only tensor stage 0 sends is g = relu(mid(h)), [rows, 12].
            outputs0.append(by_kind.get(o["type"], {"kind": "Tensor", "tensors": [rows(12)]}))
        user = {"stages": [{"outputs": outputs0},
                           {"outputs": [{"kind": "Tensor", "tensors": [rows(6)]}]}]}
        path = os.path.join(self.tmp, "meta.json")
        with open(path, "w") as f:
            json.dump(user, f)
        self.assertEqual(self.run_checked(manifest, 2, "--input-meta", path), {"user"})


if __name__ == "__main__":
    main()
