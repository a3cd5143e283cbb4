#!/usr/bin/python3
"""Tests many batches per `ppc run` launch: a list of batches in one file, a
directory of batch files, and --repeat.

Every batch's output must equal the unsplit model's on that batch, and the
metadata of a microbatch signature is settled once per launch: a launch of
several batches with one signature sends as many metadata messages as a
launch of one (read from --stats, which sums over the batches and ends with
batches=N). Bad inputs and outputs fail on one line, every rank exits
non-zero within the timeout, and nothing is written.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import re
import sys
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (assert_identical, assert_outputs_close, class_tmpdir, launch,  # noqa: E402
                    main, model_path, parse_stats, save_tensor, split_at, tmpdir, unsplit_output)

TIMEOUT = 10
BATCHES = re.compile(r"stats: rank=(\d+) .* cache_written=\d(?: [a-z_]+=\S+)* batches=(\d+)$", re.M)


def batch_counts(text):
    """{rank: N} from the batches=N ending each `--stats` line."""
    return {int(r): int(n) for r, n in BATCHES.findall(text)}


class RunBatchesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        shared = class_tmpdir(cls)
        cls.mlp = split_at("mlp", 2, os.path.join(shared, "mlp"))
        cls.two_io = split_at("two_io", 3, os.path.join(shared, "two_io"))

    def setUp(self):
        self.tmp = tmpdir(self)
        self.x = torch.load(model_path("mlp", ".input.pt"))  # 5 x 64

    def run_counting_batches(self, manifest, inp, out, *extra, ranks=2):
        """Runs `ppc run` with --stats and --no-meta-cache (every launch
        infers); checks that it succeeded on every rank. Returns (stats,
        batch counts, summed metadata messages)."""
        r = launch(ranks, "run", manifest, "--input", inp, "--output", out,
                   "--microbatches", 2, "--stats", "--no-meta-cache", "--timeout", 60, *extra)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        stats = parse_stats(r.stdout)
        self.assertEqual(sorted(stats), list(range(ranks)), r.stdout)
        counts = batch_counts(r.stdout)
        self.assertEqual(sorted(counts), list(range(ranks)), r.stdout)
        self.assertEqual({s[0] for s in stats.values()}, {"inferred"})
        return stats, counts, sum(int(s[1]) for s in stats.values())

    def run_fails(self, manifest, inp, out, message, *extra, failing=(0,)):
        """Runs `ppc run` on 2 ranks expecting `message` as the one error line
        of a rank in `failing` (the others report it or are stopped); checks
        that every rank ends within the timeout and that a file --output
        that did not exist still does not."""
        existed = os.path.exists(out)
        start = time.monotonic()
        r = launch(2, "run", manifest, "--input", inp, "--output", out,
                   "--microbatches", 2, "--no-meta-cache", "--timeout", TIMEOUT, *extra,
                   timeout=120)
        self.assertLess(time.monotonic() - start, 2 * TIMEOUT + 10, r.stderr)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        lines = r.stderr.splitlines()
        self.assertTrue(any(f"[rank {k}] error: {message}" in lines for k in failing), r.stderr)
        for rank in range(2):
            errors = [l for l in lines if l.startswith(f"[rank {rank}] error: ")]
            self.assertLessEqual(len(errors), 1, r.stderr)
        if not existed and not os.path.isdir(inp):
            self.assertFalse(os.path.exists(out), "a failed run wrote its output")
        return r

    # --- a list of batches in one file ------------------------------------

    def test_list_of_batches_settles_metadata_once(self):
        batches = [self.x, self.x * 2, self.x.flip(0)]
        out = os.path.join(self.tmp, "out.pt")
        stats, counts, meta = self.run_counting_batches(self.mlp, save_tensor(self.tmp, batches,
                                                                              "list.pt"), out)
        self.assertEqual(counts, {0: 3, 1: 3})
        got = torch.load(out)
        self.assertIsInstance(got, list)
        self.assertEqual(len(got), 3)
        for b, g in zip(batches, got):
            assert_outputs_close(self, unsplit_output("mlp", b), g)

        # One batch of the same shape sends as many metadata messages: the
        # second and third batches send none.
        _, counts1, meta1 = self.run_counting_batches(self.mlp, save_tensor(self.tmp, self.x,
                                                                            "one.pt"), out)
        self.assertEqual(counts1, {0: 1, 1: 1})
        self.assertGreater(meta1, 0)
        self.assertEqual(meta, meta1)
        self.assertGreater(int(stats[0][2]), 0)

    def test_list_of_one_batch_needs_a_tuple(self):
        # [x] is one batch, as before (a tensor out); [(x,)] a list of one.
        out = os.path.join(self.tmp, "out.pt")
        self.run_counting_batches(self.mlp, save_tensor(self.tmp, [self.x], "one.pt"), out)
        self.assertIsInstance(torch.load(out), torch.Tensor)
        _, counts, _ = self.run_counting_batches(self.mlp, save_tensor(self.tmp, [(self.x,)],
                                                                       "list.pt"), out)
        self.assertEqual(counts, {0: 1, 1: 1})
        got = torch.load(out)
        self.assertIsInstance(got, list)
        assert_outputs_close(self, unsplit_output("mlp", self.x), got[0])

    def test_batches_of_different_sizes(self):
        # 5 rows in 2 microbatches are rows 3, 2; 3 rows are 2, 1: one new
        # signature, whose metadata is inferred once.
        small = self.x[:3] + 1
        out = os.path.join(self.tmp, "out.pt")
        _, _, meta2 = self.run_counting_batches(self.mlp, save_tensor(self.tmp, [self.x, small],
                                                                      "two.pt"), out)
        got = torch.load(out)
        assert_outputs_close(self, unsplit_output("mlp", self.x), got[0])
        assert_outputs_close(self, unsplit_output("mlp", small), got[1])
        _, _, meta1 = self.run_counting_batches(self.mlp, save_tensor(self.tmp, self.x, "one.pt"),
                                                out)
        self.assertGreater(meta2, meta1)
        _, counts, meta4 = self.run_counting_batches(
            self.mlp, save_tensor(self.tmp, [self.x, small, small * 2, self.x * 3], "four.pt"), out)
        self.assertEqual(counts, {0: 4, 1: 4})
        self.assertEqual(meta4, meta2)
        got = torch.load(out)
        assert_outputs_close(self, unsplit_output("mlp", small * 2), got[2])
        assert_outputs_close(self, unsplit_output("mlp", self.x * 3), got[3])

    def test_two_inputs_and_a_tuple_output(self):
        x, y = torch.load(model_path("two_io", ".input.pt"))
        batches = [(x, y), (x[:4] * 2, y[:4]), [x.flip(0), y.flip(0)]]
        out = os.path.join(self.tmp, "out.pt")
        _, counts, _ = self.run_counting_batches(self.two_io, save_tensor(self.tmp, batches,
                                                                          "list.pt"), out, ranks=3)
        self.assertEqual(counts, {0: 3, 1: 3, 2: 3})
        got = torch.load(out)
        self.assertEqual(len(got), 3)
        for b, g in zip(batches, got):
            self.assertIsInstance(g, tuple)
            assert_outputs_close(self, unsplit_output("two_io", tuple(b)), g)
        # A list of two tensors is still one batch of a two-input model.
        self.run_counting_batches(self.two_io, save_tensor(self.tmp, [x, y], "pair.pt"), out,
                                  ranks=3)
        assert_outputs_close(self, unsplit_output("two_io", (x, y)), torch.load(out))

    # --- a directory of batch files ---------------------------------------

    def test_directory_of_batches(self):
        inp = os.path.join(self.tmp, "in")
        os.mkdir(inp)
        batches = {"b.pt": self.x, "a.pt": self.x[:3] * 2, "c.pt": self.x.flip(0)}
        for name, value in batches.items():
            torch.save(value, os.path.join(inp, name))
        # Not batches: another suffix, a directory named like one.
        torch.save(self.x[:1], os.path.join(inp, "skip.pth"))
        os.mkdir(os.path.join(inp, "d.pt"))
        out = os.path.join(self.tmp, "out", "nested")
        _, counts, meta = self.run_counting_batches(self.mlp, inp, out)
        self.assertEqual(counts, {0: 3, 1: 3})
        self.assertEqual(sorted(os.listdir(out)), ["a.pt", "b.pt", "c.pt"])
        for name, value in batches.items():
            assert_outputs_close(self, unsplit_output("mlp", value),
                                 torch.load(os.path.join(out, name)))
        # Into an existing directory; the same as the list form.
        _, _, meta_list = self.run_counting_batches(
            self.mlp, save_tensor(self.tmp, [batches[n] for n in sorted(batches)], "list.pt"),
            os.path.join(self.tmp, "out.pt"))
        self.assertEqual(meta, meta_list)
        self.run_counting_batches(self.mlp, inp, out)

    # --- --repeat ----------------------------------------------------------

    def test_repeat_runs_the_batch_again_with_the_same_output(self):
        inp = save_tensor(self.tmp, self.x, "x.pt")
        once, repeated = os.path.join(self.tmp, "once.pt"), os.path.join(self.tmp, "rep.pt")
        _, _, meta1 = self.run_counting_batches(self.mlp, inp, once)
        stats, counts, meta5 = self.run_counting_batches(self.mlp, inp, repeated, "--repeat", 5)
        self.assertEqual(counts, {0: 5, 1: 5})
        self.assertEqual(meta5, meta1)
        assert_identical(self, torch.load(once), torch.load(repeated))
        # Rank 0 sends the batch's microbatches on every repetition.
        single, _, _ = self.run_counting_batches(self.mlp, inp, once)
        self.assertGreater(int(stats[0][2]), int(single[0][2]))

    # --- errors ------------------------------------------------------------

    def test_input_directory_without_pt_files_is_refused(self):
        inp = os.path.join(self.tmp, "in")
        os.mkdir(inp)
        torch.save(self.x, os.path.join(inp, "x.pth"))
        out = os.path.join(self.tmp, "out")
        self.run_fails(self.mlp, inp, out, f"input directory '{inp}' holds no .pt files")
        self.assertFalse(os.path.exists(out))

    def test_output_directory_is_the_input_directory(self):
        inp = os.path.join(self.tmp, "in")
        os.mkdir(inp)
        torch.save(self.x, os.path.join(inp, "x.pt"))
        for out in (inp, inp + "/", os.path.join(inp, ".")):
            self.run_fails(self.mlp, inp, out, f"--output '{out}' is the input directory; "
                           "refusing to overwrite it", failing=(0, 1))
        manifest_dir = os.path.dirname(self.mlp)
        self.run_fails(self.mlp, inp, manifest_dir, f"--output '{manifest_dir}' holds the "
                       f"manifest ('{self.mlp}'); refusing to overwrite it", failing=(0, 1))
        file_out = save_tensor(self.tmp, self.x, "file.pt")
        self.run_fails(self.mlp, inp, file_out, f"--output '{file_out}' is not a directory; "
                       f"the input '{inp}' is one", failing=(0, 1))

    def test_repeat_out_of_range(self):
        inp = save_tensor(self.tmp, self.x, "x.pt")
        out = os.path.join(self.tmp, "out.pt")
        for n in (0, -1, 1000001):
            self.run_fails(self.mlp, inp, out, f"--repeat: {n} is not an integer in 1..1000000 "
                           "(see ppc run --help)", "--repeat", n, failing=(0, 1))

    def test_bad_list_elements(self):
        out = os.path.join(self.tmp, "out.pt")
        inp = save_tensor(self.tmp, [(self.x,), "text"], "bad.pt")
        self.run_fails(self.mlp, inp, out, f"input '{inp}' batch 1 holds a String; expected a "
                       "tensor or a tuple/list of tensors")
        inp = save_tensor(self.tmp, [self.x, 3], "bad.pt")  # one input: a list of batches
        self.run_fails(self.mlp, inp, out, f"input '{inp}' batch 1 holds a Int; expected a "
                       "tensor or a tuple/list of tensors")
        inp = save_tensor(self.tmp, [(self.x,), (self.x, 3)], "bad.pt")
        self.run_fails(self.mlp, inp, out, f"input '{inp}' batch 1 holds a Int element; "
                       "expected only tensors")
        # Every batch is checked before the first runs.
        inp = save_tensor(self.tmp, [self.x, self.x[:1]], "bad.pt")
        self.run_fails(self.mlp, inp, out, f"input '{inp}' batch 1: --microbatches 2 exceeds "
                       "the batch size 1")

    def test_bad_directory_file_names_its_batch(self):
        inp = os.path.join(self.tmp, "in")
        os.mkdir(inp)
        torch.save(self.x, os.path.join(inp, "a.pt"))
        torch.save((self.x, self.x), os.path.join(inp, "b.pt"))
        out = os.path.join(self.tmp, "out")
        r = self.run_fails(self.mlp, inp, out, f"input '{inp}/b.pt': the model takes 1 input, "
                           "got 2")
        # A batch that completed keeps its whole file (unless the launcher
        # stopped the output rank first); the failed one has none.
        self.assertIn(os.listdir(out), ([], ["a.pt"]))
        if os.listdir(out):
            assert_outputs_close(self, unsplit_output("mlp", self.x),
                                 torch.load(os.path.join(out, "a.pt")))
        self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    main()
