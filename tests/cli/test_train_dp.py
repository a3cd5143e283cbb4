#!/usr/bin/python3
"""Tests `ppc train --data-parallel D`: D replicas of a pipeline, each on its
slice of every batch, gradients summed over the replicas of each stage.

Against the unsplit model trained in Python on the whole batch with gradient
accumulation over the replicas' microbatches (training.reference_dp):
  - D=2 replicas x 2 stages on 4 ranks, and D=2 x (2 stages on one rank) on 2
    ranks, GPipe and 1F1B, the MLP (cross-entropy, 5 rows: uneven slices of 3
    and 2 rows): 10 SGD steps' losses within 1e-5 relative; the last step's
    gradients and the saved stages (replica 0's) match the reference's; the
    replicas' gradient files are bitwise equal and the replicas' weights_sha
    (--stats) equal after every step;
  - resnet18 (mse, BatchNorm) for one configuration, 3 steps;
  - the trace holds every job rank and the all-reduce's events;
  - the all-reduce overlapped with the backward (the default) and after the
    schedule (PPC_OVERLAP_ALLREDUCE=0) give bitwise the same losses,
    weights after every step, saved stages and gradients: the MLP under
    zb-h1, the decoder (tied embeddings) interleaved with two stages a rank;
  - errors: a D that does not divide WORLD_SIZE; a killed replica rank is
    named by its job rank within the timeout.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PPC, free_port, main, rank_env  # noqa: E402
from trace_format import assert_valid_trace  # noqa: E402
from training import (LOSS, STATS, MlpDataTest, read_grads, reference_dp, rel_diff,  # noqa: E402
                      resolve, split_under, stage_tensors, train, write_data)

LOSS_TOL = 1e-5
GRAD_TOL = 1e-5
# " ... replica=D allreduce_ms=X [peak_bytes=B] weights_sha=HEX" in the stats line.
DP_STATS = re.compile(r"stats: rank=(\d+) step=(\d+) .* replica=(\d+) "
                      r"allreduce_ms=([\d.]+) (?:peak_bytes=\d+ )?weights_sha=([0-9a-f]{16})")


class TrainDataParallelTest(MlpDataTest):
    def assert_replicas_agree(self, run, ranks, pipeline, steps):
        """Every step's weights_sha is the same on the replicas of each
        pipeline rank, and changes from step to step."""
        sha = {}
        for m in DP_STATS.finditer(run.proc.stdout):
            rank, step, replica = int(m.group(1)), int(m.group(2)), int(m.group(3))
            self.assertEqual(replica, rank // pipeline)
            sha[(rank, step)] = m.group(5)
        self.assertEqual(len(sha), ranks * steps, run.output)
        for step in range(1, steps + 1):
            for r in range(pipeline):
                got = {sha[(d * pipeline + r, step)] for d in range(ranks // pipeline)}
                self.assertEqual(len(got), 1, "step %d, pipeline rank %d: %s" % (step, r, got))
                if step > 1:
                    self.assertNotEqual(sha[(r, step)], sha[(r, step - 1)])

    def assert_replica_grads_equal(self, grads, ranks, pipeline):
        """The replicas of each pipeline rank wrote bitwise-equal gradients."""
        for g in range(pipeline, ranks):
            mine = torch.load(os.path.join(grads, "grads.rank%d.pt" % g))
            first = torch.load(os.path.join(grads, "grads.rank%d.pt" % (g % pipeline)))
            self.assertEqual(set(mine), set(first))
            for key in mine:
                self.assertTrue(torch.equal(mine[key], first[key]), "rank %d: %s" % (g, key))

    def check_mlp(self, ranks, schedule, trace=None):
        steps, microbatches, lr = 10, 2, 0.1
        pipeline = ranks // 2
        want, ref = reference_dp("mlp", self.mlp_inputs, self.mlp_target, steps, 2,
                                 microbatches, "cross_entropy", lr)
        tag = "%d.%s" % (ranks, schedule)
        grads, saved = self.tmp_path("grads." + tag), self.tmp_path("saved." + tag)
        stats_json = self.tmp_path("stats.%s.json" % tag)
        os.makedirs(grads)
        extra = ("--trace", trace) if trace else ()
        run = train(ranks, split_under(self.tmp, "mlp", 2), self.mlp_data, "--loss",
                    "cross_entropy", "--data-parallel", 2, "--schedule", schedule,
                    "--microbatches", microbatches, "--steps", steps, "--lr", lr,
                    "--no-meta-cache", "--stats", "--stats-json", stats_json,
                    "--save-grads", grads, "--save", saved, *extra)
        self.assertEqual(run.proc.returncode, 0, run.output)
        # The loss of the whole batch, printed once (replica 0's loss rank).
        self.assertEqual(len(run.losses), steps, run.output)
        for step, (a, b) in enumerate(zip(run.losses, want), 1):
            self.assertLessEqual(abs(a - b), LOSS_TOL * abs(b), "step %d: %s vs %s"
                                 % (step, run.losses, want))
        self.assert_replicas_agree(run, ranks, pipeline, steps)
        self.assert_replica_grads_equal(grads, ranks, pipeline)
        for path, g in read_grads(grads, ranks).items():
            self.assertLessEqual(rel_diff(g, resolve(ref, path).grad), GRAD_TOL, path)
        for path, values in stage_tensors(saved).items():
            for v in values:
                self.assertLessEqual(rel_diff(v, resolve(ref, path)), GRAD_TOL, path)
        with open(stats_json) as f:
            doc = json.load(f)
        self.assertEqual((doc["data_parallel"], doc["world_size"], len(doc["steps"])),
                         (2, ranks, steps))
        self.assertEqual([s["samples"] for s in doc["steps"]], [5] * steps)
        return run

    def test_mlp_two_stages_four_ranks(self):
        for schedule in ("gpipe", "1f1b"):
            with self.subTest(schedule=schedule):
                trace = self.tmp_path("trace.%s.json" % schedule)
                self.check_mlp(4, schedule, trace=trace)
                events = assert_valid_trace(self, trace)["traceEvents"]
                complete = [e for e in events if e.get("ph") == "X"]
                self.assertEqual({e["pid"] for e in complete}, {0, 1, 2, 3})
                reduce_ranks = {e["pid"] for e in complete if e["name"] == "ALLREDUCE"}
                self.assertEqual(reduce_ranks, {0, 1, 2, 3})
                # One bucket per stage and step on every rank (the MLP is small).
                self.assertEqual(sum(e["name"] == "ALLREDUCE" for e in complete), 4 * 10)

    def test_mlp_two_stages_on_one_rank_each_replica(self):
        for schedule in ("gpipe", "1f1b"):
            with self.subTest(schedule=schedule):
                self.check_mlp(2, schedule)

    def test_resnet18_four_ranks(self):
        data = self.tmp_path("resnet18.data.pt")
        inputs, target = write_data(data, "resnet18", "mse")
        steps, lr = 3, 0.01
        want, _ = reference_dp("resnet18", inputs, target, steps, 2, 2, "mse", lr)
        run = train(4, split_under(self.tmp, "resnet18", 2), data, "--loss", "mse",
                    "--data-parallel", 2, "--microbatches", 2, "--steps", steps, "--lr", lr,
                    "--no-meta-cache", "--stats")
        self.assertEqual(run.proc.returncode, 0, run.output)
        self.assertEqual(len(run.losses), steps, run.output)
        # (BatchNorm over 2 rows at resnet18's 1x1 stage turns rounding into
        # sign flips: only a reference from the same LibTorch, as here,
        # agrees on every step.)
        for a, b in zip(run.losses, want):
            self.assertLessEqual(abs(a - b), LOSS_TOL * abs(b), "%s vs %s" % (run.losses, want))
        self.assert_replicas_agree(run, 4, 2, steps)

    def run_overlap(self, name, stages, schedule, overlap, steps=3):
        """`ppc train --data-parallel 2` of NAME (STAGES stages on 4 ranks:
        2 replicas x 2 pipeline ranks) with the all-reduce overlapped with
        the backward (the default) or after the schedule
        (PPC_OVERLAP_ALLREDUCE=0). Returns (run, per-step losses as
        --stats-json wrote them, {(rank, step): weights_sha}, saved tensors,
        gradient files' tensors, trace path)."""
        tag = "overlap.%s.%s.%d" % (name, schedule, overlap)
        data = self.tmp_path("%s.data.pt" % name)
        if not os.path.exists(data):
            write_data(data, name, LOSS[name])
        grads, saved = self.tmp_path("grads." + tag), self.tmp_path("saved." + tag)
        stats_json, trace = (self.tmp_path("stats.%s.json" % tag),
                             self.tmp_path("trace.%s.json" % tag))
        os.makedirs(grads)
        run = train(4, split_under(self.tmp, name, stages), data, "--loss", LOSS[name],
                    "--data-parallel", 2, "--schedule", schedule, "--microbatches", 2,
                    "--steps", steps, "--lr", 0.05, "--momentum", 0.9, "--no-meta-cache",
                    "--stats", "--stats-json", stats_json, "--save-grads", grads,
                    "--save", saved, "--trace", trace,
                    env={"PPC_OVERLAP_ALLREDUCE": str(overlap)})
        self.assertEqual(run.proc.returncode, 0, run.output)
        with open(stats_json) as f:
            losses = [s["loss"] for s in json.load(f)["steps"]]
        self.assertEqual(len(losses), steps, run.output)
        sha = {(int(m.group(1)), int(m.group(2))): m.group(5)
               for m in DP_STATS.finditer(run.proc.stdout)}
        self.assertEqual(len(sha), 4 * steps, run.output)
        grad_files = {r: torch.load(os.path.join(grads, "grads.rank%d.pt" % r))
                      for r in range(4)}
        return run, losses, sha, stage_tensors(saved), grad_files, trace

    def test_overlapped_allreduce_is_bitwise_the_same(self):
        # The MLP under zb-h1 (W writes the weights' gradients); the decoder
        # (tied embeddings on stages 0 and 3) interleaved, two stages per
        # rank: the tied parameters are summed after the schedule, the rest
        # beside it.
        for name, stages, schedule in (("mlp", 2, "zb-h1"), ("decoder", 4, "interleaved-1f1b")):
            with self.subTest(model=name, schedule=schedule):
                on = self.run_overlap(name, stages, schedule, 1)
                off = self.run_overlap(name, stages, schedule, 0)
                self.assertEqual(on[1], off[1], "losses")
                self.assertEqual(on[2], off[2], "weights_sha per rank and step")
                self.assertEqual(set(on[3]), set(off[3]))
                for key in on[3]:
                    for a, b in zip(on[3][key], off[3][key]):
                        self.assertTrue(torch.equal(a, b), "saved %s" % key)
                for r in range(4):
                    self.assertEqual(set(on[4][r]), set(off[4][r]))
                    for key in on[4][r]:
                        self.assertTrue(torch.equal(on[4][r][key], off[4][r][key]),
                                        "rank %d gradient %s" % (r, key))
                # Overlapped: each stage's buckets on lane 1 beside the
                # schedule, and one wait per step and rank on lane 0; not
                # overlapped: the buckets are waits on lane 0.
                for (run, _, _, _, _, trace), overlap in ((on, 1), (off, 0)):
                    events = [e for e in assert_valid_trace(self, trace)["traceEvents"]
                              if e.get("ph") == "X"]
                    buckets = [e for e in events if e["name"] == "ALLREDUCE"]
                    waits = [e for e in events if e["name"] == "ALLREDUCE_WAIT"]
                    self.assertEqual({e["pid"] for e in buckets}, {0, 1, 2, 3})
                    self.assertEqual(len(waits), 4 * 3 if overlap else 0)
                    side = {(e["cat"], e["tid"]) for e in buckets}
                    if overlap:
                        self.assertIn(("other", 1), side)
                    else:
                        self.assertEqual(side, {("wait", 0)})
                # The decoder's tied embedding waits for the tied sum.
                if name == "decoder":
                    events = [e for e in assert_valid_trace(self, on[5])["traceEvents"]
                              if e.get("ph") == "X" and e["name"] == "ALLREDUCE"]
                    late = {(e["pid"] % 2, e["args"]["stage"]) for e in events
                            if e["cat"] == "wait"}
                    self.assertEqual(late, {(0, 0), (1, 3)})

    def test_bad_data_parallel_layouts_are_refused(self):
        run = train(2, split_under(self.tmp, "mlp", 2), self.mlp_data, "--loss",
                    "cross_entropy", "--data-parallel", 3)
        self.assertNotEqual(run.proc.returncode, 0)
        self.assertIn("error: --data-parallel 3 does not divide WORLD_SIZE 2", run.output)
        run = train(2, split_under(self.tmp, "mlp", 2), self.mlp_data, "--loss",
                    "cross_entropy", "--data-parallel", 2, "--microbatches", 3)
        self.assertNotEqual(run.proc.returncode, 0)
        self.assertIn("error: --microbatches 3 exceeds the smallest replica's slice of the "
                      "batch (2 of 5 rows over --data-parallel 2)", run.output)

        # Rank 3 (replica 1, pipeline rank 1) dies mid-run: its pipeline peer
        # (rank 2) and its replica peer (rank 1) name it by its job rank.
        args = [PPC, "train", split_under(self.tmp, "mlp", 2), "--data", self.mlp_data,
                "--loss", "cross_entropy", "--data-parallel", "2", "--steps", "1000000",
                "--timeout", "5", "--print-schedule", "--no-meta-cache"]
        port = free_port()
        # Only rank 3's schedule is read; the loss rank's step lines go.
        procs = [subprocess.Popen(args, env=rank_env(r, 4, port),
                                  stdout=subprocess.PIPE if r == 3 else subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for r in range(4)]
        try:
            line = procs[3].stdout.readline().decode()
            self.assertTrue(line.startswith("schedule: "), line)
            time.sleep(0.5)  # in the middle of the steps
            procs[3].send_signal(signal.SIGKILL)
            start = time.monotonic()
            errs = {}
            for r in (1, 2):
                errs[r] = procs[r].communicate(timeout=30)[1].decode(errors="replace")
                self.assertNotEqual(procs[r].returncode, 0)
            self.assertLess(time.monotonic() - start, 15)
            for r in (1, 2):
                errors = [l for l in errs[r].splitlines() if l.startswith("error: ")]
                self.assertEqual(len(errors), 1, errs[r])
                self.assertTrue(errors[0].startswith("error: lost rank 3 ("), errs[r])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate()


if __name__ == "__main__":
    main()
