#!/usr/bin/python3
"""Tests the shared-memory link (--link, PPC_LINK; runtime/link/ShmLink.cpp):

- `ppc run` and `ppc train` give bit-identical outputs and losses over
  `--link shm` and `--link gloo` (several models, 2 and 4 ranks, gpipe and
  1f1b), and `--stats` names the link each rank used;
- a rank SIGKILLed in the middle of a long run over shared memory gives the
  other a one-line "lost rank 1 (...)" error well within --timeout, and
  leaves nothing in /dev/shm;
- `--link shm` with a rank on another host is refused in one line naming
  it (hosts told apart by PPC_HOST_ID, which replaces the host identity),
  while `--link auto` then falls back to Gloo;
- PPC_LINK sets the default, and a bad value is a one-line error.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import re
import signal
import subprocess
import sys
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, assert_identical, class_tmpdir, finish, free_port, launch,  # noqa: E402
                    main, model_path, rank_env, split_at, start_ranks)
from training import LOSS, split_under, train, write_data  # noqa: E402

LINK = re.compile(r"^(?:\[rank \d+\] )?stats: rank=(\d+) .* link=(\S+)", re.M)


def links(text):
    """{rank: link} from `--stats` lines."""
    return {int(m.group(1)): m.group(2) for m in LINK.finditer(text)}


def shm_listing():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


class ShmLinkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.dirs = {}

    def split_once(self, name, stages):
        key = (name, stages)
        if key not in self.dirs:
            out = os.path.join(self.tmp, "%s.%d" % key)
            split_at(name, stages, out)
            self.dirs[key] = out
        return os.path.join(self.dirs[key], "manifest.json")

    def run_model(self, name, stages, ranks, link, *extra, env=None):
        out = os.path.join(self.tmp, "%s.%d.%d.%s.pt" % (name, stages, ranks, link))
        proc = launch(ranks, "run", self.split_once(name, stages), "--input",
                      model_path(name, ".input.pt"), "--output", out, "--link", link,
                      "--stats", "--no-meta-cache", *extra, env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return torch.load(out), proc.stdout + proc.stderr

    def test_run_is_bitwise_equal_over_shm_and_gloo(self):
        for name, stages, ranks, schedule in [("mlp", 2, 2, "1f1b"), ("two_io", 2, 2, "gpipe"),
                                              ("resnet18", 4, 4, "1f1b"),
                                              ("resnet18", 4, 2, "gpipe")]:
            with self.subTest(name=name, stages=stages, ranks=ranks, schedule=schedule):
                args = ("--schedule", schedule, "--microbatches", "4")
                shm, shm_text = self.run_model(name, stages, ranks, "shm", *args)
                gloo, gloo_text = self.run_model(name, stages, ranks, "gloo", *args)
                assert_identical(self, shm, gloo)
                self.assertEqual(links(shm_text), {r: "shm" for r in range(ranks)}, shm_text)
                self.assertEqual(links(gloo_text), {r: "gloo" for r in range(ranks)},
                                 gloo_text)

    def test_train_losses_are_equal_over_shm_and_gloo(self):
        manifest = split_under(self.tmp, "mlp", 4)
        data = os.path.join(self.tmp, "mlp.data.pt")
        write_data(data, "mlp", LOSS["mlp"])
        runs = {}
        for link in ("shm", "gloo"):
            runs[link] = train(2, manifest, data, "--loss", LOSS["mlp"], "--lr", "0.05",
                               "--momentum", "0.9", "--steps", "5", "--microbatches", "4",
                               "--schedule", "1f1b", "--link", link, "--stats")
            self.assertEqual(runs[link].proc.returncode, 0, runs[link].output)
            self.assertEqual(len(runs[link].losses), 5, runs[link].output)
            # ppc train --stats names the link too (every step's line).
            self.assertEqual(set(links(runs[link].output).values()), {link},
                             runs[link].output)
        self.assertEqual(runs["shm"].losses, runs["gloo"].losses)

    def test_killed_rank_mid_transfer_is_named_and_leaves_no_shm(self):
        before = shm_listing()
        big = os.path.join(self.tmp, "big.pt")
        torch.manual_seed(0)
        torch.save(torch.randn(64, 3, 32, 32), big)
        args = [self.split_once("resnet18", 2), "--input", big, "--output",
                os.path.join(self.tmp, "killed.pt"), "--no-meta-cache", "--link", "shm",
                "--microbatches", "8", "--repeat", "100000", "--timeout", "60",
                "--print-schedule"]
        procs = start_ranks(2, args)
        line = procs[1].stdout.readline()
        self.assertTrue(line.startswith("schedule: "), line)
        time.sleep(1.5)  # well inside the stream of boundary tensors
        procs[1].send_signal(signal.SIGKILL)
        start = time.monotonic()
        code, _, err = finish(procs[:1], timeout=60)[0]
        elapsed = time.monotonic() - start
        finish(procs[1:])
        self.assertNotEqual(code, 0)
        self.assertLess(elapsed, 10, err)
        errors = [l for l in err.splitlines() if l.startswith("error: ")]
        self.assertEqual(len(errors), 1, err)
        self.assertRegex(errors[0], r"^error: (repeat \d+ of \d+: )?lost rank 1 \(it exited, ")
        self.assertEqual(shm_listing() - before, set())

    def test_shm_across_hosts_is_refused_and_auto_uses_gloo(self):
        manifest = self.split_once("mlp", 2)
        out = os.path.join(self.tmp, "hosts.pt")
        hosts = {0: {"PPC_HOST_ID": "host-a"}, 1: {"PPC_HOST_ID": "host-b"}}
        base = [manifest, "--input", model_path("mlp", ".input.pt"), "--output", out,
                "--no-meta-cache", "--timeout", "30", "--stats"]
        results = finish(start_ranks(2, base + ["--link", "shm"], env=hosts))
        for rank, (code, _, err) in enumerate(results):
            self.assertNotEqual(code, 0)
            self.assertEqual(err.strip().splitlines(),
                             ["error: --link shm needs every rank on one host, but rank %d "
                              "runs on another host than rank %d; use --link auto or "
                              "--link gloo" % (1 - rank, rank)], err)
        results = finish(start_ranks(2, base + ["--link", "auto"], env=hosts))
        self.assertEqual([r[0] for r in results], [0, 0], results)
        self.assertEqual(links(results[0][1] + results[1][1]), {0: "gloo", 1: "gloo"})

    def test_ppc_link_sets_the_default(self):
        env = dict(os.environ, PPC_LINK="gloo")
        _, text = self.run_model("mlp", 2, 2, "gloo", env=env)
        self.assertEqual(links(text), {0: "gloo", 1: "gloo"})
        # --link wins over PPC_LINK.
        out = os.path.join(self.tmp, "env.pt")
        proc = launch(2, "run", self.split_once("mlp", 2), "--input",
                      model_path("mlp", ".input.pt"), "--output", out, "--stats",
                      "--link", "shm", env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(links(proc.stdout), {0: "shm", 1: "shm"})

    def test_bad_ppc_link_is_one_line(self):
        proc = subprocess.run([PPC, "run", self.split_once("mlp", 2), "--input",
                               model_path("mlp", ".input.pt"), "--output",
                               os.path.join(self.tmp, "bogus.pt")],
                              capture_output=True, text=True, timeout=60,
                              env=rank_env(0, 1, free_port(), PPC_LINK="bogus"))
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr.splitlines(),
                         ["error: PPC_LINK 'bogus' is not a link: expected auto, gloo, shm "
                          "(--link overrides it)"])


if __name__ == "__main__":
    main()
