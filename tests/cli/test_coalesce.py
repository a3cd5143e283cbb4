#!/usr/bin/python3
"""Tests that an edge's values cross as one message per microbatch.

The `values` model's one cut (2 stages) carries seven values, an int, a
float, a bool, an int[], a Tensor[] of 3, a Tuple[Tensor] of 2 and a Tensor:
ten wire tensors; unet's 3-stage split sends two tensors from stage 0 to
stage 1 and two skip features to stage 2 (their gradients back when
training). With coalescing
(the default) each such (edge, microbatch) is one message, forward and
backward; with PPC_COALESCE=0 (measurement only, docs/runtime.md) each wire
tensor is its own. The outputs, losses and gradients of both are bitwise
equal, and `--stats` counts exactly the messages saved.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
# ctest: one entry: every test skips, or none, on the same condition
# (setUp: the test models are not generated).
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (assert_identical, assert_outputs_close, expected_output,  # noqa: E402
                    launch, load_manifest, main, model_path, parse_stats, split_at,
                    tmpdir)
from training import LOSS, read_grads, train, write_data  # noqa: E402


MICROBATCHES = 3


def env_for(coalesce):
    return dict(os.environ, PPC_COALESCE="1" if coalesce else "0")


class CoalesceTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(model_path("values")):
            self.skipTest("the test models are not generated (ctest -R generate_models)")
        self.tmp = tmpdir(self)

    def run_values(self, manifest, micro, coalesce):
        """(output, {rank: stats}) of `ppc run` on 2 ranks, metadata inferred."""
        out = os.path.join(self.tmp, "out.%d.%d.pt" % (micro, coalesce))
        r = launch(2, "run", manifest, "--input", model_path("values", ".input.pt"),
                   "--output", out, "--microbatches", micro, "--stats", "--no-meta-cache",
                   "--timeout", "60", env=env_for(coalesce))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return torch.load(out), parse_stats(r.stdout)

    def test_values_edge_is_one_message_per_microbatch(self):
        manifest = split_at("values", 2, os.path.join(self.tmp, "s2"))
        per_microbatch = {}
        for coalesce in (True, False):
            runs = {}
            for micro in (2, 4):
                out, stats = self.run_values(manifest, micro, coalesce)
                assert_outputs_close(self, expected_output("values"), out)
                runs[micro] = (out, stats)
            # Rank 0 sends the edge: per microbatch, its messages besides
            # the start-up collectives (the same for any microbatch count)
            # and the metadata headers (two messages each).
            def edge_messages(micro):
                meta, headers, sent = runs[micro][1][0][:3]
                self.assertEqual(meta, "inferred")
                return int(sent) - 2 * int(headers)
            per_microbatch[coalesce] = (edge_messages(4) - edge_messages(2)) / 2
            if coalesce:
                coalesced = runs
            else:
                for micro in (2, 4):
                    assert_identical(self, coalesced[micro][0], runs[micro][0])
        self.assertEqual(per_microbatch[True], 1)
        # int, float, bool, int[], Tensor[] (3), Tuple[Tensor] (2) and the
        # activation (g): ten messages without coalescing.
        self.assertEqual(per_microbatch[False], 10)

    def train_unet(self, manifest, data, grads, coalesce):
        run = train(3, manifest, data, "--loss", LOSS["unet"], "--lr", "0.1", "--steps", "2",
                    "--microbatches", MICROBATCHES, "--schedule", "1f1b", "--no-meta-cache",
                    "--threads", "1", "--stats", "--timeout", "120", "--save-grads", grads,
                    env=dict(PPC_COALESCE="1" if coalesce else "0"))
        self.assertEqual(run.returncode, 0, run.output)
        self.assertEqual(len(run.losses), 2, run.output)
        return run

    def test_unet_skip_features_and_their_gradients_coalesce(self):
        # Stage 0 sends two tensors to stage 1 and the skip features s1, s2
        # to stage 2; stages 1 and 2 send their gradients back: per
        # microbatch, one message each way per edge instead of one per tensor.
        manifest = split_at("unet", 3, os.path.join(self.tmp, "u3"))
        data = os.path.join(self.tmp, "unet.data.pt")
        write_data(data, "unet", LOSS["unet"])
        # Per rank (= stage), the messages per microbatch coalescing saves:
        # forward on the producer, backward (every tensor here carries a
        # gradient) on the consumer.
        tensors = {}
        for stage in load_manifest(os.path.dirname(manifest))["stages"]:
            for i in stage["inputs"]:
                if "stage" in i["source"]:
                    edge = (i["source"]["stage"], stage["index"])
                    tensors[edge] = tensors.get(edge, 0) + 1
        saved_per_mb = {0: 0, 1: 0, 2: 0}
        for (producer, consumer), n in tensors.items():
            saved_per_mb[producer] += n - 1
            saved_per_mb[consumer] += n - 1
        self.assertEqual(saved_per_mb, {0: 2, 1: 1, 2: 1})
        runs = {}
        for coalesce in (True, False):
            grads = os.path.join(self.tmp, "grads.%d" % coalesce)
            os.makedirs(grads)
            runs[coalesce] = (self.train_unet(manifest, data, grads, coalesce),
                              read_grads(grads, 3))
        self.assertEqual(runs[True][0].losses, runs[False][0].losses)
        self.assertEqual(sorted(runs[True][1]), sorted(runs[False][1]))
        for path, g in runs[True][1].items():
            self.assertTrue(torch.equal(g, runs[False][1][path]), path)
        # (rank, step) -> messages_sent
        sent = {c: {(int(s[0]), int(s[1])): int(s[4]) for s in runs[c][0].stats}
                for c in runs}
        self.assertEqual(sorted(sent[True]), sorted(sent[False]))
        for rank, step in sent[True]:
            saved = sent[False][rank, step] - sent[True][rank, step]
            self.assertEqual(saved, MICROBATCHES * saved_per_mb[rank], (rank, step, sent))


if __name__ == "__main__":
    main()
