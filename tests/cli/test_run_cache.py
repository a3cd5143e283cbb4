#!/usr/bin/python3
"""Tests the meta cache of `ppc run`, user-given metadata and --print-schedule.

A second identical run must take its metadata from the cache on every rank
and send no metadata messages (read from --stats); deleting or corrupting
one rank's cache file makes every rank infer again; a new input shape adds
an entry; --no-meta-cache and --meta-cache DIR do what they say; metadata
written by hand in docs/runtime.md's format is used as given. Every run that
succeeds must reproduce the unsplit model's output.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import glob
import json
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (assert_identical, assert_rank_error, expected_output, main,  # noqa: E402
                    model_path, run_pipeline, split_at, tensor_meta, tmpdir, unsplit_output)

NAME = "two_io"


# two_io (tests/models/make_models.py) split at c, b: stage 0 runs `a`
# (Linear 16->32, ReLU, Linear 32->32, ReLU) and `a_head` (32->4), stage 1
# runs `c` (32->32), stage 2 runs `b` on y and `mix` (Bilinear to 6). Written
# from the model, not from anything ppc wrote.
USER_META = {"stages": [
    {"outputs": [tensor_meta(-1, 32),    # ha, to stage 1
                 tensor_meta(-1, 4)]},   # aux, model output 1
    {"outputs": [tensor_meta(-1, 32)]},  # hc, to stage 2
    {"outputs": [tensor_meta(-1, 6)]},   # mix(hc, b(y)), model output 0
]}


class RunCacheTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)
        # two_io in 3 stages: a model input entering stage 2, a skip edge and
        # a model output from stage 0.
        self.out_dir = os.path.join(self.tmp, "two_io")
        self.manifest = split_at(NAME, 3, self.out_dir)
        self.input = model_path(NAME, ".input.pt")

    def run_cached(self, *extra, inp=None, ranks=3, ok=True, expected=None):
        """Runs the split on `ranks` ranks; when `ok`, checks it succeeded on
        every rank and that its output is the unsplit model's (`expected`,
        default NAME.expected.pt). Returns (process, stats, output)."""
        return run_pipeline(self, self.manifest, ranks, inp or self.input,
                            os.path.join(self.tmp, "out.pt"), *extra, fails=not ok,
                            expected=expected_output(NAME) if expected is None else expected)

    def sources(self, stats):
        return {s[0] for s in stats.values()}

    def meta_messages(self, stats):
        return sum(int(s[1]) for s in stats.values())

    def cache_file(self, rank):
        return os.path.join(self.out_dir, "meta_cache.rank%dof3.json" % rank)

    def test_second_run_uses_cache(self):
        r1, s1, out1 = self.run_cached()
        self.assertEqual(self.sources(s1), {"inferred"})
        self.assertGreater(self.meta_messages(s1), 0)
        # The normal first run: one note, from rank 0, and no warning.
        self.assertEqual(r1.stderr.count("note: no meta cache at"), 1, r1.stderr)
        self.assertIn("[rank 0] note: no meta cache at '%s'; inferring shapes" %
                      self.cache_file(0), r1.stderr)
        self.assertNotIn("warning", r1.stderr)
        files = sorted(glob.glob(os.path.join(self.out_dir, "meta_cache.rank*of3.json")))
        self.assertEqual(files, [self.cache_file(r) for r in range(3)])

        r2, s2, out2 = self.run_cached()
        self.assertEqual(self.sources(s2), {"cache"})
        self.assertEqual(self.meta_messages(s2), 0)
        self.assertNotIn("warning", r2.stderr)
        assert_identical(self, out1, out2)

    def test_deleted_or_corrupt_cache_makes_all_ranks_infer(self):
        self.run_cached()
        rank1 = self.cache_file(1)
        os.remove(rank1)
        r, s, _ = self.run_cached()
        self.assertEqual(self.sources(s), {"inferred"})
        # One file missing beside complete ones is not the normal path: that
        # rank warns.
        self.assertIn("[rank 1] warning: no meta cache at '%s'; inferring shapes" % rank1,
                      r.stderr)
        _, s, _ = self.run_cached()
        self.assertEqual(self.sources(s), {"cache"})

        with open(rank1, "r+b") as f:  # corrupt one byte in the middle
            data = bytearray(f.read())
            data[len(data) // 2] = ord("}")
            f.seek(0)
            f.write(data)
        r, s, _ = self.run_cached()
        self.assertEqual(self.sources(s), {"inferred"})
        self.assertRegex(r.stderr, r"warning: meta cache '.*rank1of3.json' is corrupt "
                                   r"\(.*\); inferring shapes")
        _, s, _ = self.run_cached()
        self.assertEqual(self.sources(s), {"cache"})

    def test_new_input_shape_adds_an_entry(self):
        self.run_cached()
        with open(self.cache_file(0)) as f:
            self.assertEqual(len(json.load(f)["entries"]), 2)  # batch 5 in 3: rows 2, 2, 1
        x, y = torch.load(self.input)
        bigger_input = (torch.cat([x, x.flip(0)]), torch.cat([y, y.flip(0)]))  # rows 4, 3, 3
        bigger = os.path.join(self.tmp, "bigger.pt")
        torch.save(bigger_input, bigger)
        bigger_expected = unsplit_output(NAME, bigger_input)
        _, s, _ = self.run_cached(inp=bigger, expected=bigger_expected)
        self.assertEqual(self.sources(s), {"inferred"})
        with open(self.cache_file(0)) as f:
            self.assertEqual(len(json.load(f)["entries"]), 4)
        _, s, _ = self.run_cached()
        self.assertEqual(self.sources(s), {"cache"})
        _, s, _ = self.run_cached(inp=bigger, expected=bigger_expected)
        self.assertEqual(self.sources(s), {"cache"})

    def test_no_meta_cache_and_cache_dir(self):
        _, s, _ = self.run_cached("--no-meta-cache")
        self.assertEqual(self.sources(s), {"inferred"})
        self.assertEqual({v[5] for v in s.values()}, {"0"})
        self.assertEqual(glob.glob(os.path.join(self.out_dir, "meta_cache*")), [])
        cache_dir = os.path.join(self.tmp, "cache")
        self.run_cached("--meta-cache", cache_dir)
        self.assertEqual(len(glob.glob(os.path.join(cache_dir, "meta_cache*"))), 3)
        _, s, _ = self.run_cached("--meta-cache", cache_dir)
        self.assertEqual(self.sources(s), {"cache"})

    def test_stale_cache_after_manifest_change(self):
        self.run_cached()
        # Any change to the manifest changes its hash.
        with open(self.manifest) as f:
            m = json.load(f)
        m["cost_model"] = m["cost_model"] + " "
        with open(self.manifest, "w") as f:
            json.dump(m, f)
        r, s, _ = self.run_cached()
        self.assertEqual(self.sources(s), {"inferred"})
        # Every rank's cache is outdated by the edit: routine, one note.
        self.assertIn("[rank 0] note: meta cache '%s' is stale (the manifest changed); "
                      "inferring shapes" % self.cache_file(0), r.stderr)
        self.assertNotIn("warning", r.stderr)

    def check_manifest_shape(self):
        """The split USER_META describes: output counts and consumers; returns
        the stages."""
        with open(self.manifest) as f:
            stages = json.load(f)["stages"]
        self.assertEqual([[o["consumers"] for o in s["outputs"]] for s in stages],
                         [[[1], []], [[2]], [[]]])
        return stages

    def test_user_meta_replaces_inference_and_the_cache(self):
        ha = self.check_manifest_shape()[0]["outputs"][0]["name"]
        path = os.path.join(self.tmp, "meta.json")
        with open(path, "w") as f:
            json.dump(USER_META, f)
        _, s, _ = self.run_cached("--input-meta", path)
        self.assertEqual(self.sources(s), {"user"})
        self.assertEqual(self.meta_messages(s), 0)
        self.assertEqual({v[5] for v in s.values()}, {"0"})  # no cache written
        self.assertEqual(glob.glob(os.path.join(self.out_dir, "meta_cache*")), [])

        # A wrong user shape is caught where the value is produced.
        wrong = json.loads(json.dumps(USER_META))
        wrong["stages"][0]["outputs"][0]["tensors"][0]["sizes"] = [-1, 33]
        with open(path, "w") as f:
            json.dump(wrong, f)
        r, _, _ = self.run_cached("--input-meta", path, ok=False)
        self.assertNotEqual(r.returncode, 0)
        # Rank 0 makes stage 0's output 0, rank 1 receives it: either may say so first.
        assert_rank_error(self, r.stdout + r.stderr, "stage 0 output 0 ('%s') of microbatch 0: "
                          "expected float32[2,33], got float32[2,32]" % ha, (0, 1))

    def test_print_schedule_lists_each_ranks_actions(self):
        r, _, _ = self.run_cached("--print-schedule", "--schedule", "gpipe")
        lines = [l for l in r.stdout.splitlines() if "schedule: rank=1 " in l]
        self.assertIn("[rank 1] schedule: rank=1 0 RECV_F 0->1 mb=0 from=0", lines)
        self.assertTrue(any(" F stage=1 mb=2" in l for l in lines))


if __name__ == "__main__":
    main()
