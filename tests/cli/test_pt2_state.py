#!/usr/bin/env python3
"""Tests the state of torch.export (`.pt2`) programs: buffers written in place.

Models (tests/models/make_pt2_models.py): pt2_state (a counter bumped with
add_, three blocks each index_copy_-ing into its own cache at a keyword input
`pos`) and pt2_state_functional (the same after run_decompositions(): the
writes declared as buffer mutations). For each:

  - `ppc split --stages 2|3` lists each stage's state in the manifest
    ("state": name, dtype and shape as the program's buffers have them),
    every written buffer in exactly one stage, held by that stage's program
    alone, and `ppc verify` accepts the split;
  - the manifest's inputs are the program's, keyword input included, in
    signature order (x, pos);
  - `ppc inspect` shows each stage's state, and no stage input is marked
    written in place (writing a buffer writes no input);
  - an input file gives the keyword input by position or by name;
  - `--split-at` a module run between a cache's write and its reads is the
    exact one-line error naming the buffer and the stages.

Env: PPC, PPC_BUILD_DIR, PPC_TORCH_PYTHON (the PyTorch 2.x build).
"""
# ctest: one entry: every test skips, or none, on the same two conditions
# (models(): a LibTorch 1.x ppc, no PyTorch 2.x to export with).
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, expect_error, libtorch_major, main, ppc,  # noqa: E402
                    pytorch2_python, split, tmpdir)
import pt2  # noqa: E402

PT2_PYTHON = pytorch2_python()
PT2_MODELS = os.path.join(BUILD, "pt2-models")

MODELS = ["pt2_state", "pt2_state_functional"]
# The buffers the models write, in the order they first touch them.
STATE = ["steps", "blocks.0.cache", "blocks.1.cache", "blocks.2.cache"]
DTYPES = {torch.int64: "int64", torch.float32: "float32"}


class Pt2StateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)

    def pt2_state_models(self):
        """Generates (or reuses) the .pt2 models; skips without LibTorch 2.x
        in ppc or torch 2.x here."""
        if libtorch_major() < 2:
            self.skipTest("needs a ppc built against LibTorch 2.x")
        if not os.access(PT2_PYTHON, os.X_OK):
            self.skipTest("no PyTorch 2.x to export the models: %s is missing "
                          "(scripts/python.sh build makes it)" % PT2_PYTHON)
        if int(torch.__version__.split(".")[0]) < 2:
            self.fail("run test_pt2_state.py with the PyTorch 2.x build's Python, "
                      "PPC_TORCH_PYTHON (torch %s has no torch.export)" % torch.__version__)
        r = pt2.make_pt2_models(PT2_MODELS, PT2_PYTHON)
        self.assertEqual(r.returncode, 0, "make_pt2_models.py:\n" + r.stdout + r.stderr)
        return PT2_MODELS

    def expected_state(self, path):
        """{name: (dtype, shape)} of the written buffers of the program."""
        buffers = dict(torch.export.load(path).named_buffers())
        return {n: (DTYPES[buffers[n].dtype], list(buffers[n].shape)) for n in STATE}

    def check_state(self, models, name, out, stages):
        f = pt2.files(models, name)
        manifest = split(f[".pt2"], out, "--stages", str(stages)).load()
        self.assertEqual([i["name"] for i in manifest["inputs"]], ["x", "pos"])
        expected = self.expected_state(f[".pt2"])
        listed = []
        for stage in manifest["stages"]:
            state = stage.get("state", [])
            program = torch.export.load(os.path.join(out, stage["file"]))
            held = set(program.graph_signature.buffers)
            for t in state:
                self.assertEqual((t["dtype"], t["shape"]), expected[t["name"]], t["name"])
                self.assertIn(t["name"], held)
                listed.append(t["name"])
            others = [s for s in manifest["stages"] if s is not stage]
            for other in others:
                theirs = torch.export.load(os.path.join(out, other["file"]))
                for t in state:
                    self.assertNotIn(t["name"], theirs.graph_signature.buffers,
                                     "stage %d's state %s is also in stage %d"
                                     % (stage["index"], t["name"], other["index"]))
        self.assertEqual(listed, STATE)
        r = ppc("verify", f[".pt2"], os.path.join(out, "manifest.json"), "--input",
                f[".input.pt"], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_split_lists_state_per_stage(self):
        models = self.pt2_state_models()
        for name in MODELS:
            for stages in (2, 3):
                with self.subTest(model=name, stages=stages):
                    self.check_state(models, name, os.path.join(self.tmp, "%s%d" % (name,
                                                                                    stages)),
                                     stages)

    def test_three_stages_one_block_each(self):
        models = self.pt2_state_models()
        for name in MODELS:
            with self.subTest(model=name):
                out = os.path.join(self.tmp, name)
                manifest = split(pt2.files(models, name)[".pt2"], out, "--split-at",
                                 "blocks.1,blocks.2").load()
                self.assertEqual([[t["name"] for t in s["state"]] for s in manifest["stages"]],
                                 [["steps", "blocks.0.cache"], ["blocks.1.cache"],
                                  ["blocks.2.cache"]])
                # Writing a buffer writes no input: nothing needs a copy.
                for s in manifest["stages"]:
                    self.assertFalse(any(i.get("mutated") for i in s["inputs"]), s["inputs"])
                shown = ppc("inspect", os.path.join(out, "manifest.json")).stdout
                self.assertIn("\nstate (buffers written in place):\n"
                              "  stage 0: steps int64 [], blocks.0.cache float32 [2, 8, 16]\n"
                              "  stage 1: blocks.1.cache float32 [2, 8, 16]\n"
                              "  stage 2: blocks.2.cache float32 [2, 8, 16]\n", shown)

    def test_inputs_by_position_or_by_name(self):
        # An input file gives a keyword input by position (a tuple in the
        # manifest's order) or by name (a dict, in any order); a wrong name
        # is one exact line. (`ppc verify` reads inputs as `ppc run` does;
        # `ppc run` itself splits every input along dim 0, which this
        # model's `pos` [1] has not.)
        models = self.pt2_state_models()
        files = pt2.files(models, "pt2_state")
        manifest = split(files[".pt2"], os.path.join(self.tmp, "kw"), "--stages", 2).manifest
        x, pos = torch.load(files[".input.pt"])
        for form, value in (("tuple", (x, pos)), ("dict", {"pos": pos, "x": x})):
            with self.subTest(form=form):
                path = os.path.join(self.tmp, form + ".pt")
                torch.save(value, path)
                shown = ppc("verify", files[".pt2"], manifest, "--input", path).stdout
                self.assertIn("verify: stages match the model\n", shown)
        bad = os.path.join(self.tmp, "bad.pt")
        torch.save({"x": x, "position": pos}, bad)
        expect_error(self, ["verify", files[".pt2"], manifest, "--input", bad],
                     "input '%s' names 'position', which the model does not take (its "
                     "inputs: x, pos)" % bad)
        torch.save({"x": x}, bad)
        expect_error(self, ["verify", files[".pt2"], manifest, "--input", bad],
                     "input '%s' lacks model input 'pos'" % bad)

    def test_split_at_inside_state_is_an_error(self):
        models = self.pt2_state_models()
        for name in MODELS:
            for path, stages in (("blocks.1.query", (0, 1)), ("blocks.2.query", (1, 2))):
                with self.subTest(model=name, path=path):
                    out = os.path.join(self.tmp, "err")
                    at = path if path == "blocks.1.query" else "blocks.1," + path
                    expect_error(self, ["split", pt2.files(models, name)[".pt2"], "-o", out,
                                        "--split-at", at],
                                 "split path '%s' separates the reads and writes of buffer "
                                 "'%s' (stages %d and %d); split before or after them"
                                 % (path, path.replace("query", "cache"), *stages))
                    self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    main()
