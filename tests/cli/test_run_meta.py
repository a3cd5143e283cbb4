#!/usr/bin/python3
"""Tests where `ppc run` gets its boundary metadata, and how it fails.

- Metadata in the manifest's `stages[].meta` (docs/manifest.md, written by
  hand: the stage files' SHA-256s do not cover the manifest) is used like
  --input-meta, and checked against every produced value.
- User metadata given on some ranks only, and input ranks whose input files
  disagree, fail with one `error:` line on the rank that sees it; the others
  report the lost rank; nothing is written.
- A meta cache that cannot be written is a warning: the run succeeds with the
  right output, and the next run infers again on every rank.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import glob
import json
import os
import re
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (assert_rank_error, expected_output, finish, main, model_path,  # noqa: E402
                    run_pipeline, split_at, start_ranks, tensor_meta, tmpdir)

NAME = "two_io"


# two_io split at c, b (3 stages), written from the model in
# tests/models/make_models.py: stage 0 makes ha [rows, 32] (to stage 1) and
# aux [rows, 4] (model output 1), stage 1 hc [rows, 32], stage 2 mix [rows, 6].
STAGE_META = [
    {"outputs": [tensor_meta(-1, 32), tensor_meta(-1, 4)]},
    {"outputs": [tensor_meta(-1, 32)]},
    {"outputs": [tensor_meta(-1, 6)]},
]


class RunMetaTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)
        self.outdir = os.path.join(self.tmp, "split")
        self.manifest = split_at(NAME, 3, self.outdir)
        with open(self.manifest) as f:
            self.stages = json.load(f)["stages"]
        self.assertEqual([[o["consumers"] for o in s["outputs"]] for s in self.stages],
                         [[[1], []], [[2]], [[]]], "the split STAGE_META describes")
        self.input = model_path(NAME, ".input.pt")
        self.out = os.path.join(self.tmp, "out.pt")

    def run_launched(self, *extra, ok=True):
        """(process, stats) of a run on 3 ranks that succeeds (output checked)
        or, unless OK, exits 2 without an output."""
        ran = run_pipeline(self, self.manifest, 3, self.input, self.out, *extra,
                           expected=expected_output(NAME), fails=not ok, status=2)
        return ran.proc, ran.stats

    def write_stage_meta(self, metas):
        """Adds `meta` to the manifest's stages (None: leaves it out)."""
        with open(self.manifest) as f:
            m = json.load(f)
        for stage, meta in zip(m["stages"], metas):
            stage.pop("meta", None)
            if meta is not None:
                stage["meta"] = meta
        with open(self.manifest, "w") as f:
            json.dump(m, f, indent=1)

    def run_unlaunched(self, rank_args, timeout="10"):
        """Runs 3 ranks without a launcher, rank R with its `rank_args[R]`;
        returns [(rc, stdout, stderr)] by rank."""
        args = [self.manifest, "--output", self.out, "--microbatches", "3",
                "--timeout", timeout, "--no-meta-cache"]
        return finish(start_ranks(3, args, rank_args=rank_args), timeout=60)

    # -- the manifest's stages[].meta ---------------------------------------

    def test_manifest_stage_meta(self):
        self.write_stage_meta(STAGE_META)
        _, stats = self.run_launched()
        self.assertEqual({s[0] for s in stats.values()}, {"user"})
        self.assertEqual(sum(int(s[1]) for s in stats.values()), 0)
        self.assertEqual(glob.glob(os.path.join(self.outdir, "meta_cache*")), [])

    def test_manifest_stage_meta_is_checked(self):
        wrong = json.loads(json.dumps(STAGE_META))
        wrong[1]["outputs"][0]["tensors"][0]["sizes"] = [-1, 31]
        self.write_stage_meta(wrong)
        r, _ = self.run_launched(ok=False)
        # Rank 1 makes stage 1's output 0, rank 2 receives it: either may say so first.
        assert_rank_error(self, r.stdout + r.stderr,
                          "stage 1 output 0 ('%s') of microbatch 0: expected float32[2,31], "
                          "got float32[2,32]" % self.stages[1]["outputs"][0]["name"], (1, 2))

    def test_manifest_stage_meta_missing_on_a_stage(self):
        self.write_stage_meta([STAGE_META[0], None, STAGE_META[2]])
        r, _ = self.run_launched(ok=False)
        # Rank 1 makes stage 1's output 0, rank 2 receives it: either may say so first.
        assert_rank_error(self, r.stdout + r.stderr, "the manifest's stage meta has no metadata "
                          "for stage 1 output 0", (1, 2))

    def test_input_meta_wins_over_the_manifest(self):
        wrong = json.loads(json.dumps(STAGE_META))
        wrong[0]["outputs"][0]["tensors"][0]["sizes"] = [-1, 33]
        self.write_stage_meta(wrong)
        path = os.path.join(self.tmp, "meta.json")
        with open(path, "w") as f:
            json.dump({"stages": STAGE_META}, f)
        _, stats = self.run_launched("--input-meta", path)
        self.assertEqual({s[0] for s in stats.values()}, {"user"})

    # -- ranks that disagree ------------------------------------------------

    def test_user_meta_on_some_ranks_only(self):
        path = os.path.join(self.tmp, "meta.json")
        with open(path, "w") as f:
            json.dump({"stages": STAGE_META}, f)
        inp = ["--input", self.input]
        results = self.run_unlaunched({0: inp, 1: inp + ["--input-meta", path], 2: inp})
        # The start-up agreement (runtime/link/Agreement.h) finds it before any
        # metadata is settled, and every rank says the same line.
        for rank in (0, 1, 2):
            rc, _, err = results[rank]
            self.assertEqual(rc, 2, err)
            self.assertRegex(err.splitlines()[-1],
                             r"^error: ranks disagree on --input-meta: rank 0 has none, rank 1 "
                             r"has %s \(xxh64 [0-9a-f]{16}, \d+ bytes\)$" % re.escape(path))
        self.assertFalse(os.path.exists(self.out))

    def test_input_ranks_disagree_on_signatures(self):
        # Ranks 0 (stage 0: x) and 2 (stage 2: y) both read the model input;
        # rank 2 is given a file with twice the rows.
        x, y = torch.load(self.input)
        other = os.path.join(self.tmp, "other.pt")
        torch.save((torch.cat([x, x]), torch.cat([y, y])), other)
        results = self.run_unlaunched({0: ["--input", self.input], 1: ["--input", self.input],
                                       2: ["--input", other]})
        # The start-up agreement compares the input files' contents before any
        # signature is sent, and every rank says the same line (the signatures'
        # own check stays for library callers, which record no input digest).
        for rank in (0, 1, 2):
            rc, _, err = results[rank]
            self.assertEqual(rc, 2, err)
            self.assertRegex(err.splitlines()[-1],
                             r"^error: ranks disagree on --input: rank 0 has %s \(xxh64 "
                             r"[0-9a-f]{16}, \d+ bytes\), rank 2 has %s \(xxh64 [0-9a-f]{16}, "
                             r"\d+ bytes\)$" % (re.escape(self.input), re.escape(other)))
        self.assertFalse(os.path.exists(self.out))

    # -- a cache that cannot be written -------------------------------------

    def test_cache_directory_is_a_file(self):
        not_a_dir = os.path.join(self.tmp, "file")
        with open(not_a_dir, "w") as f:
            f.write("not a directory\n")
        r, stats = self.run_launched("--meta-cache", not_a_dir)
        self.assertEqual({s[0] for s in stats.values()}, {"inferred"})
        self.assertEqual({s[5] for s in stats.values()}, {"0"})  # cache_written
        for rank in range(3):
            self.assertIn("[rank %d] warning: cannot save the meta cache: cannot write "
                          "'%s/meta_cache.rank%dof3.json': Not a directory\n"
                          % (rank, not_a_dir, rank), r.stderr)
        with open(not_a_dir) as f:
            self.assertEqual(f.read(), "not a directory\n")

    def test_one_rank_cannot_write_its_cache(self):
        cache = os.path.join(self.tmp, "cache")
        blocked = os.path.join(cache, "meta_cache.rank1of3.json")
        os.makedirs(blocked)  # a directory where rank 1's file would go
        for _ in range(2):  # the second run infers again: rank 1 has no cache
            r, stats = self.run_launched("--meta-cache", cache)
            self.assertEqual({s[0] for s in stats.values()}, {"inferred"})
            self.assertEqual(stats[1][5], "0")
            self.assertIn("[rank 1] warning: meta cache '%s' is not a regular file "
                          "(a directory); inferring shapes\n" % blocked, r.stderr)
            self.assertIn("[rank 1] warning: cannot save the meta cache: cannot write "
                          "'%s': it exists and is not a regular file\n" % blocked, r.stderr)
        self.assertEqual(stats[0][5], "1")
        self.assertTrue(os.path.isdir(blocked))


if __name__ == "__main__":
    main()
