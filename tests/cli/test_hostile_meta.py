#!/usr/bin/python3
"""Tests that `ppc run` treats meta caches, user metadata and --output as untrusted.

Hostile metadata (huge, negative or overflowing sizes, unknown dtypes, deep
nesting) is one `error:` line (user metadata) or a warning and re-inference
(a cache), never an allocation failure or a crash. A cache that is valid
but wrong, on one rank or edited the same way on all, never reaches the
output: the ranks infer (or fail clearly and the next run infers), and the
output equals the unsplit model's. --output may not name the input, the
manifest, a stage file or a meta cache file.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import glob
import hashlib
import json
import os
import shutil
import unittest

import torch

from common import MODELS, read_bytes, run_pipeline, split, tmpdir

RANKS = 2


def set_checksum(cache):
    """Recomputes a cache's entries_sha256 as docs/runtime.md defines it, as a
    tool that edits caches deliberately would."""
    compact = json.dumps(cache["entries"], sort_keys=True, separators=(",", ":"))
    cache["entries_sha256"] = hashlib.sha256(compact.encode()).hexdigest()


class HostileMetaTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)
        self.dir = os.path.join(self.tmp, "mlp")
        self.manifest = split("mlp", self.dir, "--stages", RANKS).manifest
        self.input = os.path.join(self.tmp, "input.pt")
        shutil.copy(os.path.join(MODELS, "mlp.input.pt"), self.input)
        self.expected = torch.load(os.path.join(MODELS, "mlp.expected.pt"))
        self.out = os.path.join(self.tmp, "out.pt")

    def run_unchecked(self, *extra, output=None):
        """(process, {rank: meta source}) of a run, checked by the caller."""
        ran = run_pipeline(self, self.manifest, RANKS, self.input, output or self.out, *extra,
                           micro=2, rank_timeout=20, check=False, stale=self.out, timeout=120)
        return ran.proc, {rank: s[0] for rank, s in ran.stats.items()}

    def assert_right_output(self, r):
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        torch.testing.assert_close(torch.load(self.out), self.expected)

    def assert_one_error(self, r, text):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        errors = [l for l in r.stderr.splitlines() if "error:" in l]
        self.assertTrue(any(text in l for l in errors), r.stderr)
        for bad in ("can't allocate", "overflow", "terminate", "Exception raised",
                    "c10::Error", "Segmentation"):
            self.assertNotIn(bad, r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def caches(self):
        files = sorted(glob.glob(os.path.join(self.dir, f"meta_cache.rank*of{RANKS}.json")))
        self.assertEqual(len(files), RANKS)
        return files

    def edit_cache(self, path, edit, checksum=True):
        with open(path) as f:
            cache = json.load(f)
        for entry in cache["entries"]:
            for value in entry["values"]:
                if value["stage"] == 0:
                    edit(value["meta"])
        if checksum:
            set_checksum(cache)
        with open(path, "w") as f:
            json.dump(cache, f)

    def write_user_meta(self, outputs0, outputs1=None):
        ok = {"kind": "Tensor", "tensors": [{"dtype": "float32", "sizes": [-1, 10]}]}
        path = os.path.join(self.tmp, "meta.json")
        with open(path, "w") as f:
            if isinstance(outputs0, str):
                f.write(outputs0)
            else:
                json.dump({"stages": [{"outputs": [outputs0]},
                                      {"outputs": [outputs1 or ok]}]}, f)
        return path

    def boundary(self):
        """The boundary value's metadata from a first (inferring) run."""
        r, stats = self.run_unchecked()
        self.assert_right_output(r)
        with open(self.caches()[0]) as f:
            cache = json.load(f)
        return cache["entries"][0]["values"][0]["meta"]

    def test_hostile_user_meta_is_one_error(self):
        tensor = lambda **t: {"kind": "Tensor", "tensors": [dict(dtype="float32", **t)]}
        cases = [
            (tensor(sizes=[1000000000, 1000000]), "needs more than 64 GiB"),
            (tensor(sizes=[-1, 2 ** 62]), "needs more than 64 GiB"),
            (tensor(sizes=[-5, 64]), "negative size -5"),
            (tensor(sizes=[2] * 65), "too many dimensions"),
            ({"kind": "Tensor", "tensors": [{"dtype": "qint8", "sizes": [1]}]},
             "unknown dtype"),
            ({"kind": "int[]", "length": 2 ** 40}, "int[] length"),
            ("[" * 50000 + "]" * 50000, "nests deeper than 256 levels"),
        ]
        for meta, text in cases:
            with self.subTest(text=text):
                r, _ = self.run_unchecked("--input-meta", self.write_user_meta(meta))
                self.assert_one_error(r, text)

    def test_hostile_cache_is_reinferred(self):
        self.boundary()
        cases = [
            lambda m: m["tensors"][0].update(sizes=[1000000000, 1000000]),
            lambda m: m["tensors"][0].update(sizes=[-1, 2 ** 62]),
            lambda m: m["tensors"][0].update(dtype="float8"),
            lambda m: m.update(kind="int"),
        ]
        for n, edit in enumerate(cases):
            with self.subTest(case=n):
                self.edit_cache(self.caches()[1], edit)
                r, stats = self.run_unchecked()
                self.assert_right_output(r)
                self.assertIn("inferring shapes", r.stderr)
                self.assertEqual(set(stats.values()), {"inferred"}, r.stdout)
        with open(self.caches()[1], "w") as f:
            f.write("[" * 50000 + "]" * 50000)
        r, stats = self.run_unchecked()
        self.assert_right_output(r)
        self.assertIn("nests deeper than 256 levels", r.stderr)
        self.assertEqual(set(stats.values()), {"inferred"}, r.stdout)

    def test_cache_wrong_on_one_rank(self):
        meta = self.boundary()
        files = self.caches()
        good = [read_bytes(f) for f in files]
        # Valid, checksummed, and wrong on the consumer only: Gloo would abort
        # receiving 64 columns into a buffer of 63.
        self.edit_cache(files[1], lambda m: m["tensors"][0]["sizes"].__setitem__(
            1, meta["tensors"][0]["sizes"][1] - 1))
        r, stats = self.run_unchecked()
        self.assert_right_output(r)
        self.assertIn("disagree on stage 0 -> 1; inferring shapes", r.stderr)
        self.assertEqual(set(stats.values()), {"inferred"}, r.stdout)
        # Every rank rewrote its cache; the next run uses it again.
        self.assertEqual([json.loads(read_bytes(f)) for f in files],
                         [json.loads(g) for g in good])
        r, stats = self.run_unchecked()
        self.assert_right_output(r)
        self.assertEqual(set(stats.values()), {"cache"}, r.stdout)

    def test_cache_edited_alike_on_all_ranks(self):
        meta = self.boundary()
        files = self.caches()
        wrong = lambda m: m["tensors"][0]["sizes"].__setitem__(
            1, meta["tensors"][0]["sizes"][1] + 1)
        # An edit by hand (no new checksum): every rank infers.
        for f in files:
            self.edit_cache(f, wrong, checksum=False)
        r, stats = self.run_unchecked()
        self.assert_right_output(r)
        self.assertIn("entries do not match 'entries_sha256'", r.stderr)
        self.assertEqual(set(stats.values()), {"inferred"}, r.stdout)
        # A forged checksum passes the agreement; the producing stage's check
        # stops it before any value is sent, and the next run infers.
        for f in files:
            self.edit_cache(f, wrong)
        r, _ = self.run_unchecked()
        self.assert_one_error(r, "stage 0 output 0")
        self.assertIn("is wrong; it was removed; run again to infer", r.stderr)
        r, stats = self.run_unchecked()
        self.assert_right_output(r)
        self.assertEqual(set(stats.values()), {"inferred"}, r.stdout)

    def test_output_may_not_replace_what_the_run_reads(self):
        self.boundary()
        protected = {
            "the input file": self.input,
            "the manifest": self.manifest,
            "the file of stage 1": os.path.join(self.dir, "stage_1.pt"),
            "a meta cache file": self.caches()[0],
        }
        for what, path in protected.items():
            with self.subTest(what=what):
                before = read_bytes(path)
                # The same file under another spelling counts too.
                spelled = os.path.join(os.path.dirname(path), ".", os.path.basename(path))
                r, _ = self.run_unchecked(output=spelled)
                self.assert_one_error(r, f"is {what}; refusing to overwrite it")
                self.assertEqual(read_bytes(path), before)


if __name__ == "__main__":
    unittest.main()
