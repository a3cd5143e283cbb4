#!/usr/bin/python3
"""Tests that every schedule trains as the unsplit model does: gpipe, 1f1b,
interleaved-1f1b and zb-h1, and those ported from torch.distributed.pipelining,
looped-bfs and interleaved-zb (loop placement), zbv and dualpipev (the V: rank
r runs stages r and 2R-1-r), on the MLP, resnet18 (training-mode BatchNorm)
and the decoder with tied embeddings, split in 2 and 4 stages. For each
schedule and split, one run of 6 SGD steps (momentum, weight decay):
  - its losses are the reference's (gradient accumulation over the same
    microbatches, tests/cli/training.py) within 1e-5 relative;
  - after its last step, every parameter's gradient matches the reference's
    within 1e-5 of the largest magnitude.
4 microbatches (dualpipev needs at least one per stage); one thread per rank,
as the reference runs (2 threads reorder conv's gradient sums, which
resnet18's BatchNorm over 2 rows amplifies to 1e-3). looped-bfs runs the
backwards from the last microbatch to the first, and its reference
accumulates in that order.

6 steps (20 until December 2026) keep every check as strong: a schedule's
order, accumulation and weighting show in step 1, the optimizer state
carried between steps (momentum, weight decay, cleared gradients) from
step 2, and the one difference that needs steps to show, the order in which
looped-bfs accumulates resnet18's gradients, does by step 3: the references
of the two orders differ by 1% of the loss at step 3 and 4% at step 5, and
their gradients after step 5 by 10x (PyTorch 2.15; the tolerance is 1e-5;
in the mlp and the decoder the two orders stay within 1e-5 even after 20
steps). Each step is about 0.2 s of resnet18's 6 s runs.

Schedule CSVs run as the generator's schedule does (the same losses, bit for
bit): a hand-written file in each layout, and PyTorch's own ZBV order in both
(tests/unit/fixtures/schedule, written by PyTorch's generator and lowering).
--schedule auto picks a schedule, says which, and keeps to --max-activations.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, main, model_path, ppc, ReportingTest  # noqa: E402
from training import (LOSS, SCHEDULE_CONFIGS as CONFIGS, assert_gradients,  # noqa: E402
                      losses_rel_diff, reference, split_under, train, write_data)

MICROBATCHES = 4
STEPS = 6
SGD_LR = {"resnet18": "0.01"}
GRAD_TOL = 1e-5
LOSS_TOL = 1e-5


class TrainSchedulesTest(ReportingTest):
    def setUp(self):
        # (A skip also makes ctest run each method as its own test, in
        # parallel: tests/CMakeLists.txt.)
        if not os.path.exists(model_path("mlp")):
            self.skipTest("the test models are not generated (ctest -R generate_models)")

    def check_schedules(self, name):
        data = os.path.join(self.tmp, name + ".data.pt")
        inputs, target = write_data(data, name, LOSS[name])
        lr = SGD_LR.get(name, "0.05")
        refs = {}
        for reverse in (False, True):
            refs[reverse] = reference(name, inputs, target, STEPS, MICROBATCHES, LOSS[name],
                                      "sgd", float(lr), momentum=0.9, weight_decay=1e-4,
                                      reverse_backward=reverse)
        for schedule, stages, ranks in CONFIGS:
            losses, model = refs[schedule == "looped-bfs"]
            with self.subTest(schedule=schedule, stages=stages):
                manifest = split_under(self.tmp, name, stages)
                grads = os.path.join(self.tmp, "grads.%s.%d.%s" % (name, stages, schedule))
                os.makedirs(grads, exist_ok=True)
                run = train(ranks, manifest, data, "--loss", LOSS[name], "--lr", lr,
                            "--momentum", "0.9", "--weight-decay", "1e-4", "--steps", STEPS,
                            "--microbatches", MICROBATCHES, "--schedule", schedule,
                            "--no-meta-cache", "--threads", "1", "--save-grads", grads)
                self.assertEqual(run.proc.returncode, 0, run.output)
                self.assertEqual(len(run.losses), STEPS, run.output)
                worst = losses_rel_diff(run.losses, losses)
                self.assertLessEqual(worst, LOSS_TOL, "losses %s vs %s" % (run.losses, losses))
                worst_grad = assert_gradients(self, grads, ranks, model, GRAD_TOL)
                self.results.append("%-9s %-15s stages=%d ranks=%d: last-step grad rel diff "
                                    "%.2g, %d-step loss rel diff %.2g (%.6g -> %.6g)"
                                    % (name, schedule, stages, ranks, worst_grad, STEPS, worst,
                                       losses[0], losses[-1]))

    def test_mlp_trains_alike_on_every_schedule(self):
        self.check_schedules("mlp")

    def test_resnet18_trains_alike_on_every_schedule(self):
        self.check_schedules("resnet18")

    def test_decoder_trains_alike_on_every_schedule(self):
        self.check_schedules("decoder")

    def train_mlp_schedule(self, manifest, data, ranks, *schedule):
        run = train(ranks, manifest, data, "--loss", LOSS["mlp"], "--lr", "0.05",
                    "--momentum", "0.9", "--steps", "5", "--microbatches", MICROBATCHES,
                    "--no-meta-cache", "--threads", "1", "--stats", *schedule)
        self.assertEqual(run.proc.returncode, 0, run.output)
        self.assertEqual(len(run.losses), 5, run.output)
        return run

    def test_csv_schedules_train_as_generated(self):
        data = os.path.join(self.tmp, "mlp.csv.data.pt")
        write_data(data, "mlp", LOSS["mlp"])
        two = split_under(self.tmp, "mlp", 2)
        four = split_under(self.tmp, "mlp", 4)
        d = os.path.join(self.tmp, "csv")
        os.makedirs(d, exist_ok=True)
        # By hand: 1f1b on 2 stages and 4 microbatches, in both layouts.
        hand = {
            "compute_only": "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\r\n"
                            "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\r\n",
            "compute_comms": "".join([
                ",".join("0F%d,0SEND_F%d" % (m, m) for m in (0, 1)) + ",",
                ",".join("0RECV_B%d,0B%d,0WAIT_SEND_F%d%s" % (m, m, m, ",0F%d,0SEND_F%d"
                                                              % (m + 2, m + 2) if m < 2 else "")
                         for m in range(4)), "\r\n",
                ",".join("1RECV_F%d,1F%d,1B%d,1SEND_B%d" % (m, m, m, m) for m in range(4)), ",",
                ",".join("1WAIT_SEND_B%d" % m for m in range(4)), "\r\n"]),
        }
        want = self.train_mlp_schedule(two, data, 2, "--schedule", "1f1b").losses
        for layout, text in hand.items():
            with self.subTest(layout=layout):
                path = os.path.join(d, "hand.%s.csv" % layout)
                with open(path, "w", newline="") as f:
                    f.write(text)
                self.assertEqual(self.train_mlp_schedule(two, data, 2, "--schedule-csv",
                                                         path).losses, want)
        # PyTorch's ZBV order, as its generator writes it and as its runtime lowers it.
        want = self.train_mlp_schedule(four, data, 2, "--schedule", "zbv").losses
        fixtures = os.path.join(ROOT, "tests", "unit", "fixtures", "schedule")
        for layout in ("compute_only", "compute_comms"):
            with self.subTest(pytorch=layout):
                path = os.path.join(fixtures, "pytorch_zbv_4s_2r_4mb.%s.csv" % layout)
                self.assertEqual(self.train_mlp_schedule(four, data, 2, "--schedule-csv",
                                                         path).losses, want)

    def test_auto_picks_and_keeps_the_cap(self):
        data = os.path.join(self.tmp, "mlp.auto.data.pt")
        write_data(data, "mlp", LOSS["mlp"])
        four = split_under(self.tmp, "mlp", 4)
        picked = {}
        for cap in (None, 5, 4):
            with self.subTest(cap=cap):
                extra = ("--max-activations", str(cap)) if cap else ()
                run = self.train_mlp_schedule(four, data, 2, "--schedule", "auto", *extra)
                notes = re.findall(r"note: --schedule auto picked ([\w-]+): simulated step "
                                   r"\S+ (\w+) \(bubble [\d.]+%, at most (\d+) microbatches' "
                                   r"activations per rank\) with (.*?); the others", run.output)
                self.assertEqual(len(notes), 1, run.output)  # rank 0 only
                kind, unit, peak, costs = notes[0]
                # The step is in the unit of the costs it was simulated with.
                self.assertEqual(unit, "ns" if "measured (profile)" in costs else
                                 "bytes" if "params stage costs" in costs else "units", costs)
                picked[cap] = kind
                if cap:
                    self.assertLessEqual(int(peak), cap)
                # What the note claims is what ppc schedule simulates for that kind.
                out = ppc("schedule", "--schedule", kind, "--manifest", four, "--ranks", 2,
                          "--microbatches", MICROBATCHES).stdout
                per_rank = re.search(r"^peak activations per rank: (.*)$", out, re.M).group(1)
                self.assertEqual(max(int(x.split("=")[1]) for x in per_rank.split()), int(peak))
                # It trains like that schedule chosen by name.
                self.assertEqual(run.losses, self.train_mlp_schedule(four, data, 2, "--schedule",
                                                                     kind).losses)
        self.results.append("auto on mlp, 4 stages / 2 ranks, M=4: picked %s; with "
                            "--max-activations 5: %s; 4: %s" % (picked[None], picked[5],
                                                                 picked[4]))
        proc = train(2, four, data, "--loss", LOSS["mlp"], "--schedule", "auto",
                     "--max-activations", "1", "--microbatches", MICROBATCHES).proc
        self.assertEqual(proc.returncode, 2)
        self.assertIn("error: --schedule auto: no schedule fits: gpipe n/a (8 activations > "
                      "--max-activations 1)", proc.stderr)
        proc = train(2, four, data, "--loss", LOSS["mlp"], "--schedule", "1f1b",
                     "--max-activations", "2").proc
        self.assertEqual(proc.returncode, 2)
        self.assertIn("error: --max-activations applies to --schedule auto", proc.stderr)


if __name__ == "__main__":
    main()
