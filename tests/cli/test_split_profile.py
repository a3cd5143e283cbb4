"""Tests ppc split --cost profile (each operation timed on --example-input)
and --max-stage-memory (a cap on parameters plus one microbatch's
activations):
  - wrong option combinations and inputs that do not fit the model are one
    `error:` line naming the problem, exit 2, nothing written;
  - profile splits of real models verify bitwise against the unsplit model,
    and running their stages in Python reproduces its output;
  - a cap moves the cuts so that every stage fits, and the smallest cap the
    error names is exactly the smallest that works.
"""
import os
import re
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (expect_error, libtorch_major, main, model_path, ppc,  # noqa: E402
                    split, tmpdir)
from test_split_models import assert_stages_match_model  # noqa: E402

MEMORY = re.compile(r"^  stage (\d+): .*, memory .* \((\d+) bytes\)", re.M)


def stage_memory(stdout):
    """Each stage's memory in bytes, as ppc split prints it."""
    return [int(b) for _, b in MEMORY.findall(stdout)]


class SplitProfileErrorsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tmpdir(self)
        self.out = os.path.join(self.dir, "out")

    def split_fails(self, args, message):
        expect_error(self, ["split", *args], message)
        self.assertFalse(os.path.exists(self.out))
        self.assertEqual([n for n in os.listdir(self.dir) if ".tmp-" in n], [])

    def mlp_args(self, *args):
        return [model_path("mlp"), "-o", self.out, "--stages", 2, *args]

    def test_profile_needs_example_input(self):
        self.split_fails(self.mlp_args("--cost", "profile"),
                         "the profile cost model needs an example input (--example-input IN.pt)")

    def test_example_input_needs_a_cost_model_that_runs_it(self):
        for cost in ([], ["--cost", "params"], ["--cost", "nodes"]):
            with self.subTest(cost=cost):
                self.split_fails(self.mlp_args(*cost, "--example-input",
                                               model_path("mlp", ".input.pt")),
                                 "--example-input is only used by --cost flops and --cost profile")

    def test_memory_cap_needs_measured_activations(self):
        self.split_fails(self.mlp_args("--max-stage-memory", "1M"),
                         "--max-stage-memory needs --cost profile or flops, which measure "
                         "activations on --example-input")

    def test_memory_cap_must_be_a_byte_count(self):
        for bad in ["12X", "M", "-5", "1.5G", "", "0", "0K"]:
            with self.subTest(value=bad):
                self.split_fails(self.mlp_args("--max-stage-memory", bad),
                                 f"--max-stage-memory: '{bad}' is not a byte count above 0 (e.g. "
                                 "1048576, 512M, 2G) (see ppc split --help)")

    def test_memory_cap_and_split_at_exclude_each_other(self):
        self.split_fails([model_path("mlp"), "-o", self.out, "--split-at", "layers.4",
                          "--max-stage-memory", "1M"],
                         "--split-at excludes --max-stage-memory (see ppc split --help)")

    def test_example_input_with_the_wrong_number_of_inputs(self):
        path = model_path("two_io", ".input.pt")
        self.split_fails(self.mlp_args("--cost", "profile", "--example-input", path),
                         f"example input '{path}': the model takes 1 input, got 2")

    def test_example_input_of_the_wrong_shape(self):
        path = os.path.join(self.dir, "narrow.pt")
        torch.save(torch.randn(5, 8), path)
        # LibTorch 2.x names the operator that failed.
        op = "addmm: " if libtorch_major() >= 2 else ""
        self.split_fails(self.mlp_args("--cost", "profile", "--example-input", path),
                         f"cannot run the model on the example input: {op}mat1 and mat2 "
                         "shapes cannot be multiplied (5x8 and 64x64)")

    def test_example_input_that_is_no_tensor(self):
        path = os.path.join(self.dir, "dict.pt")
        torch.save({"x": torch.randn(5, 64)}, path)
        self.split_fails(self.mlp_args("--cost", "profile", "--example-input", path),
                         f"input '{path}' holds a dict; expected a tensor or a tuple/list of "
                         "tensors (one per model input)")

    def test_cap_below_one_item(self):
        # layers.0.0 is Linear(64, 64): 16640 bytes of weights and bias, plus
        # its [5, 64] float output (1280 bytes).
        self.split_fails(self.mlp_args("--cost", "profile", "--example-input",
                                       model_path("mlp", ".input.pt"), "--max-stage-memory", "1K"),
                         "item 0 (aten::linear in layers.0.0) alone needs 17.5 KiB (17920 bytes), "
                         "more than --max-stage-memory 1024")


class SplitProfileModelsTest(unittest.TestCase):
    def test_profile_splits_match_the_model(self):
        for name in ("resnet18", "vit", "two_io"):
            for n in (2, 4):
                with self.subTest(model=name, stages=n):
                    out = os.path.join(tmpdir(self), "out")
                    s = split(name, out, "--stages", n, "--cost", "profile", "--example-input",
                              model_path(name, ".input.pt"))
                    manifest, stdout = s.load(), s.proc.stdout
                    self.assertEqual(manifest["cost_model"], "profile")
                    self.assertEqual(len(manifest["stages"]), n)
                    # Nanoseconds: every stage of these models takes time.
                    self.assertTrue(all(s["predicted_cost"] > 0 for s in manifest["stages"]),
                                    manifest["stages"])
                    self.assertIn("(cost model: profile)", stdout)
                    self.assertEqual(len(stage_memory(stdout)), n, stdout)
                    assert_stages_match_model(self, name, out, manifest)

    def test_cap_moves_the_cut_until_every_stage_fits(self):
        # flops is deterministic, so the uncapped partition is known; the cap
        # works the same for every cost model.
        args = ["--stages", 2, "--cost", "flops", "--example-input",
                model_path("resnet18", ".input.pt")]
        d = tmpdir(self)
        s = split("resnet18", os.path.join(d, "free"), *args)
        free, stdout = s.load(), s.proc.stdout
        free_memory = stage_memory(stdout)
        self.assertEqual(len(free_memory), 2)

        # A cap below the largest operation names it; a cap below the
        # smallest that admits 2 stages names that.
        low = os.path.join(d, "low")

        def refused(cap):
            proc = ppc("split", model_path("resnet18"), "-o", low, *args, "--max-stage-memory",
                       cap, check=False)
            self.assertEqual(proc.returncode, 2, proc.stdout)
            self.assertFalse(os.path.exists(low))
            return proc.stderr

        m = re.fullmatch(r"error: item \d+ \(aten::\w+ in [\w.]+\) alone needs \S+ \w+ "
                         r"\((\d+) bytes\), more than --max-stage-memory 1\n", refused(1))
        self.assertIsNotNone(m)
        largest_item = int(m.group(1))
        stderr = refused(largest_item)
        m = re.fullmatch(r"error: --max-stage-memory (\d+) is too small for 2 stages: the "
                         r"smallest cap that admits them is (\d+) \(\S+ \w+\)\n", stderr)
        self.assertIsNotNone(m, stderr)
        smallest = int(m.group(2))
        self.assertGreater(smallest, largest_item)
        self.assertLess(smallest, max(free_memory),
                        "the uncapped split is already the most memory-balanced")

        # The smallest cap works, moves the cut and keeps both stages within it.
        s = split("resnet18", os.path.join(d, "capped"), *args, "--max-stage-memory", smallest)
        capped, stdout = s.load(), s.proc.stdout
        capped_memory = stage_memory(stdout)
        self.assertLessEqual(max(capped_memory), smallest)
        self.assertEqual(max(capped_memory), smallest)
        self.assertNotEqual([s["parameter_count"] for s in capped["stages"]],
                            [s["parameter_count"] for s in free["stages"]])
        # Balancing under a constraint cannot beat the unconstrained optimum.
        self.assertGreaterEqual(max(s["predicted_cost"] for s in capped["stages"]),
                                max(s["predicted_cost"] for s in free["stages"]))
        assert_stages_match_model(self, "resnet18", os.path.join(d, "capped"), capped)

        # One byte less is refused with the same smallest cap.
        self.assertIn(f"--max-stage-memory {smallest - 1} is too small for 2 stages: the "
                      f"smallest cap that admits them is {smallest} ", refused(smallest - 1))

    def test_profile_under_a_cap(self):
        # The refinement loop partitions under the cap too: every candidate
        # it measures, and the one it keeps, fit.
        args = ["--stages", 4, "--cost", "profile", "--example-input",
                model_path("mlp", ".input.pt")]
        d = tmpdir(self)
        proc = ppc("split", model_path("mlp"), "-o", os.path.join(d, "low"), *args,
                   "--max-stage-memory", "20K", check=False)
        m = re.fullmatch(r"error: --max-stage-memory 20480 is too small for 4 stages: the "
                         r"smallest cap that admits them is (\d+) \(\S+ \w+\)\n", proc.stderr)
        self.assertIsNotNone(m, proc.stderr)
        smallest = int(m.group(1))
        out = os.path.join(d, "out")
        s = split("mlp", out, *args, "--max-stage-memory", smallest)
        manifest, stdout = s.load(), s.proc.stdout
        self.assertEqual(manifest["cost_model"], "profile")
        memory = stage_memory(stdout)
        self.assertEqual(len(memory), 4)
        self.assertLessEqual(max(memory), smallest)
        assert_stages_match_model(self, "mlp", out, manifest)

    def test_cap_accepts_binary_suffixes(self):
        out = os.path.join(tmpdir(self), "out")
        stdout = split("mlp", out, "--stages", 2, "--cost", "flops", "--example-input",
                       model_path("mlp", ".input.pt"), "--max-stage-memory", "1M").proc.stdout
        self.assertTrue(all(b <= 1 << 20 for b in stage_memory(stdout)), stdout)
        proc = ppc("split", model_path("mlp"), "-o", out, "--stages", 2, "--cost", "flops",
                   "--example-input", model_path("mlp", ".input.pt"), "--max-stage-memory",
                   "40k", check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--max-stage-memory 40960 is too small", proc.stderr)

    def test_help_documents_the_options(self):
        out = ppc("split", "--help").stdout
        for text in ("profile", "--example-input", "--max-stage-memory"):
            self.assertIn(text, out)


if __name__ == "__main__":
    main()
