#!/usr/bin/python3
"""Tests the start-up agreement (runtime/link/Agreement.h): ranks started
with different options or data fail at the rendezvous, at once and well
before --timeout, every rank with the same line naming the first difference
(rank 0 against rank 1, 2, ... in order), and write nothing.

The ranks are started by hand (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
each with arguments of its own, since ppc launch gives every rank the same:
  - ppc train: --weight-decay (AdamW's default shown as 0.01),
    --microbatches, --eval-data on one rank only, --data-parallel 1 on two
    of four ranks and 2 on the others, --data with other contents of the
    same shapes, --checkpoint-dir on one rank only (no checkpoint, no
    --save output); data of the same contents under another path agrees;
  - ppc run: --input with other contents (no --output written), --repeat,
    PPC_COALESCE (the messages' layout) over Gloo.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import shutil
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, ClassTmpTest, finish, free_port, main, model_path, rank_env,  # noqa: E402
                    start_ranks)
from training import split_under, write_data  # noqa: E402

# Every failing case must end well before this (seconds).
RANK_TIMEOUT = 60
FAST = 15

M64 = (1 << 64) - 1
P1, P2, P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
P4, P5 = 9650029242287828579, 2870177450012600261


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M64, 31) * P1) & M64


def xxh64(data):
    """XXH64 with seed 0 (llvm::xxHash64), for the expected lines."""
    n, i = len(data), 0
    u64 = lambda at: int.from_bytes(data[at:at + 8], "little")  # noqa: E731
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        while i + 32 <= n:
            v = [_round(v[k], u64(i + 8 * k)) for k in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for lane in v:
            h = (((h ^ _round(0, lane)) * P1) + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while i + 8 <= n:
        h = ((_rotl(h ^ _round(0, u64(i)), 27) * P1) + P4) & M64
        i += 8
    if i + 4 <= n:
        h = ((_rotl(h ^ (int.from_bytes(data[i:i + 4], "little") * P1 & M64), 23) * P2) + P3) & M64
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * P5 & M64), 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def digest(path):
    """How the error shows a file: "PATH (xxh64 HEX, N bytes)"."""
    with open(path, "rb") as f:
        data = f.read()
    return "%s (xxh64 %016x, %d bytes)" % (path, xxh64(data), len(data))


class AgreementTest(ClassTmpTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.manifest = split_under(cls.tmp, "mlp", 2)
        cls.manifest4 = split_under(cls.tmp, "mlp", 4)
        cls.data = os.path.join(cls.tmp, "data.pt")
        cls.inputs, cls.target = write_data(cls.data, "mlp", "cross_entropy")
        # The same shapes, another target.
        cls.other_data = os.path.join(cls.tmp, "other.pt")
        torch.save((cls.inputs[0], cls.target.flip(0)), cls.other_data)

    def start_ranks_timed(self, command, world, args, rank_args, rank_envs=None):
        """Starts `ppc COMMAND ARGS RANK_ARGS[r]` on each of WORLD ranks, with
        RANK_ENVS[r] added to rank r's environment; returns [(rc, out, err)]
        and the seconds they took."""
        port = free_port()
        began = time.monotonic()
        procs = [subprocess.Popen([PPC, command, *map(str, args),
                                   *map(str, rank_args.get(r, []))],
                                  env=rank_env(r, world, port, **(rank_envs or {}).get(r, {})),
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for r in range(world)]
        results = finish(procs, timeout=RANK_TIMEOUT + 30)
        return results, time.monotonic() - began

    def train_with_rank_args(self, rank_args, world=2, manifest=None, args=()):
        """`ppc train` on WORLD ranks, each with --data DATA unless its
        RANK_ARGS give one."""
        rank_args = {r: ([] if "--data" in rank_args.get(r, []) else ["--data", self.data])
                     + rank_args.get(r, []) for r in range(world)}
        return self.start_ranks_timed("train", world,
                                      [manifest or self.manifest, "--loss", "cross_entropy",
                                       "--timeout",
                           RANK_TIMEOUT, *args], rank_args)

    def assert_disagree(self, ran, line):
        """Every rank exits 2 with LINE as its only error line, within FAST
        seconds, and prints no step."""
        results, seconds = ran
        for rank, (rc, out, err) in enumerate(results):
            self.assertEqual(rc, 2, "rank %d: %s" % (rank, err))
            errors = [e for e in err.splitlines() if e.startswith("error:")]
            self.assertEqual(errors, ["error: " + line], "rank %d: %s" % (rank, err))
            self.assertNotIn("step", out)
        self.assertLess(seconds, FAST, "the ranks took %.1f s to disagree" % seconds)

    def test_ranks_disagreeing_on_weight_decay_stop(self):
        self.assert_disagree(
            self.train_with_rank_args({1: ["--weight-decay", "0.001"]}, args=("--optimizer",
                                                                              "adamw")),
            "ranks disagree on --weight-decay: rank 0 has 0.01, rank 1 has 0.001")

    def test_ranks_disagreeing_on_microbatches_stop(self):
        self.assert_disagree(
            self.train_with_rank_args({0: ["--microbatches", "2"], 1: ["--microbatches", "3"]}),
            "ranks disagree on --microbatches: rank 0 has 2, rank 1 has 3")

    def test_eval_data_on_one_rank(self):
        self.assert_disagree(
            self.train_with_rank_args({1: ["--eval-data", self.data]}),
            "ranks disagree on --eval-data: rank 0 has none, rank 1 has " + digest(self.data))

    def test_data_parallel_on_some_ranks(self):
        # Ranks 0 and 1 would run one pipeline of 4 ranks, ranks 2 and 3 two
        # replicas of 2: their rank groups differ, and would never connect.
        dp = ["--data-parallel", "2"]
        self.assert_disagree(
            self.train_with_rank_args({2: dp, 3: dp}, world=4, manifest=self.manifest4),
            "ranks disagree on --data-parallel: rank 0 has 1, rank 2 has 2")

    def test_data_of_other_contents(self):
        self.assert_disagree(
            self.train_with_rank_args({1: ["--data", self.other_data]}),
            "ranks disagree on --data: rank 0 has %s, rank 1 has %s"
            % (digest(self.data), digest(self.other_data)))

    def test_same_contents_under_another_path_agree(self):
        copy = self.tmp_path("copy.pt")
        shutil.copyfile(self.data, copy)
        results, _ = self.train_with_rank_args({1: ["--data", copy]})
        for rank, (rc, out, err) in enumerate(results):
            self.assertEqual(rc, 0, "rank %d: %s" % (rank, err))

    def test_checkpoint_dir_on_one_rank_writes_nothing(self):
        checkpoints, saved = self.tmp_path("ck"), self.tmp_path("saved")
        self.assert_disagree(
            self.train_with_rank_args({0: ["--checkpoint-dir", checkpoints]}, args=("--save",
                                                                                    saved)),
            "ranks disagree on --checkpoint-dir: rank 0 has %s, rank 1 has none"
            % checkpoints)
        self.assertFalse(os.path.exists(saved))
        self.assertEqual(os.listdir(checkpoints) if os.path.exists(checkpoints) else [], [])

    def run_ranks(self, output, rank_args, args=()):
        return self.start_ranks_timed("run", 2, [self.manifest, "--output", output, "--timeout",
                                                 RANK_TIMEOUT, *args], rank_args)

    def test_run_inputs_of_other_contents(self):
        first, second = self.tmp_path("in0.pt"), self.tmp_path("in1.pt")
        x = torch.load(model_path("mlp", ".input.pt"))
        torch.save(x, first)
        torch.save(x.flip(0), second)
        output = self.tmp_path("run_out.pt")
        self.assert_disagree(
            self.run_ranks(output, {0: ["--input", first], 1: ["--input", second]}),
            "ranks disagree on --input: rank 0 has %s, rank 1 has %s"
            % (digest(first), digest(second)))
        self.assertFalse(os.path.exists(output))

    def test_ranks_with_other_message_layouts_stop_at_the_agreement(self):
        # Tests that ranks whose messages have other layouts (PPC_COALESCE=0 on rank 1: each of
        # the `values` edge's ten wire tensors is its own message, where rank 0 sends one) stop
        # at the agreement with one line, over Gloo, where rank 1 used to abort in Gloo on a
        # receive of the wrong size.
        manifest = split_under(self.tmp, "values", 2)
        output = self.tmp_path("coalesce_out.pt")
        self.assert_disagree(
            self.start_ranks_timed("run", 2, [manifest, "--input", model_path("values",
                                                                              ".input.pt"),
                                  "--output", output, "--link", "gloo", "--timeout",
                                  RANK_TIMEOUT], {}, rank_envs={1: {"PPC_COALESCE": "0"}}),
            "ranks disagree on PPC_COALESCE: rank 0 has 1, rank 1 has 0")
        self.assertFalse(os.path.exists(output))

    def test_ranks_disagreeing_on_repeat_stop_without_output(self):
        output = self.tmp_path("repeat_out.pt")
        self.assert_disagree(
            self.run_ranks(output, {1: ["--repeat", "3"]},
                           args=("--input", model_path("mlp", ".input.pt"))),
            "ranks disagree on --repeat: rank 0 has 1, rank 1 has 3")
        self.assertFalse(os.path.exists(output))


if __name__ == "__main__":
    main()
