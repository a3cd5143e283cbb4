#!/usr/bin/python3
"""Tests that a given option is honoured or refused, never dropped: empty
path options are refused at parsing, an empty --schedule-csv file is read
(and refused) instead of running the default schedule, and training ranks
that were given different --data files fail at start-up instead of
training on mismatched pairs.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import re
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, class_tmpdir, finish, free_port, main, model_path, ppc,  # noqa: E402
                    rank_env, split_at)
from training import train, write_data  # noqa: E402


def rank_errors(text):
    return [l for l in text.splitlines() if re.match(r"(\[rank \d+\] )?error: ", l)]


class IgnoredRequestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.out = os.path.join(cls.tmp, "s")
        split_at("mlp", 2, cls.out)
        cls.manifest = os.path.join(cls.out, "manifest.json")
        cls.data = os.path.join(cls.tmp, "data.pt")
        write_data(cls.data, "mlp", "cross_entropy")

    def train_without_meta_cache(self, *args):
        return train(2, self.manifest, self.data, "--loss", "cross_entropy", "--no-meta-cache",
                     *args, rank_timeout=None, timeout=120)

    def test_empty_path_options_are_refused(self):
        m, d, i = self.manifest, self.data, model_path("mlp", ".input.pt")
        o = os.path.join(self.tmp, "o.pt")
        train = ["train", m, "--data", d]
        run = ["run", m, "--input", i, "--output", o]
        cases = {
            "--trace": train + ["--trace", ""], "--save": train + ["--save", ""],
            "--save-grads": train + ["--save-grads", ""],
            "--schedule-csv": train + ["--schedule-csv", ""],
            "--data": ["train", m, "--data", ""],
            "--meta-cache": run + ["--meta-cache", ""], "--input-meta": run + ["--input-meta", ""],
            "--output": ["run", m, "--input", i, "--output", ""],
            "--dot": ["inspect", m, "--dot", ""],
            "--csv": ["schedule", "--schedule", "1f1b", "--stages", "2", "--csv", ""],
            "--from-csv": ["schedule", "--from-csv", "", "--stages", "2"],
            "-o": ["join", m, "-o", ""],
            "manifest": ["inspect", ""],
        }
        for option, args in cases.items():
            with self.subTest(option):
                r = ppc(*args, check=False)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stdout, "")
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertRegex(lines[0], r"^error: .*: '' names no file or directory "
                                 rf"\(see ppc {args[0]} --help\)$")
                self.assertIn(option, lines[0])

    def test_empty_schedule_csv_file(self):
        empty = os.path.join(self.tmp, "empty.csv")
        open(empty, "w").close()
        r = self.train_without_meta_cache("--schedule-csv", empty)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertNotIn("step 1", r.stdout)
        errors = rank_errors(r.stderr)
        self.assertIn(f"error: schedule '{empty}' has 0 rows; expected one per rank (2)",
                      errors[0])

    def test_different_data_per_rank(self):
        other = os.path.join(self.tmp, "other.pt")
        x, y = torch.load(self.data)
        torch.save((x + 1, y), other)  # same shapes, other values
        port = free_port()
        procs = [subprocess.Popen([PPC, "train", self.manifest, "--data",
                                   self.data if rank == 0 else other, "--loss",
                                   "cross_entropy", "--no-meta-cache", "--timeout", "60"],
                                  env=rank_env(rank, 2, port), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
        for rc, out, err in finish(procs, timeout=120):
            self.assertEqual(rc, 2, err)
            self.assertNotIn("step 1", out)
            self.assertRegex(err, r"^error: ranks disagree on --data: rank 0 has %s \(xxh64 "
                             r"[0-9a-f]{16}, \d+ bytes\), rank 1 has %s \(xxh64 [0-9a-f]{16}, "
                             r"\d+ bytes\)\n$" % (re.escape(self.data), re.escape(other)))


if __name__ == "__main__":
    main()
