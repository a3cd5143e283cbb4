"""`ppc train --checkpoint-dir / --checkpoint-every / --keep / --resume`
(docs/training.md "Checkpoints and resuming"): a run stopped after step k
and resumed gives the uninterrupted run's losses bitwise (SGD with momentum,
Adam; another schedule; another microbatch count within 1e-6); a rank killed
mid-checkpoint or at any moment leaves only complete checkpoints, and the
newest resumes bitwise; a corrupt one is refused naming the file; a full disk
keeps the previous checkpoint; ppc join reads a checkpoint directory.

Needs PPC (the binary) and PPC_MODELS_DIR; PPC_WRITE_FAULTS for the
disk-full test.
"""
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, class_tmpdir, free_port, main, ppc,  # noqa: E402
                    rank_env, tmpdir)
from training import STEP, reference, rel_diff, split_under, train, write_data  # noqa: E402

FAULTS = os.environ.get("PPC_WRITE_FAULTS", "")
CKPT_FILES = {"checkpoint.json", "manifest.json", "stage_0.pt", "stage_1.pt",
              "optim.stage0.pt", "optim.stage1.pt", "rng.rank0.pt", "rng.rank1.pt"}


def step_losses(run):
    """{global step: loss} of a run's "step N loss X" lines (exact text)."""
    return {int(m.group(1)): m.group(2) for m in STEP.finditer(run.proc.stdout)}


def error_lines(text):
    return [line for line in text.splitlines() if "error: " in line]


def steps_in(directory):
    """The step directories in `directory`, sorted."""
    return sorted(d for d in os.listdir(directory) if d.startswith("step-"))


class CheckpointTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.manifest = split_under(class_tmpdir(cls), "mlp", 2)

    def setUp(self):
        self.dir = tmpdir(self)
        self.data = os.path.join(self.dir, "data.pt")
        self.inputs, self.target = write_data(self.data, "mlp", "cross_entropy")

    def train_checkpointed(self, steps, *args, env=None):
        """ENV: extra environment, for a run on shorter timeouts."""
        extra = ("--loss", "cross_entropy", "--no-meta-cache", "--quiet", "--steps", str(steps))
        timeouts = {} if env is None else dict(rank_timeout=60, timeout=120)
        return train(2, self.manifest, self.data, *extra, *args, env=env, **timeouts)

    def ok(self, run):
        self.assertEqual(run.proc.returncode, 0, run.output)
        return step_losses(run)

    def verify_checkpoint(self, step_dir):
        """Every file checkpoint.json lists has its sha256; returns the info."""
        with open(os.path.join(step_dir, "checkpoint.json")) as f:
            info = json.load(f)
        import hashlib
        for name, digest in info["files"].items():
            with open(os.path.join(step_dir, name), "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest, name)
        self.assertEqual(set(info["files"]) | {"checkpoint.json"},
                         set(os.listdir(step_dir)))
        return info

    def test_resume_is_bitwise(self):
        for optimizer, more in (("sgd", ["--momentum", "0.9"]), ("adam", [])):
            with self.subTest(optimizer):
                opts = ["--optimizer", optimizer, "--lr", "0.01", *more]
                full_dir = os.path.join(self.dir, "full-" + optimizer)
                full = self.ok(self.train_checkpointed(8, *opts, "--microbatches", "2",
                                                       "--checkpoint-dir", full_dir,
                                                       "--checkpoint-every", "2", "--keep", "2"))
                # --keep 2: the two newest of steps 2, 4, 6, 8.
                self.assertEqual(steps_in(full_dir), ["step-00000006", "step-00000008"])
                info = self.verify_checkpoint(os.path.join(full_dir, "step-00000008"))
                self.assertEqual((info["step"], info["stages"], info["world_size"],
                                  info["optimizer"]["kind"]), (8, 2, 2, optimizer))
                self.assertEqual(set(os.listdir(os.path.join(full_dir, "step-00000008"))),
                                 CKPT_FILES)
                # The losses are the unsplit model's.
                ref, model = reference("mlp", self.inputs, self.target, 8, 2, "cross_entropy",
                                       optimizer, 0.01, momentum=0.9 if more else 0.0)
                for s in range(1, 9):
                    self.assertAlmostEqual(float(full[s]), ref[s - 1], delta=1e-5 * abs(ref[s - 1]))

                part_dir = os.path.join(self.dir, "part-" + optimizer)
                first = self.ok(self.train_checkpointed(4, *opts, "--microbatches", "2",
                                                        "--checkpoint-dir", part_dir))
                self.assertEqual(first, {s: full[s] for s in range(1, 5)})
                self.assertEqual(steps_in(part_dir), ["step-00000004"])
                # Resumed into the same directory: steps 5..8 bitwise.
                resumed = self.ok(self.train_checkpointed(8, *opts, "--microbatches", "2",
                                                          "--resume", part_dir,
                                                          "--checkpoint-dir", part_dir))
                self.assertEqual(resumed, {s: full[s] for s in range(5, 9)})
                self.assertEqual(steps_in(part_dir), ["step-00000004", "step-00000008"])
                # The checkpoints of both runs hold the same bytes, but for
                # the generators: each process starts with its own seed, and
                # the resumed one has step 4's (no step draws from them).
                a, b, c = (self.verify_checkpoint(os.path.join(d, "step-0000000%d" % s))["files"]
                           for d, s in ((full_dir, 8), (part_dir, 8), (part_dir, 4)))
                rng = {"rng.rank0.pt", "rng.rank1.pt"}
                self.assertEqual({k: v for k, v in a.items() if k not in rng},
                                 {k: v for k, v in b.items() if k not in rng})
                self.assertEqual({k: b[k] for k in rng}, {k: c[k] for k in rng})
                self.assertNotEqual(a["rng.rank0.pt"], b["rng.rank0.pt"])
                # Adam's state is the reference's.
                if optimizer == "adam":
                    state = torch.load(os.path.join(part_dir, "step-00000008",
                                                    "optim.stage0.pt"))
                    self.assertEqual(int(state["layers.0.0.weight#step"]), 8)
                    self.assertEqual({k.split("#")[1] for k in state},
                                     {"step", "exp_avg", "exp_avg_sq"})
                else:
                    state = torch.load(os.path.join(part_dir, "step-00000008",
                                                    "optim.stage1.pt"))
                    self.assertTrue(all(k.endswith("#momentum_buffer") for k in state))

                # ppc join DIR: the newest checkpoint's weights, as torch.jit.load
                # reads them.
                joined = os.path.join(self.dir, "joined-%s.pt" % optimizer)
                ppc("join", part_dir, "-o", joined)
                got = dict(torch.jit.load(joined).named_parameters())
                for name, p in model.named_parameters():
                    self.assertLess(rel_diff(got[name], p), 1e-4, name)
                stage0 = dict(torch.jit.load(os.path.join(
                    part_dir, "step-00000008", "stage_0.pt")).named_parameters())
                for name, p in stage0.items():
                    self.assertTrue(torch.equal(got[name], p), name)
                if optimizer == "adam":
                    self.adam_dir, self.adam_full = part_dir, full

        # Another schedule, same microbatches: bitwise; other microbatches:
        # within 1e-6 (the sums run in another order).
        copy = os.path.join(self.dir, "copy")
        shutil.copytree(self.adam_dir, copy)
        shutil.rmtree(os.path.join(copy, "step-00000008"))
        opts = ["--optimizer", "adam", "--lr", "0.01", "--resume", copy]
        gpipe = self.ok(self.train_checkpointed(8, *opts, "--microbatches", "2", "--schedule",
                                                "gpipe"))
        self.assertEqual(gpipe, {s: self.adam_full[s] for s in range(5, 9)})
        more = self.ok(self.train_checkpointed(8, *opts, "--microbatches", "4", "--schedule",
                                               "gpipe"))
        self.assertEqual(sorted(more), [5, 6, 7, 8])
        for s in range(5, 9):
            self.assertAlmostEqual(float(more[s]), float(self.adam_full[s]),
                                   delta=1e-6 * abs(float(self.adam_full[s])))

    def test_adamw_and_replicas_resume_bitwise(self):
        # AdamW (its state has a class of its own in LibTorch), and two
        # data-parallel replicas, each holding both stages on one rank, of
        # which replica 0 writes the checkpoints and both resume from them.
        for name, opts in (("adamw", ["--optimizer", "adamw"]),
                           ("replicas", ["--data-parallel", "2", "--momentum", "0.9"])):
            with self.subTest(name):
                opts = [*opts, "--lr", "0.01", "--microbatches", "2"]
                ck = os.path.join(self.dir, "ck-" + name)
                full = self.ok(self.train_checkpointed(4, *opts, "--checkpoint-dir", ck,
                                                       "--checkpoint-every", "2"))
                self.assertEqual(sorted(full), [1, 2, 3, 4])
                self.assertEqual(steps_in(ck), ["step-00000002", "step-00000004"])
                info = self.verify_checkpoint(os.path.join(ck, "step-00000002"))
                state = torch.load(os.path.join(ck, "step-00000002", "optim.stage0.pt"))
                if name == "adamw":
                    self.assertEqual(info["optimizer"]["kind"], "adamw")
                    self.assertEqual({k.split("#")[1] for k in state},
                                     {"step", "exp_avg", "exp_avg_sq"})
                    self.assertEqual(int(state["layers.0.0.weight#step"]), 2)
                else:
                    self.assertEqual(info["world_size"], 1)  # one pipeline's ranks
                    self.assertTrue(state and all(k.endswith("#momentum_buffer")
                                                  for k in state))
                shutil.rmtree(os.path.join(ck, "step-00000004"))
                resumed = self.ok(self.train_checkpointed(4, *opts, "--resume", ck))
                self.assertEqual(resumed, {s: full[s] for s in (3, 4)})

    def test_resume_from_an_unfit_checkpoint_is_refused(self):
        ck = os.path.join(self.dir, "ck")
        self.ok(self.train_checkpointed(4, "--checkpoint-dir", ck, "--checkpoint-every", "2",
                                        "--keep", "5"))
        self.assertEqual(steps_in(ck), ["step-00000002", "step-00000004"])
        newest = os.path.join(ck, "step-00000004")

        def refused(run, message):
            self.assertEqual(run.proc.returncode, 2, run.output)
            self.assertIn("error: " + message, run.proc.stderr)
            for line in error_lines(run.proc.stderr):
                self.assertIn(message, line)

        # Nothing left to train.
        refused(self.train_checkpointed(4, "--resume", ck),
                "--resume: the checkpoint '%s' is after step 4; --steps 4 leaves no step to "
                "train" % newest)
        # Another optimizer.
        refused(self.train_checkpointed(6, "--resume", ck, "--optimizer", "adam"),
                "the checkpoint '%s' was trained with --optimizer sgd, this run with adam: "
                "resume with the same optimizer" % newest)
        # Another number of stages.
        three = split_under(self.dir, "mlp", 3)
        r = train(3, three, self.data, "--loss", "cross_entropy", "--steps", "6",
                  "--no-meta-cache", "--resume", ck)
        refused(r, "the checkpoint '%s' has 2 stages, the manifest 3" % newest)
        # A user's file in --checkpoint-dir.
        user = os.path.join(self.dir, "user")
        os.mkdir(user)
        with open(os.path.join(user, "notes.txt"), "w") as f:
            f.write("mine")
        # (Refused before any rank starts: one process will do.)
        one = ("train", self.manifest, "--data", self.data, "--resume", ck)
        solo = rank_env(0, 1, free_port())
        proc = ppc(*one, "--checkpoint-dir", user, check=False, env=solo)
        self.assertEqual((proc.returncode, proc.stderr),
                         (2, "error: --checkpoint-dir '%s' holds 'notes.txt', which is not a "
                          "ppc checkpoint; refusing to write checkpoints there\n" % user))
        with open(os.path.join(newest, "notes.txt"), "w") as f:
            f.write("mine")
        proc = ppc(*one, "--checkpoint-dir", ck, check=False, env=solo)
        self.assertEqual((proc.returncode, proc.stderr),
                         (2, "error: --checkpoint-dir '%s': '%s' is not a file of a ppc "
                          "checkpoint; refusing to write checkpoints there\n" % (
                              ck, os.path.join(newest, "notes.txt"))))
        os.remove(os.path.join(newest, "notes.txt"))
        inside = os.path.join(newest, "manifest.json")
        proc = ppc("train", inside, *one[2:], "--checkpoint-dir", ck, check=False, env=solo)
        self.assertEqual((proc.returncode, proc.stderr),
                         (2, "error: --checkpoint-dir '%s' holds the manifest ('%s'); refusing "
                          "to overwrite it\n" % (ck, inside)))
        proc = ppc("train", self.manifest, "--data", self.data, "--checkpoint-every", "2",
                   check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--checkpoint-every requires --checkpoint-dir", proc.stderr)

        # Staged parts and a step directory without checkpoint.json are no
        # checkpoints: resume takes step 4.
        os.mkdir(os.path.join(ck, "step-00000009.tmp-0-1-abcdef"))
        shutil.copytree(newest, os.path.join(ck, "step-00000007"))
        os.remove(os.path.join(ck, "step-00000007", "checkpoint.json"))
        run = train(2, self.manifest, self.data, "--loss", "cross_entropy", "--steps", "5",
                    "--no-meta-cache", "--resume", ck)
        self.assertEqual(run.proc.returncode, 0, run.output)
        self.assertIn("resumed from %s (after step 4)" % newest, run.proc.stderr)
        self.assertEqual(sorted(step_losses(run)), [5])
        shutil.rmtree(os.path.join(ck, "step-00000009.tmp-0-1-abcdef"))
        shutil.rmtree(os.path.join(ck, "step-00000007"))

        # A corrupt newest checkpoint is refused, naming the file and the
        # older complete one; ppc join refuses it likewise.
        stage = os.path.join(newest, "stage_1.pt")
        with open(stage, "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 1]))
        message = ("the checkpoint '%s' is corrupt: '%s' does not match its sha256 in "
                   "checkpoint.json; the newest complete one is '%s': remove the corrupt one "
                   "to resume from it" % (newest, stage, os.path.join(ck, "step-00000002")))
        refused(self.train_checkpointed(6, "--resume", ck), message)
        proc = ppc("join", ck, "-o", os.path.join(self.dir, "j.pt"), check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr.strip(), "error: " + message)

    def start_train_ranks(self, steps, ck, env=None, extra=()):
        """The two ranks of `ppc train` as processes of their own."""
        port = free_port()
        args = [PPC, "train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                "--no-meta-cache", "--quiet", "--timeout", "10", "--steps", str(steps),
                "--checkpoint-dir", ck, "--checkpoint-every", "1", "--keep", "100", *extra]
        return [subprocess.Popen(args, env=rank_env(r, 2, port, **(env or {})),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for r in range(2)]

    def communicate_all(self, procs):
        out = []
        for p in procs:
            o, e = p.communicate(timeout=60)
            out.append((p.returncode, o, e))
        return out

    def assert_only_complete(self, ck):
        """Every step directory of `ck` is a whole checkpoint."""
        for name in steps_in(ck):
            if ".tmp-" not in name:
                self.verify_checkpoint(os.path.join(ck, name))

    def test_rank_killed_mid_checkpoint_leaves_only_complete_ones(self):
        full = self.ok(self.train_checkpointed(8, "--optimizer", "adam"))
        for victim in (0, 1):
            with self.subTest(victim=victim):
                ck = os.path.join(self.dir, "killed%d" % victim)
                procs = self.start_train_ranks(8, ck,
                                               {"PPC_TEST_CHECKPOINT_PAUSE": "5:%d" % victim},
                                   ["--optimizer", "adam"])
                # The victim has written its files of checkpoint 5 and waits.
                deadline = time.time() + 60
                mine = "rng.rank%d.pt" % victim
                while not glob.glob(os.path.join(ck, "step-00000005.tmp-*", mine)):
                    self.assertLess(time.time(), deadline)
                    time.sleep(0.02)
                # Killed, and its peer stopped as a launcher stops it.
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                procs[1 - victim].send_signal(signal.SIGTERM)
                results = self.communicate_all(procs)
                self.assertEqual(results[victim][0], -signal.SIGKILL)
                self.assertNotEqual(results[1 - victim][0], 0)
                self.assertEqual([d for d in steps_in(ck) if ".tmp-" not in d],
                                 ["step-0000000%d" % s for s in range(1, 5)])
                self.assert_only_complete(ck)
                run = self.train_checkpointed(8, "--optimizer", "adam", "--resume", ck,
                                              "--checkpoint-dir", ck, "--checkpoint-every", "1",
                                              "--keep", "100")
                self.assertEqual(self.ok(run), {s: full[s] for s in range(5, 9)})
                # The killed run's staged directory is gone.
                self.assertEqual(steps_in(ck), ["step-0000000%d" % s for s in range(1, 9)])

        # Killed at a random moment between (or during) checkpoints.
        rng = random.Random(17)
        for attempt in range(1):
            ck = os.path.join(self.dir, "random%d" % attempt)
            procs = self.start_train_ranks(8, ck, extra=["--optimizer", "adam"])
            deadline = time.time() + 60
            while not os.path.isdir(ck) or not steps_in(ck):
                self.assertLess(time.time(), deadline)
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.02))
            victim = rng.randrange(2)
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            procs[1 - victim].send_signal(signal.SIGTERM)
            self.communicate_all(procs)
            self.assert_only_complete(ck)
            done = [d for d in steps_in(ck) if ".tmp-" not in d]
            if not done or done[-1] == "step-00000008":
                continue  # killed before the first or after the last
            k = int(done[-1][5:])
            run = self.train_checkpointed(8, "--optimizer", "adam", "--resume", ck,
                                          "--checkpoint-dir", ck)
            self.assertEqual(self.ok(run), {s: full[s] for s in range(k + 1, 9)})
            self.assertEqual([d for d in steps_in(ck) if ".tmp-" in d], [])

    def test_disk_full_keeps_the_earlier_checkpoint(self):
        if not (FAULTS and os.path.exists(FAULTS)):
            self.skipTest("PPC_WRITE_FAULTS is not built")
        ck = os.path.join(self.dir, "ck")
        self.ok(self.train_checkpointed(2, "--checkpoint-dir", ck))
        before = self.verify_checkpoint(os.path.join(ck, "step-00000002"))
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(ck, "*", "*")))
        for fill in (0, size // 4):
            env = dict(LD_PRELOAD=FAULTS, PPC_FAULT_DIR=ck, PPC_FAULT_ENOSPC_AFTER=str(fill))
            r = self.train_checkpointed(4, "--resume", ck, "--checkpoint-dir", ck, env=env)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("No space left on device", r.stderr)
            for rank in range(2):
                lines = [l for l in r.stderr.splitlines() if l.startswith("[rank %d] error: " % rank)]
                self.assertLessEqual(len(lines), 1, r.stderr)
            self.assertEqual(os.listdir(ck), ["step-00000002"])
            self.assertEqual(self.verify_checkpoint(os.path.join(ck, "step-00000002")), before)


if __name__ == "__main__":
    main()
