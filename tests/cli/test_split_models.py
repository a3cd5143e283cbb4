"""Tests that ppc split handles real models: for each model of
tests/models/make_models.py, split into 2, 3 and 4 stages by --stages and by
--split-at, then check what users rely on:
  - every stage file loads and runs under Python's torch.jit.load, and running
    the stages in Python by following the manifest reproduces the output
    bitwise;
  - ppc verify matches the unsplit model bitwise (same ops, same order): in
    test_every_model_splits_and_verifies on one of the two splits of each model and stage count
    (VERIFIED_BY: --stages for 2 and 4 stages, --split-at for 3), so that
    ppc verify runs every model, every stage count and both ways of
    splitting, while the Python run above checks the same bitwise match on
    every split (and test_run_models runs the --split-at splits in ppc);
    every other check_split() runs it too;
  - each stage's state_dict keys are a subset of the model's;
  - stage parameter+buffer bytes add up to the model's plus only tied copies.
The tests that look at one split more closely (the tied embedding, the
U-Net's skips, the cost models) reuse test_every_model_splits_and_verifies' split when they ask for
the same one: check_split() splits and checks each (model, arguments) once.
"""
import functools
import json
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (MODEL_NAMES, as_tuple, class_tmpdir, load_manifest,  # noqa: E402
                    model_meta, model_path, ppc, publish_split, tmpdir)

# One intra-op thread, as tests/models/make_models.py computes the expected
# outputs: PyTorch 2.x's convolutions round otherwise when a stage's smaller
# input is cut between 2 threads (unet: 3e-8 apart), and the check is bitwise.
torch.set_num_threads(1)


def unique_tensor_bytes(module):
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


@functools.lru_cache(maxsize=None)
def model_tensors(name):
    """The state_dict keys and the unique parameter and buffer bytes of test
    model NAME, loaded once per test process."""
    model = torch.jit.load(model_path(name))
    return set(model.state_dict().keys()), unique_tensor_bytes(model)


def load_stages(outdir, manifest):
    """The stage modules under OUTDIR, in the manifest's order, loaded with
    Python's torch.jit.load."""
    return [torch.jit.load(os.path.join(outdir, stage["file"])) for stage in manifest["stages"]]


def run_stages_in_python(outdir, manifest, inputs, modules=None):
    """Runs the stages with Python's torch.jit.load (or MODULES, as
    load_stages() returns them), following the manifest."""
    modules = modules or load_stages(outdir, manifest)
    outputs = []
    for stage, module in zip(manifest["stages"], modules):
        args = []
        for inp in stage["inputs"]:
            src = inp["source"]
            args.append(inputs[src["model_input"]] if "model_input" in src
                        else outputs[src["stage"]][src["output"]])
        with torch.no_grad():
            result = module(*args)
        assert isinstance(result, tuple), "a stage returns a tuple"
        assert len(result) == len(stage["outputs"])
        outputs.append(result)
    return [inputs[r["model_input"]] if "model_input" in r else outputs[r["stage"]][r["output"]]
            for r in manifest["outputs"]]


# The way of splitting (of test_every_model_splits_and_verifies) on which ppc verify
# runs, by stage count.
VERIFIED_BY = {2: "--stages", 3: "--split-at", 4: "--stages"}


def assert_verify_matches(test, name, out):
    """`ppc verify` of the split under OUT at zero tolerance passes."""
    verify = ppc("verify", model_path(name), os.path.join(out, "manifest.json"),
                 "--input", model_path(name, ".input.pt"), "--rtol", 0, "--atol", 0,
                 check=False)
    test.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
    test.assertIn("verify: stages match the model", verify.stdout)


def assert_stages_match_model(test, name, out, manifest, modules=None, verify=True):
    """`ppc verify` at zero tolerance (unless not VERIFY), and the stages
    under OUT run one after the other in Python (MODULES, when given:
    load_stages()), give exactly the model's expected outputs."""
    if verify:
        assert_verify_matches(test, name, out)
    inputs = as_tuple(torch.load(model_path(name, ".input.pt")))
    expected = as_tuple(torch.load(model_path(name, ".expected.pt")))
    actual = run_stages_in_python(out, manifest, inputs, modules)
    test.assertEqual(len(actual), len(expected))
    for a, e in zip(actual, expected):
        test.assertTrue(torch.equal(a, e), f"max abs diff {(a - e).abs().max()}")


class SplitModelsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.checked = {}  # (name, args): [check_split()'s manifest, folder, verified]

    def check_split(self, name, args, verify=True):
        """Splits model NAME with ARGS and checks the split (the module
        docstring's list; ppc verify unless not VERIFY); returns the
        manifest. Once per NAME and ARGS in a test process: a later call
        returns the first one's manifest (a copy), running ppc verify then
        if it asks for it and the first did not."""
        key = (name, tuple(map(str, args)))
        if key not in self.checked:
            out = os.path.join(self.tmp, "out%d" % len(self.checked))
            self.checked[key] = [self.split_and_check(name, args, out, verify), out, verify]
        manifest, out, verified = self.checked[key]
        if verify and not verified:
            assert_verify_matches(self, name, out)
            self.checked[key][2] = True
        return json.loads(json.dumps(manifest))

    def split_and_check(self, name, args, out, verify):
        ppc("split", model_path(name), "-o", out, *args)
        manifest = load_manifest(out)
        n = len(manifest["stages"])
        self.assertEqual(sorted(os.listdir(out)),
                         sorted(["manifest.json"] + [f"stage_{k}.pt" for k in range(n)]))

        modules = load_stages(out, manifest)
        assert_stages_match_model(self, name, out, manifest, modules, verify=verify)

        model_keys, model_bytes = model_tensors(name)
        stage_bytes = 0
        for stage, sm in zip(manifest["stages"], modules):
            keys = set(sm.state_dict().keys())
            self.assertTrue(keys <= model_keys, keys - model_keys)
            self.assertEqual(stage["parameter_bytes"] + stage["buffer_bytes"],
                             unique_tensor_bytes(sm))
            stage_bytes += stage["parameter_bytes"] + stage["buffer_bytes"]
        tied_copies = sum((len({u["stage"] for u in t["uses"]}) - 1) * t["bytes"]
                          for t in manifest["tied_parameters"])
        self.assertEqual(stage_bytes, model_bytes + tied_copies)
        # A checked split at the paths NAME.json lists serves the tests that
        # read one (common.cached_split()), as their own ppc split would.
        where = list(map(str, args))
        if len(where) == 2 and where[0] == "--split-at" and \
                where[1] in {",".join(p) for p in model_meta(name)["split_at"].values()}:
            publish_split(name, where, out)
        return manifest

    def test_every_model_splits_and_verifies(self):
        for name in MODEL_NAMES:
            meta = model_meta(name)
            for n in (2, 3, 4):
                with self.subTest(model=name, stages=n):
                    m = self.check_split(name, ["--stages", n],
                                         verify=VERIFIED_BY[n] == "--stages")
                    self.assertEqual(len(m["stages"]), n)
                with self.subTest(model=name, split_at=meta["split_at"][str(n)]):
                    m = self.check_split(name, ["--split-at", ",".join(meta["split_at"][str(n)])],
                                         verify=VERIFIED_BY[n] == "--split-at")
                    self.assertEqual([s.get("begins_at") for s in m["stages"][1:]],
                                     meta["split_at"][str(n)])

    def test_tied_embedding_is_copied_and_recorded(self):
        m = self.check_split("decoder", ["--split-at", "blocks.2"])
        tied = m["tied_parameters"]
        self.assertEqual(len(tied), 1)
        self.assertEqual(sorted((u["stage"], u["path"]) for u in tied[0]["uses"]),
                         [(0, "embed.weight"), (1, "head.weight")])

    def test_unet_skips_go_directly_to_their_consumer(self):
        m = self.check_split("unet", ["--split-at", "down3,up3,up1"])
        # Stage 3 (up1) reads the down1 skip straight from stage 0.
        sources = [i["source"].get("stage") for i in m["stages"][3]["inputs"]]
        self.assertIn(0, sources)
        for stage in m["stages"]:
            for out in stage["outputs"]:
                self.assertEqual(out["consumers"], sorted(set(out["consumers"])))

    def test_nodes_cost_model_balances_operation_counts(self):
        # resnet18 has most parameters late and most operations early: balancing
        # nodes cuts elsewhere than balancing bytes.
        nodes = self.check_split("resnet18", ["--stages", 3, "--cost", "nodes"])
        params = self.check_split("resnet18", ["--stages", 3])
        self.assertEqual(nodes["cost_model"], "nodes")
        costs = [s["predicted_cost"] for s in nodes["stages"]]
        # One unit per operation: whole numbers that add up to the operation
        # count, split about evenly (ideal 1/3 each).
        self.assertTrue(all(c == int(c) and c > 0 for c in costs), costs)
        whole = self.check_split("resnet18", ["--stages", 1, "--cost", "nodes"])
        self.assertEqual(sum(costs), whole["stages"][0]["predicted_cost"])
        self.assertGreater(sum(costs), 50)
        self.assertLess(max(costs) / sum(costs), 0.4)
        self.assertNotEqual([s["inputs"] for s in nodes["stages"]],
                            [s["inputs"] for s in params["stages"]])

    def test_debug_passes_prints_graphs_around_the_named_pass(self):
        out = os.path.join(tmpdir(self), "out")
        env = dict(os.environ, PPC_DEBUG_PASSES="functionalize")
        proc = ppc("split", model_path("mlp"), "-o", out, "--stages", 2, env=env)
        headers = [line for line in proc.stderr.splitlines() if line.startswith("*** IR Dump")]
        self.assertEqual(headers, ["*** IR Dump Before functionalize ***",
                                   "*** IR Dump After functionalize ***"])
        before, after = proc.stderr.split("*** IR Dump After functionalize ***\n")
        for dump in (before.split("*** IR Dump Before functionalize ***\n")[1], after):
            self.assertTrue(dump.startswith("graph(%self"), dump[:80])
            self.assertIn("aten::linear", dump)
            self.assertIn("return", dump)
        # Without the variable, nothing is printed.
        quiet = ppc("split", model_path("mlp"), "-o", out, "--stages", 2)
        self.assertEqual(quiet.stderr, "")
        all_passes = ppc("split", model_path("mlp"), "-o", out, "--stages", 2,
                         env=dict(os.environ, PPC_DEBUG_PASSES="all"))
        self.assertEqual(all_passes.stderr.count("*** IR Dump Before "), 5)

    def test_flops_cost_model_balances_compute(self):
        m = self.check_split("resnet18", ["--stages", 4, "--cost", "flops", "--example-input",
                                          model_path("resnet18", ".input.pt")])
        costs = [s["predicted_cost"] for s in m["stages"]]
        self.assertEqual(m["cost_model"], "flops")
        self.assertLess(max(costs) / sum(costs), 0.4)  # 4 stages: ideal 0.25


if __name__ == "__main__":
    unittest.main()
