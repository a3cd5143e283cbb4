"""Tests that ppc split, verify and inspect reject bad input with one
`error:` line naming the problem, exit 2, and leave nothing behind."""
import os
import shutil
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import expect_error, model_path, ppc, tmpdir  # noqa: E402


class NoForward(torch.nn.Module):
    @torch.jit.export
    def other(self, x):
        return x + 1


class SplitErrorsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tmpdir(self)
        self.out = os.path.join(self.dir, "out")

    def expect_not_torchscript(self, path):
        proc = ppc("split", path, "-o", self.out, "--stages", 2, check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertTrue(proc.stderr.startswith(f"error: '{path}' is not a TorchScript module"),
                        proc.stderr)
        self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)
        self.assertFalse(os.path.exists(self.out))

    def assert_nothing_written(self):
        self.assertEqual(os.listdir(self.dir), [n for n in os.listdir(self.dir) if n != "out"])
        leftovers = [n for n in os.listdir(self.dir) if ".tmp-" in n or ".old-" in n]
        self.assertEqual(leftovers, [])
        self.assertFalse(os.path.exists(self.out))

    def test_missing_model_is_refused(self):
        missing = os.path.join(self.dir, "nope.pt")
        expect_error(self, ["split", missing, "-o", self.out, "--stages", 2],
                    f"cannot open '{missing}': No such file or directory")
        self.assert_nothing_written()

    def test_corrupt_zip_is_not_torchscript(self):
        corrupt = os.path.join(self.dir, "corrupt.pt")
        with open(model_path("mlp"), "rb") as f:
            data = bytearray(f.read())
        # Damage the zip's central directory at the end of the file.
        for i in range(len(data) - 64, len(data)):
            data[i] ^= 0xFF
        with open(corrupt, "wb") as f:
            f.write(data)
        self.expect_not_torchscript(corrupt)

    def test_tensor_file_is_not_torchscript(self):
        tensor_file = os.path.join(self.dir, "tensor.pt")
        torch.save(torch.zeros(3), tensor_file)
        self.expect_not_torchscript(tensor_file)

    def test_module_without_forward(self):
        path = os.path.join(self.dir, "noforward.pt")
        torch.jit.save(torch.jit.script(NoForward()), path)
        expect_error(self, ["split", path, "-o", self.out, "--stages", 2],
                    f"'{path}' has no forward method")
        self.assertFalse(os.path.exists(self.out))

    def test_unknown_split_path(self):
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--split-at", "layers.99"],
                    "unknown split path 'layers.99': the model has no submodule of that name")
        self.assertFalse(os.path.exists(self.out))

    def test_split_paths_out_of_order(self):
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--split-at", "layers.5,layers.2"],
                    "split paths must be in execution order: 'layers.2' does not begin "
                    "after 'layers.5'")

    def test_split_at_first_operation(self):
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--split-at", "layers.0"],
                    "split path 'layers.0' begins at the model's first operation; stage 0 "
                    "would be empty")

    def test_zero_stages_are_refused(self):
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--stages", 0],
                    "--stages: 0 is not an integer in 1..2147483647 (see ppc split --help)")
        self.assertFalse(os.path.exists(self.out))

    def test_more_stages_than_cuts(self):
        proc = ppc("split", model_path("mlp"), "-o", self.out, "--stages", 1000, check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertRegex(proc.stderr, r"^error: cannot split into 1000 stages: the graph has only "
                                      r"\d+ possible cut points \(\d+ nodes to place\)\n$")
        self.assertFalse(os.path.exists(self.out))

    def test_unwritable_output_directory_is_refused(self):
        blocker = os.path.join(self.dir, "file")
        open(blocker, "w").close()
        out = os.path.join(blocker, "out")
        expect_error(self, ["split", model_path("mlp"), "-o", out, "--stages", 2],
                    f"cannot create output directory '{out}': Not a directory")
        self.assertEqual(sorted(os.listdir(self.dir)), ["file"])

    def test_refuses_to_replace_unrelated_directory(self):
        os.makedirs(self.out)
        with open(os.path.join(self.out, "precious.txt"), "w") as f:
            f.write("keep me")
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--stages", 2],
                    f"output directory '{self.out}' is not empty and holds no "
                    "manifest.json; refusing to replace it")
        self.assertEqual(os.listdir(self.out), ["precious.txt"])

    def file_bytes(self, d):
        """Every file under `d` with its bytes."""
        files = {}
        for root, _, names in os.walk(d):
            for n in names:
                path = os.path.join(root, n)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, d)] = f.read()
        return files

    def test_refuses_directory_with_a_manifest_that_is_not_ppcs(self):
        os.makedirs(self.out)
        for name, text in [("manifest.json", "{}"), ("precious.txt", "keep me")]:
            with open(os.path.join(self.out, name), "w") as f:
                f.write(text)
        before = self.file_bytes(self.out)
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--stages", 2],
                    f"output directory '{self.out}' holds a manifest.json that ppc cannot "
                    "read as a manifest; refusing to replace it")
        self.assertEqual(self.file_bytes(self.out), before)
        self.assertEqual([n for n in os.listdir(self.dir) if n != "out"], [])

    def test_refuses_earlier_output_holding_other_files(self):
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2)
        with open(os.path.join(self.out, "notes.txt"), "w") as f:
            f.write("keep me")
        before = self.file_bytes(self.out)
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--stages", 3],
                    f"output directory '{self.out}' holds 'notes.txt', which is not part of "
                    "the earlier ppc output there; refusing to replace it")
        self.assertEqual(self.file_bytes(self.out), before)
        os.remove(os.path.join(self.out, "notes.txt"))
        os.makedirs(os.path.join(self.out, "stage_1.pt.d"))
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--stages", 3],
                    f"output directory '{self.out}' holds 'stage_1.pt.d', which is not part "
                    "of the earlier ppc output there; refusing to replace it")
        # A stage file the manifest names must still be a plain file.
        os.rmdir(os.path.join(self.out, "stage_1.pt.d"))
        os.remove(os.path.join(self.out, "stage_1.pt"))
        os.makedirs(os.path.join(self.out, "stage_1.pt"))
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--stages", 3],
                    f"output directory '{self.out}' holds 'stage_1.pt', which is not a "
                    "regular file; refusing to replace it")

    def test_replaces_earlier_output_with_its_meta_caches(self):
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2)
        for name in ["meta_cache.rank0of2.json", "meta_cache.rank1of2.json"]:
            with open(os.path.join(self.out, name), "w") as f:
                f.write("{}")
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 3)
        self.assertEqual(sorted(os.listdir(self.out)),
                         ["manifest.json", "stage_0.pt", "stage_1.pt", "stage_2.pt"])

    def test_replaces_an_empty_directory(self):
        os.makedirs(self.out)
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2)
        self.assertEqual(sorted(os.listdir(self.out)), ["manifest.json", "stage_0.pt", "stage_1.pt"])

    def test_refuses_directory_holding_the_model(self):
        for where in [self.out, os.path.join(self.out, "models")]:
            with self.subTest(where=where):
                os.makedirs(where)
                model = os.path.join(where, "mlp.pt")
                shutil.copy(model_path("mlp"), model)
                before = self.file_bytes(self.out)
                expect_error(self, ["split", model, "-o", self.out, "--stages", 2],
                            f"output directory '{self.out}' holds the model ('{model}'); "
                            "refusing to overwrite it")
                self.assertEqual(self.file_bytes(self.out), before)
                shutil.rmtree(self.out)
        # Even an earlier ppc output that holds the model (copied in by hand).
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2)
        model = os.path.join(self.out, "stage_0.pt")
        expect_error(self, ["split", model, "-o", self.out, "--stages", 2],
                    f"output directory '{self.out}' holds the model ('{model}'); "
                    "refusing to overwrite it")

    def test_replaces_earlier_output_atomically(self):
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 3)
        self.assertIn("stage_2.pt", os.listdir(self.out))
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2)
        self.assertEqual(sorted(os.listdir(self.out)), ["manifest.json", "stage_0.pt", "stage_1.pt"])
        # A failing split leaves the earlier output untouched.
        before = {n: os.path.getmtime(os.path.join(self.out, n)) for n in os.listdir(self.out)}
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--split-at", "nope"],
                    "unknown split path 'nope': the model has no submodule of that name")
        after = {n: os.path.getmtime(os.path.join(self.out, n)) for n in os.listdir(self.out)}
        self.assertEqual(before, after)
        self.assertEqual([n for n in os.listdir(self.dir) if n != "out"], [])

    def test_needs_stages_or_split_at(self):
        expect_error(self, ["split", model_path("mlp"), "-o", self.out],
                    "ppc split needs --stages N or --split-at PATHS")

    def test_unknown_cost_model(self):
        proc = ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2, "--cost", "bytes",
                   check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr, "error: --cost: 'bytes' is not a cost model (params, flops, "
                                      "nodes, profile) (see ppc split --help)\n")
        # The enum's numbers are no names.
        proc = ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2, "--cost", "2",
                   check=False)
        self.assertEqual(proc.stderr, "error: --cost: '2' is not a cost model (params, flops, "
                                      "nodes, profile) (see ppc split --help)\n")
        self.assertFalse(os.path.exists(self.out))

    def test_unknown_pass_in_ppc_debug_passes(self):
        env = dict(os.environ, PPC_DEBUG_PASSES="inline-calls,functionalise")
        proc = ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2, check=False, env=env)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr, "error: PPC_DEBUG_PASSES names unknown pass 'functionalise'; "
                                      "known passes: all, inline-calls, fold-constants, "
                                      "functionalize, sink-state-writes, cleanup\n")
        self.assertFalse(os.path.exists(self.out))

    def test_flops_needs_example_input(self):
        expect_error(self, ["split", model_path("mlp"), "-o", self.out, "--stages", 2, "--cost", "flops"],
                    "the flops cost model needs an example input (--example-input IN.pt)")

    def test_help_explains_options(self):
        proc = ppc("split", "--help")
        for option in ["--stages", "--split-at", "--cost", "--example-input", "--output"]:
            self.assertIn(option, proc.stdout)
        top = ppc("--help")
        for command in ["split", "verify", "inspect", "launch"]:
            self.assertIn(command, top.stdout)


class VerifyAndInspectErrorsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tmpdir(self)
        self.out = os.path.join(self.dir, "out")
        ppc("split", model_path("mlp"), "-o", self.out, "--stages", 2)
        self.manifest = os.path.join(self.out, "manifest.json")

    def test_verify_reports_a_mismatch_with_exit_1(self):
        # Stages of another model with the same interface: mlp's stage 1
        # replaced by a stage with different weights must be caught... by its
        # hash first; so instead compare against a different model.
        other = os.path.join(self.dir, "other.pt")
        model = torch.jit.load(model_path("mlp"))
        with torch.no_grad():
            model.head.bias.add_(1.0)
        torch.jit.save(model, other)
        proc = ppc("verify", other, self.manifest, "--input", model_path("mlp", ".input.pt"), check=False)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertRegex(proc.stdout, r"output 0: MISMATCH: max abs diff 1 \(rtol 1e-05, atol 1e-05\)")
        self.assertIn("verify: stages DIFFER from the model", proc.stdout)

    def test_inspect_dot_writes_only_regular_files(self):
        fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(fifo)
        for target in ["/dev/null", fifo, self.out]:
            with self.subTest(target=target):
                before = os.lstat(target)
                proc = ppc("inspect", self.manifest, "--dot", target, check=False)
                self.assertEqual(proc.returncode, 2)
                want = (f"error: --dot '{target}' is a directory\n" if target == self.out else
                        f"error: cannot write '{target}': it exists and is not a regular file\n")
                self.assertEqual(proc.stderr, want)
                after = os.lstat(target)
                self.assertEqual((before.st_mode, before.st_ino), (after.st_mode, after.st_ino))
        self.assertEqual(sorted(os.listdir(self.dir)), ["fifo", "out"])
        dot = os.path.join(self.dir, "stages.dot")
        ppc("inspect", self.manifest, "--dot", dot)
        with open(dot) as f:
            self.assertTrue(f.read().startswith("digraph stages {"))
        self.assertEqual(os.stat(dot).st_mode & 0o111, 0)

    def test_stage_file_changed_after_split(self):
        stage = os.path.join(self.out, "stage_1.pt")
        with open(stage, "ab") as f:
            f.write(b"x")
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", model_path("mlp", ".input.pt"),
                   check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertRegex(proc.stderr, rf"^error: stage 1 file '{self.out}/stage_1.pt' does not match "
                                      r"the manifest \(sha256 [0-9a-f]{12} != [0-9a-f]{12}\)\n$")

    def test_missing_stage_file(self):
        os.remove(os.path.join(self.out, "stage_0.pt"))
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", model_path("mlp", ".input.pt"),
                   check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr, f"error: stage 0 file '{self.out}/stage_0.pt' is missing\n")

    def test_wrong_input_arity(self):
        two = os.path.join(self.dir, "two.pt")
        torch.save((torch.zeros(5, 64), torch.zeros(5, 64)), two)
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", two, check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr, "error: the model takes 1 input, got 2\n")

    def test_input_not_tensors(self):
        bad = os.path.join(self.dir, "int.pt")
        torch.save(7, bad)
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", bad, check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr, f"error: input '{bad}' holds a Int; expected a tensor "
                                      "or a tuple/list of tensors\n")
        torch.save((torch.zeros(5, 64), 3), bad)
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", bad, check=False)
        self.assertEqual(proc.stderr, f"error: input '{bad}' holds a Int element; expected only "
                                      "tensors\n")

    def test_corrupt_manifest_gets_one_error(self):
        with open(self.manifest) as f:
            text = f.read()
        with open(self.manifest, "w") as f:
            f.write(text.replace('"consumers"', '"consumerz"', 1))
        proc = ppc("inspect", self.manifest, check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr, f"error: {self.manifest}: missing value at "
                                      "manifest.stages[0].outputs[0].consumers\n")
        with open(self.manifest, "w") as f:
            f.write(text[: len(text) // 2])
        proc = ppc("inspect", self.manifest, check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertTrue(proc.stderr.startswith(f"error: manifest '{self.manifest}' is not valid JSON: "),
                        proc.stderr)

    def test_inspect_prints_table_and_dot(self):
        dot = os.path.join(self.dir, "stages.dot")
        proc = ppc("inspect", self.manifest, "--dot", dot)
        self.assertIn("stage 1 input 0: Tensor", proc.stdout)
        self.assertIn("<- stage 0.0", proc.stdout)
        with open(dot) as f:
            text = f.read()
        self.assertTrue(text.startswith("digraph stages {"))
        self.assertIn("s0 -> s1", text)
        if shutil.which("dot"):
            ppc_dot = os.system(f"dot -Tsvg {dot} -o /dev/null")
            self.assertEqual(ppc_dot, 0)


if __name__ == "__main__":
    unittest.main()
