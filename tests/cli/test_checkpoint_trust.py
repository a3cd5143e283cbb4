"""Checkpoints a resume or `ppc join` must not trust (docs/training.md
"Checkpoints and resuming"): a checkpoint.json that nests too deeply or has
an out-of-range step, optimizer state of another dtype or layout, empty
state, files removed from both the directory and checkpoint.json are each
refused in one line naming the file and the newest intact checkpoint;
outputs of a resumed run or a join never land on or inside the checkpoint
they read (nor those of `ppc run` of a checkpoint's manifest); --keep never follows a step directory that is a link. In every
case nothing of the checkpoints changes and nothing is left behind.

One checkpoint directory is trained once (mlp, 2 stages on 2 ranks, Adam,
checkpoints after steps 1 and 2); each case works on a copy of it.

Needs PPC (the binary) and PPC_MODELS_DIR.
"""
import hashlib
import json
import os
import re
import shutil
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (MODELS, class_tmpdir, free_port, main, ppc,  # noqa: E402
                    rank_env, tmpdir)
from training import split_under, train, write_data  # noqa: E402

OPTS = ("--loss", "cross_entropy", "--no-meta-cache", "--quiet", "--optimizer", "adam",
        "--timeout", "60")


def tree(root):
    """{relative path: sha256 or link target} of everything below `root`."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[rel] = "dir"
    return out


class CheckpointTrustTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tmp = class_tmpdir(cls)
        cls.manifest = split_under(tmp, "mlp", 2)
        cls.data = os.path.join(tmp, "data.pt")
        write_data(cls.data, "mlp", "cross_entropy")
        cls.pristine = os.path.join(tmp, "ck")
        run = train(2, cls.manifest, cls.data, *OPTS, "--steps", "2", "--checkpoint-dir",
                    cls.pristine, "--checkpoint-every", "1")
        assert run.proc.returncode == 0, run.output

    def setUp(self):
        self.dir = tmpdir(self)
        self.ck = os.path.join(self.dir, "ck")
        shutil.copytree(self.pristine, self.ck, symlinks=True)
        self.newest = os.path.join(self.ck, "step-00000002")
        self.older = os.path.join(self.ck, "step-00000001")

    def newest_path(self, *names):
        return os.path.join(self.newest, *names)

    def rehash(self, step_dir, drop=()):
        """checkpoint.json of `step_dir` rewritten with every listed file's
        sha256, without the files in `drop`."""
        info_path = os.path.join(step_dir, "checkpoint.json")
        with open(info_path) as f:
            info = json.load(f)
        for name in drop:
            del info["files"][name]
        for name in info["files"]:
            with open(os.path.join(step_dir, name), "rb") as f:
                info["files"][name] = hashlib.sha256(f.read()).hexdigest()
        with open(info_path, "w") as f:
            json.dump(info, f, indent=2)

    def resume(self, *args):
        return train(2, self.manifest, self.data, *OPTS, "--steps", "4", "--resume", self.ck,
                     *args, rank_timeout=None)

    def assert_refused_unchanged(self, proc, message, before):
        """`proc` (a run or a join) exited 2 with `message` on every error
        line, and the directory is as it was (`before`)."""
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        lines = [l for l in proc.stderr.splitlines() if "error: " in l]
        self.assertTrue(lines, proc.stderr)
        self.assertTrue(any(l.endswith("error: " + message) for l in lines), proc.stderr)
        for line in lines:
            self.assertIn(message, line)
        self.assertEqual(tree(self.dir), before)

    def corrupt_note(self):
        return ("; the newest complete one is '%s': remove the corrupt one to resume from it"
                % self.older)

    def test_checkpoint_json_nesting_and_step_range(self):
        info = self.newest_path("checkpoint.json")
        with open(info) as f:
            text = f.read()
        # Nested 700 deep in a field the reader does not know, as arrays
        # inside objects: refused by resume and join alike, not a crash.
        with open(info, "w") as f:
            f.write(text.replace('"format"', '"x": ' + '[{"a": ' * 350 + '1' + '}]' * 350
                                 + ', "format"', 1))
        before = tree(self.dir)
        message = ("checkpoint file '%s' nests deeper than 256 levels" % info
                   + self.corrupt_note())
        self.assert_refused_unchanged(self.resume(), message, before)
        self.assert_refused_unchanged(ppc("join", self.ck, "-o", os.path.join(self.dir, "j.pt"),
                                          check=False),
                     message, before)
        # A step one past the range of an int by 5.
        with open(info, "w") as f:
            f.write(text.replace('"step": 2', '"step": 2147483653', 1))
        before = tree(self.dir)
        self.assert_refused_unchanged(
            self.resume(), "checkpoint file '%s' lacks step, batches_done, stages or world_size "
            "(integers from 0 to 2147483647)%s" % (info, self.corrupt_note()), before)

    def test_files_the_checkpoint_must_hold(self):
        # rng.rank1.pt and optim.stage0.pt gone from the directory and from
        # checkpoint.json: the manifest and the ranks say they belong.
        for name in ("rng.rank1.pt", "optim.stage0.pt"):
            os.remove(self.newest_path(name))
        self.rehash(self.newest, drop=("rng.rank1.pt", "optim.stage0.pt"))
        before = tree(self.dir)
        message = ("the checkpoint '%s' is corrupt: '%s' is missing%s"
                   % (self.newest, self.newest_path("optim.stage0.pt"), self.corrupt_note()))
        self.assert_refused_unchanged(self.resume(), message, before)
        self.assert_refused_unchanged(ppc("join", self.ck, "-o", os.path.join(self.dir, "j.pt"),
                                          check=False),
                     message, before)

    def optimizer_state_refused(self, stage, change, why):
        """Optimizer state of stage `stage` changed by `change` (rehashed)
        is refused by the rank that loads it, naming `why`."""
        name = "optim.stage%d.pt" % stage
        state = torch.load(self.newest_path(name))
        change(state)
        torch.save(state, self.newest_path(name))
        self.rehash(self.newest)
        before = tree(self.dir)
        self.assert_refused_unchanged(self.resume(), "the checkpoint '%s' is corrupt: '%s'%s%s"
                                      % (self.newest, self.newest_path(name), why,
                                         self.corrupt_note()), before)

    def test_optimizer_state_is_checked_not_converted(self):
        key = [k for k in torch.load(self.newest_path("optim.stage1.pt"))
               if k.endswith("#exp_avg_sq")][0]

        def double(state):
            state[key] = state[key].double()
        self.optimizer_state_refused(1, double,
                                     ": '%s' has dtype Double, its parameter Float" % key)
        shutil.rmtree(self.ck)
        shutil.copytree(self.pristine, self.ck, symlinks=True)
        weight = [k for k, v in torch.load(self.newest_path("optim.stage0.pt")).items()
                  if k.endswith("#exp_avg") and v.dim() == 2][0]

        def strided(state):
            t = state[weight]
            state[weight] = torch.empty(t.shape[1], t.shape[0]).t().copy_(t)
        self.optimizer_state_refused(0, strided,
                                     ": '%s' is not a dense contiguous tensor" % weight)

    def test_empty_optimizer_state(self):
        self.optimizer_state_refused(0, lambda state: state.clear(),
                                     " holds no optimizer state")

    def test_outputs_stay_outside_the_checkpoint(self):
        outside = os.path.join(self.dir, "out")
        os.mkdir(outside)
        os.symlink(self.newest_path("stage_0.pt"), os.path.join(outside, "trace.json"))
        cases = [
            ("--stats-json", self.newest_path("checkpoint.json"), "is inside"),
            ("--log-file", self.newest_path("rng.rank1.pt"), "is inside"),
            ("--trace", os.path.join(outside, "trace.json"), "is inside"),
            ("--save-grads", self.ck, "is inside"),
            ("--save", self.older, "is inside"),
            ("--save", self.dir, "holds"),
        ]
        before = tree(self.dir)
        for option, path, how in cases:
            with self.subTest(option=option, path=path):
                run = self.resume(option, path)
                self.assertEqual(run.returncode, 2, run.output)
                lines = [l for l in run.stderr.splitlines() if "error: " in l]
                self.assertTrue(lines, run.stderr)
                for line in lines:
                    self.assertRegex(line, r"%s '%s' %s --resume '%s'; refusing to "
                                     r"write into a checkpoint$"
                                     % (option, re.escape(self.ck) + "/grads.rank[01].pt"
                                        if option == "--save-grads" else re.escape(path),
                                        how, re.escape(self.ck)))
                self.assertEqual(tree(self.dir), before)
        # ppc join of one checkpoint's manifest, -o onto its optimizer state.
        target = self.newest_path("optim.stage1.pt")
        proc = ppc("join", self.newest_path("manifest.json"), "-o", target, check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(proc.stderr.strip(),
                         "error: --output '%s' is inside the checkpoint '%s'; refusing to write "
                         "into a checkpoint" % (target, self.newest))
        self.assertEqual(tree(self.dir), before)
        # ppc run of that manifest, --trace onto its checkpoint.json.
        target = self.newest_path("checkpoint.json")
        proc = ppc("run", self.newest_path("manifest.json"), "--input",
                   os.path.join(MODELS, "mlp.input.pt"), "--output",
                   os.path.join(self.dir, "y.pt"), "--trace", target, check=False,
                   env=rank_env(0, 1, free_port()))
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(proc.stderr.strip(),
                         "error: --trace '%s' is inside the checkpoint '%s'; refusing to write "
                         "into a checkpoint" % (target, self.newest))
        self.assertEqual(tree(self.dir), before)

    def test_keep_never_follows_a_link(self):
        # A step directory that links to a directory of the user's, shaped
        # like a checkpoint: refused before the first step, and untouched.
        mine = os.path.join(self.dir, "mine")
        shutil.copytree(self.older, mine)
        os.symlink(mine, os.path.join(self.ck, "step-00000000"))
        before = tree(self.dir)
        run = self.resume("--checkpoint-dir", self.ck, "--keep", "1")
        self.assertEqual(run.returncode, 2, run.output)
        self.assertIn("error: --checkpoint-dir '%s' holds 'step-00000000', which is not a ppc "
                      "checkpoint; refusing to write checkpoints there" % self.ck, run.stderr)
        self.assertEqual(tree(self.dir), before)
        # Resumed into another directory, the link is no checkpoint either;
        # the user's directory is left as it was.
        other = os.path.join(self.dir, "ck2")
        run = self.resume("--checkpoint-dir", other, "--keep", "1")
        self.assertEqual(run.returncode, 0, run.output)
        self.assertEqual(os.listdir(other), ["step-00000004"])
        after = tree(self.dir)
        self.assertEqual({k: v for k, v in after.items() if not k.startswith("ck2")}, before)


if __name__ == "__main__":
    main()
