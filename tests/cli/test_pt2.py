#!/usr/bin/python3
"""Tests torch.export (`.pt2`) programs: split, verify, run, train and join.

The models come from tests/models/make_pt2_models.py, run with a PyTorch 2.x
(common.pytorch2_python(): the PyTorch 2.x configuration's Python) and cached
in PPC_BUILD_DIR/pt2-models:
pt2_cnn (BatchNorm, residual blocks), pt2_gpt (tied embedding/LM head,
causal scaled_dot_product_attention), pt2_unet (skips across stages),
pt2_two_io (two inputs, two outputs), pt2_mlp; batch 10, dynamic batch
dimension (torch.export.Dim("batch", min=1)) on every input.

A ppc built against LibTorch 1.x refuses a .pt2 with one `error:` line
(REFUSAL_1X). One built against LibTorch 2.x, whose tests run under
PPC_TORCH_PYTHON (tests/CMakeLists.txt), must:
  - split cnn, gpt, unet and two_io into 2, 3 and 4 stages (`--stages N`;
    the gpt also `--split-at` module paths), each stage a `stage_N.pt2` that
    torch.export.load reads and that, chained as the manifest says
    (pt2.chain_stages), gives NAME.output.pt, at other batch sizes too;
    `ppc verify` accepts each split;
  - run the 2-stage split on 2 ranks and the 4-stage split on 4 with 4
    microbatches of the 10 rows (3, 3, 2, 2) and give NAME.output.pt within
    1e-5, a second run taking its metadata from the cache on every rank, and
    10 microbatches of one row (the batch symbol's minimum);
  - train the gpt (mse on the logits) and the mlp (cross_entropy), split in 2
    and 4 stages, with every schedule (test_train_schedules.py's CONFIGS): 20
    SGD steps (momentum 0.9, weight decay 1e-4) with the losses of
    pt2.reference_pt2 (the unsplit program trained in Python) within 1e-5
    relative; 20 Adam steps once per schedule (ADAM_CONFIGS);
  - `ppc train --save` then `ppc join` into a .pt2 that torch.export.load
    reads, holding the trained tensors (the reference's within 1e-4) and
    computing what the saved stages compute.

Env: PPC, PPC_BUILD_DIR, PPC_TORCH_PYTHON (the PyTorch 2.x build), else
PPC_PT2_PYTHON (the system LibTorch build, scripts/test.sh).
"""
import hashlib
import os
import re
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, assert_outputs_close, libtorch_major, load_manifest, main,  # noqa: E402
                    model_meta, ppc, pytorch2_python, run_pipeline, split, tmpdir)
import pt2  # noqa: E402
import training  # noqa: E402

# A Python with torch 2.x to export the models.
PT2_PYTHON = pytorch2_python()
PT2_MODELS = os.path.join(BUILD, "pt2-models")

# What a ppc built against LibTorch 1.x says to `ppc split X.pt2` (the whole
# of stderr, one line; exit status 2). Draft: the exact text is to be fixed
# with lib/'s message (then make this an exact string with %s for the path).
REFUSAL_1X = r"error: [^\n]*\.pt2[^\n]*LibTorch 2[^\n]*\n"

RUN_MODELS = ["pt2_cnn", "pt2_gpt", "pt2_unet", "pt2_two_io"]
TRAIN_MODELS = ["pt2_gpt", "pt2_mlp"]
RTOL = ATOL = 1e-5
MICROBATCHES = 4  # 10 rows: 3, 3, 2, 2
# (schedule, stages, ranks): every schedule on 2 and 4 stages, as
# test_train_schedules.py trains them.
CONFIGS = training.SCHEDULE_CONFIGS
# Adam once per schedule, alternating 2 and 4 stages (each launch costs ~2 s
# on 2 cores).
ADAM_CONFIGS = [("gpipe", 4, 2), ("1f1b", 2, 2), ("interleaved-1f1b", 4, 2), ("zb-h1", 2, 2),
                ("looped-bfs", 4, 2), ("interleaved-zb", 2, 2), ("zbv", 4, 2),
                ("dualpipev", 4, 2)]
SGD = ("--lr", "0.05", "--momentum", "0.9", "--weight-decay", "1e-4")
ADAM = ("--optimizer", "adam", "--lr", "0.001")
LOSS_TOL = 1e-5
WEIGHT_TOL = 1e-4
JOIN_SUMMARY = r"^joined (\d+) stages?: (\d+) parameters? and (\d+) buffers? into (.*)\n$"


class Pt2Test(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)

    # -- helpers ---------------------------------------------------------

    def pt2_models(self):
        """Generates (or reuses) the .pt2 models; skips without a PyTorch 2.x."""
        if not os.access(PT2_PYTHON, os.X_OK):
            self.skipTest("no PyTorch 2.x to export the models: %s is missing "
                          "(scripts/python.sh build makes it)" % PT2_PYTHON)
        r = pt2.make_pt2_models(PT2_MODELS, PT2_PYTHON)
        self.assertEqual(r.returncode, 0, "make_pt2_models.py:\n" + r.stdout + r.stderr)
        return PT2_MODELS

    def needs_libtorch_2(self):
        major = libtorch_major()
        if major < 2:
            self.skipTest("needs a ppc built against LibTorch 2.x; this one has LibTorch %d"
                          % major)
        if int(torch.__version__.split(".")[0]) < 2:
            self.fail("test_pt2.py runs under torch %s, which has no torch.export: run it "
                      "with the PyTorch 2.x build's Python, PPC_TORCH_PYTHON "
                      "(tests/CMakeLists.txt runs every test under it)" % torch.__version__)
        return self.pt2_models()

    def split_pt2_checked(self, models, name, out, *how):
        """`ppc split NAME.pt2 HOW... -o OUT`; checks the manifest and that
        every stage file is a torch.export program; returns the manifest."""
        manifest = split(pt2.files(models, name)[".pt2"], out, *how).load()
        self.assertEqual(manifest["format"], "pt2")
        for i, stage in enumerate(manifest["stages"]):
            self.assertEqual((stage["index"], stage["file"]), (i, "stage_%d.pt2" % i))
            torch.export.load(os.path.join(out, stage["file"]))
        return manifest

    def check_chain(self, models, name, out):
        """chain_stages on OUT gives NAME.output.pt, and the unsplit
        program's outputs on 1 and 3 rows."""
        f = pt2.files(models, name)
        inputs = pt2.load_inputs(f[".input.pt"])
        worst = assert_outputs_close(self, torch.load(f[".output.pt"]),
                                     pt2.chain_stages(out, inputs), RTOL, ATOL)
        whole = pt2.load_module(f[".pt2"])
        for rows in (1, 3):
            part = tuple(x[:rows] for x in inputs)
            with torch.no_grad():
                want = whole(*part)
            assert_outputs_close(self, want, pt2.chain_stages(out, part), RTOL, ATOL)
        return worst

    def verify_pt2(self, models, name, out):
        f = pt2.files(models, name)
        r = ppc("verify", f[".pt2"], os.path.join(out, "manifest.json"), "--input",
                f[".input.pt"], check=False)
        self.assertEqual(r.returncode, 0, "%s: verify:\n%s%s" % (out, r.stdout, r.stderr))

    def run_pt2(self, models, name, out, ranks, *extra, microbatches=MICROBATCHES):
        """ppc run on RANKS ranks; checks the output against NAME.output.pt;
        returns the --stats by rank."""
        f = pt2.files(models, name)
        return run_pipeline(self, os.path.join(out, "manifest.json"), ranks, f[".input.pt"],
                            os.path.join(self.tmp, "out.pt"), *extra, micro=microbatches,
                            expected=torch.load(f[".output.pt"]), rtol=RTOL, atol=ATOL,
                            timeout=300, launcher=("--timeout", "120")).stats

    # -- LibTorch 1.x ------------------------------------------------------

    def test_libtorch_1_refuses_pt2(self):
        major = libtorch_major()
        if major >= 2:
            self.skipTest("only a ppc built against LibTorch 1.x refuses .pt2 programs; "
                          "this one has LibTorch %d" % major)
        models = self.pt2_models()
        for name in ("pt2_mlp", "pt2_gpt"):
            out = os.path.join(self.tmp, name)
            r = ppc("split", pt2.files(models, name)[".pt2"], "--stages", "2", "-o", out,
                    check=False)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertEqual(r.stdout, "")
            self.assertRegex(r.stderr, "^" + REFUSAL_1X + r"\Z")
            self.assertFalse(os.path.exists(out), "split left %s behind" % out)

    # -- LibTorch 2.x: split, verify, run ----------------------------------

    def check_split_verify_run(self, name):
        models = self.needs_libtorch_2()
        for stages in (2, 3, 4):
            with self.subTest(stages=stages):
                out = os.path.join(self.tmp, "split%d" % stages)
                manifest = self.split_pt2_checked(models, name, out, "--stages", stages)
                self.assertEqual(len(manifest["stages"]), stages)
                self.verify_pt2(models, name, out)
                self.check_chain(models, name, out)
                if stages == 3:
                    continue
                # 2 stages on 2 ranks, 4 on 4; the first run infers the
                # metadata and caches it, the second reads the cache.
                first = self.run_pt2(models, name, out, stages)
                self.assertEqual({s[0] for s in first.values()}, {"inferred"}, first)
                second = self.run_pt2(models, name, out, stages)
                self.assertEqual({s[0] for s in second.values()}, {"cache"}, second)
                self.assertEqual(sum(int(s[1]) for s in second.values()), 0, second)
                if stages == 2:  # microbatches of one row: the batch symbol's minimum
                    self.run_pt2(models, name, out, 2, "--no-meta-cache",
                                 microbatches=10)

    def test_cnn_splits_verifies_and_runs(self):
        self.check_split_verify_run("pt2_cnn")

    def test_gpt_splits_verifies_and_runs(self):
        self.check_split_verify_run("pt2_gpt")

    def test_unet_splits_verifies_and_runs(self):
        self.check_split_verify_run("pt2_unet")

    def test_two_io_splits_verifies_and_runs(self):
        self.check_split_verify_run("pt2_two_io")

    def test_gpt_split_at_module_paths(self):
        models = self.needs_libtorch_2()
        cuts = model_meta("pt2_gpt", models)["split_at"]
        for paths in (["blocks.1"], cuts["3"]):
            with self.subTest(paths=paths):
                out = os.path.join(self.tmp, "at" + "_".join(paths))
                manifest = self.split_pt2_checked(models, "pt2_gpt", out, "--split-at",
                                                  ",".join(paths))
                stages = manifest["stages"]
                self.assertEqual(len(stages), len(paths) + 1)
                self.assertEqual([s.get("begins_at") for s in stages[1:]], paths)
                for stage, path in zip(stages[1:], paths):
                    if "modules" in stage:
                        self.assertEqual(stage["modules"][0], path, stage["modules"])
                if "modules" in stages[0]:
                    self.assertIn("emb", stages[0]["modules"])
                    self.assertNotIn(paths[0], stages[0]["modules"])
                # The tied embedding / LM head: used by the first and last stage.
                tied = [sorted((u["stage"], u["path"]) for u in t["uses"])
                        for t in manifest["tied_parameters"]]
                self.assertEqual(len(tied), 1, manifest["tied_parameters"])
                self.assertEqual({u[0] for u in tied[0]}, {0, len(stages) - 1}, tied)
                self.assertLessEqual({u[1] for u in tied[0]}, {"emb.weight", "head.weight"},
                                     tied)
                self.verify_pt2(models, "pt2_gpt", out)
                self.check_chain(models, "pt2_gpt", out)
                self.run_pt2(models, "pt2_gpt", out, len(stages), "--no-meta-cache")

    def test_gpt_splits_with_every_cost_model(self):
        models = self.needs_libtorch_2()
        example = pt2.files(models, "pt2_gpt")[".input.pt"]
        for cost, extra in (("params", ()), ("nodes", ()), ("flops", ("--example-input", example)),
                            ("profile", ("--example-input", example))):
            with self.subTest(cost=cost):
                out = os.path.join(self.tmp, "cost_" + cost)
                manifest = self.split_pt2_checked(models, "pt2_gpt", out, "--stages", "3",
                                                  "--cost", cost,
                                      *extra)
                self.assertEqual(len(manifest["stages"]), 3)
                self.assertEqual(manifest["cost_model"], cost)
                self.verify_pt2(models, "pt2_gpt", out)

    # -- LibTorch 2.x: train and join -------------------------------------

    def train_setup(self, name):
        """(models, data path, inputs, target, loss) for NAME."""
        models = self.needs_libtorch_2()
        loss = model_meta(name, models)["loss"]
        data = os.path.join(self.tmp, name + ".data.pt")
        inputs, target = pt2.write_pt2_data(data, models, name, loss)
        return models, data, inputs, target, loss

    def split_cached(self, models, name, stages):
        out = os.path.join(self.tmp, "%s.%d" % (name, stages))
        if not os.path.exists(os.path.join(out, "manifest.json")):
            self.split_pt2_checked(models, name, out, "--stages", stages)
        return os.path.join(out, "manifest.json")

    def train_pt2(self, ranks, manifest, data, loss, *args):
        run = training.train(ranks, manifest, data, "--loss", loss, "--steps", "20",
                             "--microbatches", MICROBATCHES, "--no-meta-cache", "--threads",
                             "1", *args)
        self.assertEqual(run.proc.returncode, 0, run.output)
        self.assertEqual(len(run.losses), 20, run.output)
        return run

    def check_pt2_training(self, name, optimizer, configs):
        models, data, inputs, target, loss = self.train_setup(name)
        opt = dict(momentum=0.9, weight_decay=1e-4) if optimizer == "sgd" else {}
        lr = 0.05 if optimizer == "sgd" else 1e-3
        refs = {}
        for reverse in (False, True):  # looped-bfs runs the backwards last to first
            refs[reverse] = pt2.reference_pt2(pt2.files(models, name)[".pt2"], inputs, target,
                                              20, MICROBATCHES, loss, optimizer, lr,
                                              reverse_backward=reverse, **opt)[0]
        for schedule, stages, ranks in configs:
            with self.subTest(schedule=schedule, stages=stages):
                manifest = self.split_cached(models, name, stages)
                run = self.train_pt2(ranks, manifest, data, loss, "--schedule", schedule,
                                     *(SGD if optimizer == "sgd" else ADAM))
                want = refs[schedule == "looped-bfs"]
                worst = training.losses_rel_diff(run.losses, want)
                self.assertLessEqual(worst, LOSS_TOL, "losses %s vs %s" % (run.losses, want))
                print("%s %s %-16s stages=%d ranks=%d: 20-step loss rel diff %.2g "
                      "(%.6g -> %.6g)" % (name, optimizer, schedule, stages, ranks, worst,
                                          want[0], want[-1]), file=sys.stderr)

    def test_gpt_trains_with_every_schedule_sgd(self):
        self.check_pt2_training("pt2_gpt", "sgd", CONFIGS)

    def test_mlp_trains_with_every_schedule_sgd(self):
        self.check_pt2_training("pt2_mlp", "sgd", CONFIGS)

    def test_gpt_trains_adam(self):
        self.check_pt2_training("pt2_gpt", "adam", ADAM_CONFIGS)

    def test_mlp_trains_adam(self):
        self.check_pt2_training("pt2_mlp", "adam", ADAM_CONFIGS)

    def check_save_join(self, name, stages):
        models, data, inputs, target, loss = self.train_setup(name)
        f = pt2.files(models, name)
        losses, params, _ = pt2.reference_pt2(f[".pt2"], inputs, target, 20, MICROBATCHES,
                                              loss, "sgd", 0.05, momentum=0.9,
                                              weight_decay=1e-4)
        manifest = self.split_cached(models, name, stages)
        saved = os.path.join(self.tmp, "saved")
        run = self.train_pt2(2, manifest, data, loss, "--schedule", "1f1b", *SGD, "--save", saved)
        self.assertLessEqual(training.losses_rel_diff(run.losses, losses), LOSS_TOL)
        # The ranks trained the weights where their mapped stage files hold them, in place
        # and copy-on-write: the files are as the split wrote them.
        split = load_manifest(os.path.dirname(manifest))
        for stage in split["stages"]:
            with open(os.path.join(os.path.dirname(manifest), stage["file"]), "rb") as fh:
                self.assertEqual(hashlib.sha256(fh.read()).hexdigest(), stage["sha256"],
                                 stage["file"])
        saved_manifest = load_manifest(saved)
        self.assertEqual(saved_manifest["format"], "pt2")
        # The saved stages hold the reference's trained weights.
        trained = pt2.trained_weights(saved)
        for key, value in trained.items():
            if key in params:
                d = training.rel_diff(value, params[key])
                self.assertLessEqual(d, WEIGHT_TOL, "%s off by %g" % (key, d))
        self.assertLessEqual({k for k in params if k != "emb.weight"}, set(trained))

        joined = os.path.join(self.tmp, "trained.pt2")
        proc = ppc("join", os.path.join(saved, "manifest.json"), "-o", joined)
        self.assertRegex(proc.stdout, JOIN_SUMMARY)
        self.assertEqual(proc.stderr, "")
        count, nparams, _, into = re.match(JOIN_SUMMARY, proc.stdout).groups()
        self.assertEqual((int(count), into), (stages, joined))
        ep = torch.export.load(joined)
        # Tied names counted once or each (the draft accepts both).
        unique = len({p.data_ptr() for p in ep.module().parameters()})
        self.assertIn(int(nparams), {unique, len(dict(ep.module().named_parameters(
            remove_duplicate=False)))}, proc.stdout)
        # The joined program holds the trained tensors ...
        state = ep.state_dict
        for key, value in trained.items():
            self.assertIn(key, state)
            self.assertTrue(torch.equal(state[key], value), key)
        original = torch.export.load(f[".pt2"]).state_dict
        self.assertEqual(set(state), set(original))
        self.assertFalse(all(torch.equal(state[k], original[k]) for k in state),
                         "nothing was trained")
        if name == "pt2_gpt":
            self.assertTrue(torch.equal(state["emb.weight"], state["head.weight"]))
        # ... and computes what the saved stages compute, at other batch sizes too.
        module = ep.module()
        for rows in (10, 3, 1):
            part = tuple(x[:rows] for x in inputs)
            with torch.no_grad():
                got = module(*part)
            assert_outputs_close(self, pt2.chain_stages(saved, part), got, RTOL, ATOL)
        r = ppc("verify", joined, os.path.join(saved, "manifest.json"), "--input",
                f[".input.pt"], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_gpt_train_save_join(self):
        self.check_save_join("pt2_gpt", 4)

    def test_mlp_train_save_join(self):
        self.check_save_join("pt2_mlp", 2)


if __name__ == "__main__":
    main()
