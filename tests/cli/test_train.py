#!/usr/bin/python3
"""Tests `ppc train` beyond the numerics of test_train_numerics.py: ZB-H1 on
4 ranks, a model with two inputs and a tuple output, peak activations per
schedule, the meta cache for training, schedule CSVs, --save + ppc join, and
bad input.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import launch, main, model_path, ppc  # noqa: E402
from trace_format import assert_valid_trace  # noqa: E402
from training import (MlpDataTest, read_grads, reference, rel_diff, resolve,  # noqa: E402
                      split_under, stage_tensors, train, write_data)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit",
                        "fixtures", "schedule")


class TrainTest(MlpDataTest):
    def train_mlp(self, stages, *args, ranks=2, data=None):
        return train(ranks, split_under(self.tmp, "mlp", stages), data or self.mlp_data,
                     "--loss", "cross_entropy", *args)

    def assert_run_failed(self, run, *needles):
        """A run that fails with one error line naming the problem."""
        self.assertNotEqual(run.proc.returncode, 0, run.output)
        errors = [l for l in run.output.splitlines() if "error:" in l]
        self.assertTrue(errors, run.output)
        for needle in needles:
            self.assertIn(needle, run.output)

    def test_zb_h1_four_ranks(self):
        _, ref = reference("mlp", self.mlp_inputs, self.mlp_target, 1, 4, "cross_entropy",
                           "sgd", 0.1)
        grads = self.tmp_path("grads.zb4")
        os.makedirs(grads)
        run = self.train_mlp(4, "--schedule", "zb-h1", "--microbatches", "4", "--steps", "1",
                             "--lr", "0.1", "--no-meta-cache", "--save-grads", grads, ranks=4)
        self.assertEqual(run.proc.returncode, 0, run.output)
        for path, g in read_grads(grads, 4).items():
            self.assertLessEqual(rel_diff(g, resolve(ref, path).grad), 1e-5, path)

    def test_two_inputs_tuple_output(self):
        # two_io returns (main, aux); --loss-output picks the one trained.
        for output in (0, 1):
            with self.subTest(loss_output=output):
                data = self.tmp_path("two_io.%d.data.pt" % output)
                inputs, target = write_data(data, "two_io", "mse", loss_output=output)
                losses, ref = reference("two_io", inputs, target, 5, 2, "mse", "sgd", 0.1,
                                        loss_output=output)
                manifest = split_under(self.tmp, "two_io", 4)
                saved = self.tmp_path("two_io.saved.%d" % output)
                run = train(2, manifest, data, "--loss", "mse", "--loss-output", output,
                            "--steps", "5", "--microbatches", "2", "--lr", "0.1",
                            "--no-meta-cache", "--save", saved)
                self.assertEqual(run.proc.returncode, 0, run.output)
                for a, b in zip(run.losses, losses):
                    self.assertLessEqual(abs(a - b), 1e-4 * abs(b))
                self.assertEqual(len(run.losses), 5)
                for path, copies in stage_tensors(saved).items():
                    for t in copies:
                        self.assertLessEqual(rel_diff(t, resolve(ref, path)), 1e-4, path)

    def test_peak_activations_follow_the_schedule(self):
        # 4 stages on 4 ranks, 6 microbatches: GPipe holds all 6 on every
        # stage, 1F1B at most stages - index.
        for schedule, want in (("gpipe", {0: 6, 1: 6, 2: 6, 3: 6}),
                               ("1f1b", {0: 4, 1: 3, 2: 2, 3: 1})):
            with self.subTest(schedule=schedule):
                run = self.train_mlp(4, "--schedule", schedule, "--microbatches", "6", "--steps",
                                     "2", "--stats", "--no-meta-cache", ranks=4,
                                     data=self.grown_data(12))
                self.assertEqual(run.proc.returncode, 0, run.output)
                self.assertEqual(run.peaks(), want, run.output)

    def grown_data(self, rows):
        path = self.tmp_path("mlp.%d.data.pt" % rows)
        if not os.path.exists(path):
            x, y = self.mlp_inputs[0], self.mlp_target
            grow = lambda t: torch.cat([t] * (rows // t.shape[0] + 1))[:rows]
            torch.save((grow(x), grow(y)), path)
        return path

    def test_second_run_takes_its_meta_from_the_cache(self):
        # The second identical run takes every rank's metadata, forward and
        # backward, from the cache: no metadata message, the same losses.
        out = self.tmp_path("cache")
        shutil.copytree(os.path.dirname(split_under(self.tmp, "mlp", 4)), out)
        manifest = os.path.join(out, "manifest.json")
        runs = []
        for _ in range(2):
            run = train(2, manifest, self.mlp_data, "--loss", "cross_entropy", "--steps", "3",
                        "--microbatches", "3", "--stats")
            self.assertEqual(run.proc.returncode, 0, run.output)
            runs.append(run)
        first, second = runs
        self.assertEqual({s[2] for s in first.stats}, {"inferred"})
        self.assertGreater(sum(int(s[3]) for s in first.stats), 0)
        self.assertEqual({s[2] for s in second.stats}, {"cache"}, second.output)
        self.assertEqual([s[3] for s in second.stats], ["0"] * len(second.stats))
        self.assertEqual(len(second.stats), 6)  # 2 ranks x 3 steps
        self.assertEqual(first.losses, second.losses)
        # An inference run beside it keeps its own entries.
        r = launch(2, "run", manifest, "--input", model_path("mlp", ".input.pt"),
                   "--output", self.tmp_path("cache.out.pt"), "--stats")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("meta=inferred", r.stdout)

    def test_schedule_csv_trains_like_its_schedule(self):
        manifest = split_under(self.tmp, "mlp", 2)
        base = self.train_mlp(2, "--schedule", "1f1b", "--microbatches", "4", "--steps", "3",
                              "--no-meta-cache")
        self.assertEqual(base.proc.returncode, 0, base.output)
        csv = self.tmp_path("1f1b.csv")
        ppc("schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4",
            "--csv", csv)
        # Ours, and one written by hand in PyTorch's _dump_csv layout.
        for path in (csv, os.path.join(FIXTURES, "pytorch_2stages_4mb.csv")):
            with self.subTest(csv=os.path.basename(path)):
                run = train(2, manifest, self.mlp_data, "--loss", "cross_entropy",
                            "--schedule-csv", path, "--microbatches", "4", "--steps", "3",
                            "--no-meta-cache")
                self.assertEqual(run.proc.returncode, 0, run.output)
                self.assertEqual(len(run.losses), 3)
                for a, b in zip(run.losses, base.losses):
                    self.assertLessEqual(abs(a - b), 1e-6 * abs(b))
        run = train(2, manifest, self.mlp_data, "--loss", "cross_entropy", "--schedule-csv",
                    os.path.join(FIXTURES, "deadlock.csv"), "--microbatches", "2")
        self.assert_run_failed(run, "deadlocks: rank 0 waits at 0B0")

    def test_v_placed_schedule_csv(self):
        # 4 stages on 2 ranks placed as a V (rank 0: 0 and 3, rank 1: 1 and 2)
        # by the CSV's rows train as the loop-placed 1f1b does.
        base = self.train_mlp(4, "--schedule", "1f1b", "--microbatches", "4", "--steps", "3",
                              "--no-meta-cache")
        self.assertEqual(base.proc.returncode, 0, base.output)
        csv = self.tmp_path("1f1b.v.csv")
        ppc("schedule", "--schedule", "1f1b", "--stages", "4", "--ranks", "2",
            "--placement", "v", "--microbatches", "4", "--csv", csv)
        with open(csv) as f:
            rows = f.read().splitlines()
        self.assertEqual([sorted({c[0] for c in r.split(",")}) for r in rows],
                         [["0", "3"], ["1", "2"]])
        run = train(2, split_under(self.tmp, "mlp", 4), self.mlp_data, "--loss",
                    "cross_entropy", "--schedule-csv", csv, "--microbatches", "4",
                    "--steps", "3", "--no-meta-cache")
        self.assertEqual(run.proc.returncode, 0, run.output)
        self.assertEqual(len(run.losses), 3)
        for a, b in zip(run.losses, base.losses):
            self.assertLessEqual(abs(a - b), 1e-6 * abs(b))

    def test_save_and_join(self):
        manifest = split_under(self.tmp, "mlp", 4)
        saved = self.tmp_path("joined.saved")
        run = self.train_mlp(4, "--steps", "5", "--microbatches", "3", "--lr", "0.1",
                             "--no-meta-cache", "--save", saved)
        self.assertEqual(run.proc.returncode, 0, run.output)
        losses, ref = reference("mlp", self.mlp_inputs, self.mlp_target, 5, 3,
                                "cross_entropy", "sgd", 0.1)
        joined = self.tmp_path("trained.pt")
        ppc("join", os.path.join(saved, "manifest.json"), "-o", joined)
        model = torch.jit.load(joined)
        for name, value in model.state_dict().items():
            self.assertLessEqual(rel_diff(value, ref.state_dict()[name]), 1e-4, name)
        # The joined model equals its stages run by ppc verify and by ppc run.
        ppc("verify", joined, os.path.join(saved, "manifest.json"), "--input",
            model_path("mlp", ".input.pt"))
        out = self.tmp_path("joined.out.pt")
        r = launch(2, "run", os.path.join(saved, "manifest.json"), "--input",
                   model_path("mlp", ".input.pt"), "--output", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with torch.no_grad():
            want = model(torch.load(model_path("mlp", ".input.pt")))
        self.assertTrue(torch.allclose(torch.load(out), want, rtol=1e-5, atol=1e-6))
        # The saved manifest trains on.
        more = train(2, os.path.join(saved, "manifest.json"), self.mlp_data, "--loss",
                     "cross_entropy", "--steps", "1", "--no-meta-cache")
        self.assertEqual(more.proc.returncode, 0, more.output)
        # --save may not overwrite the stages being trained.
        bad = self.train_mlp(4, "--steps", "1", "--no-meta-cache", "--save",
                             os.path.dirname(manifest))
        self.assert_run_failed(bad, f"--save '{os.path.dirname(manifest)}' holds the manifest "
                               f"('{manifest}'); refusing to overwrite it")

    def test_trace_records_every_ranks_actions(self):
        # --trace: one Chrome trace from rank 0 with every rank's actions, a
        # flow per message; ppc trace summary reads it.
        trace = self.tmp_path("train.trace.json")
        run = self.train_mlp(4, "--schedule", "zb-h1", "--microbatches", "3", "--steps", "2",
                             "--no-meta-cache", "--trace", trace)
        self.assertEqual(run.proc.returncode, 0, run.output)
        assert_valid_trace(self, trace)
        import json
        with open(trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        per_rank = {r: sorted(e["name"] for e in events if e["pid"] == r) for r in (0, 1)}
        # Per rank, 2 stages x 3 microbatches x 2 steps of F, I and W.
        for r in (0, 1):
            for kind in ("F", "I", "W"):
                self.assertEqual(per_rank[r].count(kind), 12, (r, kind))
        summary = ppc("trace", "summary", trace).stdout
        self.assertIn("trace: rank=0", summary)
        self.assertIn("trace: rank=1", summary)

    def test_bad_data_files_are_refused(self):
        not_torch = self.tmp_path("not_torch.pt")
        with open(not_torch, "w") as f:
            f.write("hello")
        wrong_rows = self.tmp_path("rows.pt")
        torch.save((self.mlp_inputs[0], self.mlp_target[:3]), wrong_rows)
        two = self.tmp_path("two.pt")
        torch.save(((self.mlp_inputs[0], self.mlp_inputs[0]), self.mlp_target), two)
        shape = self.tmp_path("shape.pt")
        torch.save((self.mlp_inputs[0], torch.randn(5, 3)), shape)
        nan = self.tmp_path("nan.pt")
        torch.save((self.mlp_inputs[0] * float("nan"), self.mlp_target), nan)
        cases = [
            (self.tmp_path("missing.pt"), "cross_entropy", ["cannot read data", "missing.pt"]),
            (not_torch, "cross_entropy", ["not_torch.pt"]),
            (wrong_rows, "cross_entropy", ["input 0 has 5 rows, the target 3"]),
            (two, "cross_entropy", ["the model takes 1 input, got 2"]),
            (shape, "mse", ["mse needs equal shapes"]),
            (nan, "cross_entropy", ["step 1: the loss is nan"]),
        ]
        for data, loss, needles in cases:
            with self.subTest(data=os.path.basename(data)):
                run = train(2, split_under(self.tmp, "mlp", 2), data, "--loss", loss,
                            "--no-meta-cache", "--timeout", "20")
                self.assert_run_failed(run, *needles)

    def test_bad_training_options_are_refused(self):
        cases = [
            (["--lr", "0"], "--lr: 0 is not a finite number above 0"),
            (["--steps", "0"], "--steps"),
            (["--schedule", "interleaved-1f1b"],
             "interleaved-1f1b needs at least 2 stages per rank"),
            (["--loss-output", "3"], "--loss-output 3 is not an integer in 0..0 (the model has 1 output)"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                run = self.train_mlp(2, *args)
                self.assert_run_failed(run, needle)


if __name__ == "__main__":
    main()
