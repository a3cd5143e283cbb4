#!/usr/bin/python3
"""Tests the meta cache of `ppc run`, user-given metadata and --print-schedule.

A second identical run must take its metadata from the cache on every rank
and send no metadata messages (read from --stats); deleting or corrupting
one rank's cache file makes every rank infer again; a new input shape adds
an entry; --no-meta-cache and --meta-cache DIR do what they say.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import torch

PPC = os.environ.get("PPC", "build/bin/ppc")
MODELS = os.environ.get("PPC_MODELS_DIR", "build/models")
STATS = re.compile(r"stats: rank=(\d+) meta=(\w+) meta_messages_sent=(\d+) "
                   r"messages_sent=(\d+) first_output_ms=([\d.]+) total_ms=([\d.]+) "
                   r"cache_written=(\d)")


class RunCacheTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ppc-run-cache-")
        # two_io in 3 stages: a model input entering stage 1, a skip edge and
        # a model output from stage 0.
        self.out_dir = os.path.join(self.tmp, "two_io")
        with open(os.path.join(MODELS, "two_io.json")) as f:
            paths = json.load(f)["split_at"]["3"]
        r = subprocess.run([PPC, "split", os.path.join(MODELS, "two_io.pt"), "-o",
                            self.out_dir, "--split-at", ",".join(paths)],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.manifest = os.path.join(self.out_dir, "manifest.json")
        self.input = os.path.join(MODELS, "two_io.input.pt")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_pipeline(self, *extra, inp=None, ranks=3, ok=True):
        out = os.path.join(self.tmp, "out.pt")
        if os.path.exists(out):
            os.remove(out)
        cmd = [PPC, "launch", "--nproc-per-node", str(ranks), "--master-port", "0", "--",
               PPC, "run", self.manifest, "--input", inp or self.input, "--output", out,
               "--microbatches", "3", "--stats", "--timeout", "60"] + list(extra)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if ok:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        stats = {int(m.group(1)): m.groups()[1:] for m in STATS.finditer(r.stdout)}
        if ok:
            self.assertEqual(sorted(stats), list(range(ranks)), r.stdout)
        return r, stats, (torch.load(out) if ok else None)

    def sources(self, stats):
        return {s[0] for s in stats.values()}

    def meta_messages(self, stats):
        return sum(int(s[1]) for s in stats.values())

    def test_second_run_uses_cache(self):
        r1, s1, out1 = self.run_pipeline()
        self.assertEqual(self.sources(s1), {"inferred"})
        self.assertGreater(self.meta_messages(s1), 0)
        self.assertIn("warning: no meta cache at", r1.stderr)
        files = sorted(glob.glob(os.path.join(self.out_dir, "meta_cache.rank*of3.json")))
        self.assertEqual(len(files), 3)

        r2, s2, out2 = self.run_pipeline()
        self.assertEqual(self.sources(s2), {"cache"})
        self.assertEqual(self.meta_messages(s2), 0)
        self.assertNotIn("warning", r2.stderr)
        for a, b in zip(out1, out2):
            self.assertTrue(torch.equal(a, b))
        expected = torch.load(os.path.join(MODELS, "two_io.expected.pt"))
        for a, b in zip(expected, out2):
            self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-5))

    def test_deleted_or_corrupt_cache_makes_all_ranks_infer(self):
        self.run_pipeline()
        rank1 = os.path.join(self.out_dir, "meta_cache.rank1of3.json")
        os.remove(rank1)
        r, s, _ = self.run_pipeline()
        self.assertEqual(self.sources(s), {"inferred"})
        self.assertIn("no meta cache at '%s'" % rank1, r.stderr)
        _, s, _ = self.run_pipeline()
        self.assertEqual(self.sources(s), {"cache"})

        with open(rank1, "r+b") as f:  # corrupt one byte in the middle
            data = bytearray(f.read())
            data[len(data) // 2] = ord("}")
            f.seek(0)
            f.write(data)
        r, s, out = self.run_pipeline()
        self.assertEqual(self.sources(s), {"inferred"})
        self.assertRegex(r.stderr, r"warning: meta cache '.*rank1of3.json' is corrupt")
        _, s, _ = self.run_pipeline()
        self.assertEqual(self.sources(s), {"cache"})

    def test_new_input_shape_adds_an_entry(self):
        self.run_pipeline()
        rank0 = os.path.join(self.out_dir, "meta_cache.rank0of3.json")
        with open(rank0) as f:
            before = len(json.load(f)["entries"])
        self.assertEqual(before, 2)  # batch 5 in 3: rows 2, 2, 1
        x, y = torch.load(self.input)
        bigger = os.path.join(self.tmp, "bigger.pt")
        torch.save((torch.cat([x, x]), torch.cat([y, y])), bigger)  # rows 4, 3, 3
        _, s, _ = self.run_pipeline(inp=bigger)
        self.assertEqual(self.sources(s), {"inferred"})
        with open(rank0) as f:
            self.assertEqual(len(json.load(f)["entries"]), 4)
        _, s, _ = self.run_pipeline()
        self.assertEqual(self.sources(s), {"cache"})
        _, s, _ = self.run_pipeline(inp=bigger)
        self.assertEqual(self.sources(s), {"cache"})

    def test_no_meta_cache_and_cache_dir(self):
        _, s, _ = self.run_pipeline("--no-meta-cache")
        self.assertEqual(self.sources(s), {"inferred"})
        self.assertEqual({v[5] for v in s.values()}, {"0"})
        self.assertEqual(glob.glob(os.path.join(self.out_dir, "meta_cache*")), [])
        cache_dir = os.path.join(self.tmp, "cache")
        self.run_pipeline("--meta-cache", cache_dir)
        self.assertEqual(len(glob.glob(os.path.join(cache_dir, "meta_cache*"))), 3)
        _, s, _ = self.run_pipeline("--meta-cache", cache_dir)
        self.assertEqual(self.sources(s), {"cache"})

    def test_stale_cache_after_manifest_change(self):
        self.run_pipeline()
        # Any change to the manifest changes its hash.
        with open(self.manifest) as f:
            m = json.load(f)
        m["cost_model"] = m["cost_model"] + " "
        with open(self.manifest, "w") as f:
            json.dump(m, f)
        r, s, _ = self.run_pipeline()
        self.assertEqual(self.sources(s), {"inferred"})
        self.assertIn("is stale (the manifest changed)", r.stderr)

    def test_user_meta(self):
        with open(self.manifest) as f:
            m = json.load(f)
        # Take the shapes from an inferred run's cache, leaving the batch open.
        self.run_pipeline()
        metas = {}
        for path in glob.glob(os.path.join(self.out_dir, "meta_cache.rank*of3.json")):
            with open(path) as f:
                for v in json.load(f)["entries"][0]["values"]:
                    for t in v["meta"].get("tensors", []):
                        t["sizes"][0] = -1
                        del t["strides"]
                    metas[(v["stage"], v["output"])] = v["meta"]
        user = {"stages": [{"outputs": [metas[(s, o)] for o in range(len(st["outputs"]))]}
                           for s, st in enumerate(m["stages"])]}
        path = os.path.join(self.tmp, "meta.json")
        with open(path, "w") as f:
            json.dump(user, f)
        _, s, out = self.run_pipeline("--input-meta", path)
        self.assertEqual(self.sources(s), {"user"})
        self.assertEqual(self.meta_messages(s), 0)

        # A wrong user shape is caught where the value is produced.
        user["stages"][0]["outputs"][0]["tensors"][0]["sizes"][1] += 1
        with open(path, "w") as f:
            json.dump(user, f)
        r, _, _ = self.run_pipeline("--input-meta", path, ok=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr, r"error: stage 0 output 0 \('.*'\) of microbatch 0: "
                                   r"expected float32\[2,\d+\], got float32\[2,\d+\]")

    def test_print_schedule(self):
        r, _, _ = self.run_pipeline("--print-schedule", "--schedule", "gpipe")
        lines = [l for l in r.stdout.splitlines() if "schedule: rank=1 " in l]
        self.assertIn("[rank 1] schedule: rank=1 0 RECV_F 0->1 mb=0 from=0", lines)
        self.assertTrue(any(" F stage=1 mb=2" in l for l in lines))


if __name__ == "__main__":
    unittest.main()
