#!/usr/bin/python3
"""Tests that `ppc train`'s gradient clipping, learning-rate schedules and
AdamW train as the unsplit model does in Python, and its --log-file and
--dry-run.

Reference: training.reference_optim (torch.jit.load + torch.optim, with
torch.nn.utils.clip_grad_norm_ and torch.optim.lr_scheduler.LambdaLR over
the schedule's formula), on the same 3 microbatches of 5 rows:
  - the MLP in 2 stages (SGD, momentum, weight decay, clipping, cosine with
    warm-up) and in 4 stages on 2 ranks (AdamW with its default decay,
    linear with warm-up, clipping, --quiet), the decoder with tied
    embeddings in 4 stages on 2 ranks (SGD, clipping, constant with
    warm-up): 20 steps' losses and printed gradient norms match the
    reference's within 1e-5 relative, the printed learning rates equal the
    formula, and the --log-file's JSON lines equal the printed steps;
  - the reference's AdamW (LibTorchAdamW, LibTorch's rounding) is
    torch.optim.AdamW (bitwise under PyTorch 1.13);
  - --dry-run prints every step's learning rate as the formula computes it,
    without a launch, and bad values are one-line errors;
  - --log-file may not overwrite what the run reads;
  - --eval-data: resnet18 (BatchNorm) in 2 stages, evaluated after steps 2
    and 3 over a set of two batches: each eval loss equals the reference's
    eval-mode loss (rows-weighted over the set) within 1e-5, and training
    goes on as if no evaluation had run (losses, last gradients);
  - evaluation is the training schedule's forwards alone: the MLP in 4
    stages on 2 ranks (interleaved-1f1b), its training batch evaluated after
    each step, gives the next step's training loss bitwise.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import json
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import free_port, main, ppc, rank_env, ReportingTest  # noqa: E402
from common import model_path  # noqa: E402
from training import (LOSS, LibTorchAdamW, assert_gradients, losses_rel_diff,  # noqa: E402
                      make_target, model_inputs, reference_optim, schedule_lr, split_under,
                      train, write_data)

MICROBATCHES = 3
STEPS = 20
# The references come from the Python of the configuration under test, whose
# torch holds the LibTorch ppc runs (tests/CMakeLists.txt).
TOL = 1e-5
# A step line's numbers: "step N loss X [lr X] [grad_norm X]".
LINE = re.compile(r"step (\d+) loss (\S+)(?: lr (\S+))?(?: grad_norm (\S+))?")


class TrainOptimTest(ReportingTest):
    def write_class_data(self, name):
        path = os.path.join(self.tmp, name + ".data.pt")
        return path, write_data(path, name, LOSS[name])

    def check_optimizer(self, name, stages, optimizer, lr, schedule, warmup, min_lr, clip,
                        momentum=0.0, weight_decay=None, quiet=False):
        """Trains NAME in STAGES stages on 2 ranks and checks it against the
        reference; returns the step lines' numbers."""
        data, (inputs, target) = self.write_class_data(name)
        losses, _, lrs, norms = reference_optim(
            name, inputs, target, STEPS, MICROBATCHES, LOSS[name], optimizer, lr,
            momentum=momentum, weight_decay=weight_decay, clip=clip, schedule=schedule,
            warmup=warmup, min_lr=min_lr)
        # Clipping must act, or the run tests only the norm.
        self.assertTrue(any(n > clip for n in norms), norms)
        manifest = split_under(self.tmp, name, stages)
        log = os.path.join(self.tmp, "log.%s.%d.jsonl" % (name, stages))
        args = ["--loss", LOSS[name], "--optimizer", optimizer, "--lr", lr,
                "--steps", STEPS, "--microbatches", MICROBATCHES, "--schedule", "1f1b",
                "--no-meta-cache", "--lr-schedule", schedule, "--warmup-steps", warmup,
                "--clip-grad-norm", clip, "--log-file", log]
        if min_lr:
            args += ["--min-lr", min_lr]
        if momentum:
            args += ["--momentum", momentum]
        if weight_decay is not None:
            args += ["--weight-decay", weight_decay]
        if quiet:
            args.append("--quiet")
        run = train(2, manifest, data, *args)
        self.assertEqual(run.proc.returncode, 0, run.output)
        lines = [m.groups() for m in LINE.finditer(run.proc.stdout)]
        self.assertEqual([int(g[0]) for g in lines], list(range(1, STEPS + 1)), run.output)
        got_losses = [float(g[1]) for g in lines]
        got_lrs = [float(g[2]) for g in lines]
        got_norms = [float(g[3]) for g in lines]
        worst_loss = losses_rel_diff(got_losses, losses)
        self.assertLessEqual(worst_loss, TOL, "losses %s vs %s" % (got_losses, losses))
        worst_norm = losses_rel_diff(got_norms, norms)
        self.assertLessEqual(worst_norm, TOL, "norms %s vs %s" % (got_norms, norms))
        want_lrs = [schedule_lr(s, lr, STEPS, schedule, warmup, min_lr) for s in range(STEPS)]
        for got, want, ref in zip(got_lrs, want_lrs, lrs):
            self.assertEqual(got, want)
            self.assertAlmostEqual(got, ref, delta=1e-15 * lr)
        if quiet:
            self.assertNotIn(" s, ", run.proc.stdout)
        # The log holds exactly what the lines print, at full precision.
        with open(log) as f:
            records = [json.loads(line) for line in f]
        self.assertEqual([r["step"] for r in records], list(range(1, STEPS + 1)))
        for r, (step, loss, step_lr, norm) in zip(records, lines):
            self.assertEqual("%.9g" % r["loss"], loss)
            self.assertEqual(repr(r["lr"]), step_lr)
            self.assertEqual("%.9g" % r["grad_norm"], norm)
            self.assertEqual(r["samples"], 5)
            self.assertGreater(r["seconds"], 0)
            self.assertAlmostEqual(r["samples_per_second"], 5 / r["seconds"], places=6)
        clipped = sum(n > clip for n in norms)
        self.results.append("%-7s stages=%d %-5s %-8s clip %g (%d/%d clipped): loss rel diff "
                            "%.2g, grad norm rel diff %.2g, losses %.6g -> %.6g"
                            % (name, stages, optimizer, schedule, clip, clipped, STEPS,
                               worst_loss, worst_norm, losses[0], losses[-1]))

    def test_sgd_cosine_clipped(self):
        """SGD with momentum and weight decay, cosine after 3 warm-up steps."""
        self.check_optimizer("mlp", 2, "sgd", 0.5, "cosine", 3, 0.01, 0.4, momentum=0.9,
                             weight_decay=1e-3)

    def test_adamw_linear_clipped(self):
        """AdamW with torch.optim.AdamW's default decay (0.01, no
        --weight-decay), linear after 2 warm-up steps; --quiet keeps lr and
        grad_norm. (At lr 0.01 the norm grew to 190 and amplified the last
        bit of a reduction to 3e-5 by step 20: a test of chaos, not of ppc.)"""
        self.check_optimizer("mlp", 4, "adamw", 0.003, "linear", 2, 0.0003, 0.5, quiet=True)

    def test_tied_constant_clipped(self):
        """The decoder's tied embedding counts once in the norm (its two
        copies, on stages 0 and 3, hold one summed gradient)."""
        self.check_optimizer("decoder", 4, "sgd", 0.05, "constant", 4, 0.0, 0.5)

    def test_reference_adamw_is_torch_adamw(self):
        """LibTorchAdamW, the references' AdamW, is torch.optim.AdamW with its
        default decay: 20 full-batch steps on the unsplit MLP give the same
        losses and weights, bitwise, once its first moment moves as this
        torch's Python Adam moves it (1.13: mul_ and add_, as LibTorch's C++
        Adam; 2.x: lerp_, one ulp apart)."""
        class PythonAdamW(LibTorchAdamW):
            first_moment_lerp = int(torch.__version__.split(".")[0]) >= 2

        inputs, target = model_inputs("mlp"), make_target("mlp", "cross_entropy")
        runs = []
        for make in (lambda p: PythonAdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)):
            model = torch.jit.load(model_path("mlp"))
            model.train()
            opt = make(list(model.parameters()))
            losses = []
            for _ in range(STEPS):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(*inputs), target)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            runs.append((losses, dict(model.named_parameters())))
        (ours, a), (theirs, b) = runs
        self.assertEqual(ours, theirs)
        for path, p in a.items():
            self.assertTrue(torch.equal(p, b[path]), path)

    def test_dry_run_prints_each_steps_learning_rate(self):
        """Every step's learning rate as the formula has it, with no launch
        (no RANK in the environment); one-line errors for bad values."""
        manifest = split_under(self.tmp, "mlp", 2)
        data, _ = self.write_class_data("mlp")
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        for schedule, warmup, min_lr, steps in (("cosine", 5, 0.0001, 37), ("linear", 0, 0.0, 9),
                                                ("constant", 3, 0.0, 6)):
            with self.subTest(schedule=schedule):
                args = ["train", manifest, "--data", data, "--steps", steps, "--lr", "0.001",
                        "--lr-schedule", schedule, "--warmup-steps", warmup,
                        "--optimizer", "adamw", "--clip-grad-norm", "2.5", "--dry-run"]
                if min_lr:
                    args += ["--min-lr", min_lr]
                out = ppc(*args, env=env).stdout
                lines = out.splitlines()
                self.assertEqual(lines[0], "optimizer adamw lr 0.001 weight_decay 0.01")
                self.assertEqual(lines[1], "lr_schedule %s warmup_steps %d min_lr %s steps %d"
                                 % (schedule, warmup, "%g" % min_lr if min_lr else "0", steps))
                self.assertEqual(lines[2], "clip_grad_norm 2.5")
                got = [re.fullmatch(r"step (\d+) lr (\S+)", line).groups() for line in lines[3:]]
                self.assertEqual([int(s) for s, _ in got], list(range(1, steps + 1)))
                want = [schedule_lr(s, 0.001, steps, schedule, warmup, min_lr)
                        for s in range(steps)]
                self.assertEqual([float(x) for _, x in got], want)
        errors = [
            (["--warmup-steps", "30"],
             "error: --warmup-steps 30 is not an integer in 0..20 (at most the steps)"),
            (["--lr-schedule", "cosine", "--min-lr", "0.5"],
             "error: --min-lr 0.5 is not a number in 0..0.1 (at most the learning rate)"),
            (["--min-lr", "0.05"],
             "error: --min-lr 0.05 applies to the linear and cosine schedules"),
            (["--clip-grad-norm", "-1"], "error: --clip-grad-norm: -1 is not a finite number of "
                                         "at least 0 (see ppc train --help)"),
            (["--lr-schedule", "step"], "error: --lr-schedule: step not in "
                                        "{constant,linear,cosine} (see ppc train --help)"),
        ]
        for extra, message in errors:
            with self.subTest(extra=extra):
                proc = ppc("train", manifest, "--data", data, "--steps", "20", "--lr", "0.1",
                           *extra, "--dry-run", env=env, check=False)
                self.assertNotEqual(proc.returncode, 0)
                self.assertEqual(proc.stdout, "")
                self.assertEqual(proc.stderr.strip(), message)

    def test_eval_runs_in_eval_mode_between_steps(self):
        """Evaluation in eval mode over the whole set, between steps."""
        name, steps = "resnet18", 3
        data, (inputs, target) = self.write_class_data(name)
        g = torch.Generator().manual_seed(7)
        x = model_inputs(name)[0]
        batches = [(x + 0.1 * torch.randn(x.shape, generator=g), make_target(name, "mse", seed=1)),
                   (x[:3].flip(0), make_target(name, "mse", seed=2)[:3])]
        eval_data = os.path.join(self.tmp, "eval.pt")
        torch.save(batches, eval_data)
        want = {}
        for after in (2, 3):
            losses, model, _, _ = reference_optim(name, inputs, target, after, MICROBATCHES,
                                                  "mse", "sgd", 0.01, momentum=0.9)
            model.eval()
            with torch.no_grad():
                total = sum(torch.nn.functional.mse_loss(model(bx), bt).item() * bx.shape[0]
                            for bx, bt in batches)
            want[after] = total / sum(bx.shape[0] for bx, _ in batches)
        manifest = split_under(self.tmp, name, 2)
        grads = os.path.join(self.tmp, "grads.eval")
        os.makedirs(grads, exist_ok=True)
        log = os.path.join(self.tmp, "log.eval.jsonl")
        run = train(2, manifest, data, "--loss", "mse", "--lr", "0.01", "--momentum", "0.9",
                    "--steps", steps, "--microbatches", MICROBATCHES, "--no-meta-cache",
                    "--eval-data", eval_data, "--eval-every", "2", "--save-grads", grads,
                    "--log-file", log)
        self.assertEqual(run.proc.returncode, 0, run.output)
        got = {int(m.group(2)): float(m.group(1))
               for m in re.finditer(r"eval loss (\S+) at step (\d+)", run.proc.stdout)}
        self.assertEqual(sorted(got), [2, 3], run.output)
        # (resnet18's eval-mode loss after 2 or 3 steps is 1e13..1e18, the
        # running variances having barely moved: only a reference from the
        # same LibTorch, as here, agrees with it.)
        for after, loss in got.items():
            self.assertLessEqual(abs(loss - want[after]), TOL * abs(want[after]),
                                 "eval after step %d: %r vs %r" % (after, loss, want[after]))
            self.assertTrue(math.isfinite(loss), run.output)
        # Training is untouched by the evaluations between its steps: the
        # same losses, bitwise, as a run without them (and, with the same
        # library as the reference, the reference's losses and gradients).
        self.assertEqual(len(run.losses), steps, run.output)
        plain = train(2, manifest, data, "--loss", "mse", "--lr", "0.01", "--momentum", "0.9",
                      "--steps", steps, "--microbatches", MICROBATCHES, "--no-meta-cache")
        self.assertEqual(plain.proc.returncode, 0, plain.output)
        self.assertEqual(run.losses, plain.losses)
        self.assertLessEqual(losses_rel_diff(run.losses, losses), TOL)
        assert_gradients(self, grads, 2, model, TOL)
        with open(log) as f:
            evals = [r for r in map(json.loads, f) if "eval_loss" in r]
        self.assertEqual([(r["step"], "%.9g" % r["eval_loss"]) for r in evals],
                         [(k, "%.9g" % v) for k, v in sorted(got.items())])
        self.results.append("resnet18 stages=2 eval after steps 2, 3: %.6g, %.6g "
                            "(reference %.6g, %.6g)" % (got[2], got[3], want[2], want[3]))
        proc = ppc("train", manifest, "--data", data, "--eval-every", "2",
                   env=rank_env(0, 1, free_port()), check=False)
        self.assertEqual(proc.stderr.strip(), "error: --eval-every needs --eval-data")

    def test_eval_is_the_training_forward(self):
        """Evaluation runs the training schedule's forwards alone: on a model
        whose layers do not depend on the mode (the MLP), the evaluation of
        the training batch after step k is step k+1's training loss, bitwise
        (both from the same weights, summed in microbatch order), over an
        interleaved schedule (2 stages a rank, local and remote edges)."""
        name, steps = "mlp", 3
        data, _ = self.write_class_data(name)
        manifest = split_under(self.tmp, name, 4)
        cache = os.path.join(self.tmp, "meta-cache.eval-forward")

        def run_logged(tag):
            log = os.path.join(self.tmp, "log.eval-forward.%s.jsonl" % tag)
            run = train(2, manifest, data, "--loss", LOSS[name], "--lr", "0.05",
                        "--steps", steps, "--microbatches", MICROBATCHES,
                        "--schedule", "interleaved-1f1b", "--eval-data", data,
                        "--eval-every", "1", "--log-file", log, "--meta-cache", cache,
                        "--stats")
            self.assertEqual(run.proc.returncode, 0, run.output)
            with open(log) as f:
                records = [json.loads(line) for line in f]
            for r in records:
                r.pop("seconds")
                r.pop("samples_per_second", None)
            return run, records

        # The second run reads both modes' metadata from the cache the first
        # wrote (evaluation's, without gradients, apart from training's) and
        # trains and evaluates bitwise alike.
        run, records = run_logged("inferred")
        again, cached = run_logged("cached")
        self.assertEqual(cached, records)
        self.assertEqual({s[2] for s in run.stats}, {"inferred"}, run.output)
        self.assertEqual({s[2] for s in again.stats}, {"cache"}, again.output)
        train_loss = {r["step"]: r["loss"] for r in records if "loss" in r}
        eval_loss = {r["step"]: r["eval_loss"] for r in records if "eval_loss" in r}
        self.assertEqual(sorted(train_loss), [1, 2, 3], records)
        self.assertEqual(sorted(eval_loss), [1, 2, 3], records)
        # The weights move: equal losses are not a model that stands still.
        self.assertNotEqual(train_loss[1], train_loss[3])
        for k in (1, 2):
            self.assertEqual(eval_loss[k].hex(), train_loss[k + 1].hex(),
                             "eval after step %d vs step %d's loss" % (k, k + 1))
        self.results.append("mlp stages=4 interleaved-1f1b: eval after steps 1, 2 = "
                            "losses of steps 2, 3 bitwise (%r, %r)"
                            % (eval_loss[1], eval_loss[2]))

    def test_log_file_guarded(self):
        """--log-file may not replace the manifest or the data."""
        manifest = split_under(self.tmp, "mlp", 2)
        data, _ = self.write_class_data("mlp")
        env = rank_env(0, 1, free_port())
        for path, what in ((manifest, "the manifest"), (data, "the --data file")):
            with self.subTest(what=what):
                proc = ppc("train", manifest, "--data", data, "--log-file", path,
                           env=env, check=False)
                self.assertNotEqual(proc.returncode, 0)
                self.assertEqual(proc.stderr.strip(),
                                 "error: --log-file '%s' is %s; refusing to overwrite it"
                                 % (path, what))


if __name__ == "__main__":
    main()
