#!/usr/bin/python3
"""Tests that nothing a user owns is lost when ppc writes: every output of
every command is refused where it would replace something the command reads
or keeps (one guard, lib/OutputGuard.h); a disk that fills at any point of
any write leaves exit 2, one error line, the user's files as they were and no
temporary file; a save killed at any moment leaves the old complete save or
the new complete one.

The full disk and the kills come from tests/faults/WriteFaults.cpp, an
LD_PRELOAD library (PPC_WRITE_FAULTS) that fails writes under a directory
after N bytes with ENOSPC or raises a signal at the N-th file operation.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models),
PPC_WRITE_FAULTS (the library; the disk and kill tests skip without it).
"""
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, class_tmpdir, launch, main, model_path, ppc, split_at,  # noqa: E402
                    tmpdir)
from training import train, write_data  # noqa: E402

FAULTS = os.environ.get("PPC_WRITE_FAULTS", "")


def tree_digests(root):
    """{relative path: sha256 or 'dir'} of everything under `root`."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def temporaries(root):
    """Paths under `root` that look like a temporary ppc left behind."""
    return [p for p in tree_digests(root) if ".tmp" in os.path.basename(p)
            or ".old-" in os.path.basename(p) or os.path.basename(p) == ".ppc-staged"]


def lines_starting_error(text):
    return [line for line in text.splitlines() if line.startswith("error:")]


class OutputGuardTest(unittest.TestCase):
    """Each output option refused onto each kind of file the command keeps
    (instances other than the ones in the issue). Each test gets its own
    folder with a copy of the model, of its split and of the training data,
    made once per class (setUpClass): the copied manifest names the test's
    copy of the model as its source, as a split of that copy would."""

    @classmethod
    def setUpClass(cls):
        cls.original = class_tmpdir(cls)
        model = os.path.join(cls.original, "model.pt")
        shutil.copy(model_path("mlp"), model)
        ppc("split", model, "--stages", "2", "-o", os.path.join(cls.original, "s"))
        write_data(os.path.join(cls.original, "data.pt"), "mlp", "cross_entropy")

    def setUp(self):
        self.dir = tmpdir(self)
        for name in os.listdir(self.original):
            copy = shutil.copytree if name == "s" else shutil.copy2
            copy(os.path.join(self.original, name), os.path.join(self.dir, name))
        self.model = os.path.join(self.dir, "model.pt")
        self.out = os.path.join(self.dir, "s")
        self.manifest = os.path.join(self.out, "manifest.json")
        with open(self.manifest) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["source"]["path"], os.path.join(self.original, "model.pt"))
        manifest["source"]["path"] = self.model
        with open(self.manifest, "w") as f:
            json.dump(manifest, f, indent=2)
        self.input = model_path("mlp", ".input.pt")
        self.data = os.path.join(self.dir, "data.pt")

    def assert_refused(self, proc, needle):
        """Exit 2 and one error line with `needle`: from ppc, or from each
        rank that reported (ppc launch prefixes "[rank R] ")."""
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        ranks = [l for l in proc.stderr.splitlines() if re.match(r"\[rank \d+\] error: ", l)]
        lines = ranks or lines_starting_error(proc.stderr)
        self.assertTrue(lines, proc.stderr)
        self.assertTrue(ranks or len(lines) == 1, proc.stderr)
        for line in lines:
            self.assertIn(needle, line)

    def assert_unchanged(self, before, root=None):
        self.assertEqual(tree_digests(root or self.dir), before)

    def test_run_refuses_outputs_over_its_inputs(self):
        before = tree_digests(self.dir)
        stage = os.path.join(self.out, "stage_1.pt")
        r = launch(2, "run", self.manifest, "--input", self.input, "--output",
                   os.path.join(self.dir, "o.pt"), "--trace", stage)
        self.assert_refused(r,
                            f"--trace '{stage}' is the file of stage 1; refusing to overwrite it")
        r = launch(2, "run", self.manifest, "--input", self.input, "--output", self.model)
        self.assert_refused(r, f"--output '{self.model}' is the model the manifest was split from")
        meta = os.path.join(self.dir, "meta.json")
        with open(meta, "w") as f:
            f.write("{}")
        before = tree_digests(self.dir)
        r = launch(2, "run", self.manifest, "--input", self.input, "--input-meta", meta,
                   "--output", meta)
        self.assert_refused(r, f"--output '{meta}' is the --input-meta file")
        both = os.path.join(self.dir, "both.pt")
        r = launch(2, "run", self.manifest, "--input", self.input, "--output", both,
                   "--trace", both)
        self.assert_refused(r, f"--trace '{both}' is also --output; give each output its own path")
        # A link to a kept file is the kept file.
        link = os.path.join(self.dir, "link.pt")
        os.symlink(self.input, link)
        before = tree_digests(self.dir)
        r = launch(2, "run", self.manifest, "--input", self.input, "--output",
                   os.path.join(self.dir, "x.pt"), "--trace", link)
        self.assert_refused(r, f"--trace '{link}' is the input file")
        self.assert_unchanged(before)

    def test_run_meta_cache_and_world(self):
        cache = os.path.join(self.out, "meta_cache.rank1of2.json")
        r = launch(2, "run", self.manifest, "--input", self.input, "--output", cache)
        self.assert_refused(r, f"--output '{cache}' is a meta cache file")
        # An absurd WORLD_SIZE fails at once, before any work per rank.
        env = dict(os.environ, RANK="0", WORLD_SIZE="2000000000", LOCAL_RANK="0",
                   LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
        r = subprocess.run([PPC, "run", self.manifest, "--input", self.input, "--output",
                            os.path.join(self.dir, "o.pt")], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(lines_starting_error(r.stderr)), 1, r.stderr)
        self.assertIn("2000000000", r.stderr)

    def test_train_refuses_outputs_over_its_inputs(self):
        before = tree_digests(self.dir)
        r = launch(2, "train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                   "--trace", self.data)
        self.assert_refused(r,
                            f"--trace '{self.data}' is the --data file; refusing to overwrite it")
        # --save-grads into a missing directory fails before the first step.
        missing = os.path.join(self.dir, "missing")
        r = launch(2, "train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                   "--save-grads", missing)
        self.assert_refused(r, f"--save-grads '{missing}' is not an existing directory")
        self.assertNotIn("step 1", r.stdout)
        self.assert_unchanged(before)
        # --save follows ppc split -o's rule: a user's directory is not replaced ...
        user = os.path.join(self.dir, "user")
        os.mkdir(user)
        with open(os.path.join(user, "manifest.json"), "w") as f:
            f.write('{"mine": true}')
        shutil.copy(self.model, os.path.join(user, "stage_0.pt"))
        before = tree_digests(self.dir)
        r = launch(2, "train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                   "--save", user)
        self.assert_refused(r, f"--save '{user}' holds a manifest.json that ppc cannot read as a "
                            "manifest; refusing to replace it")
        self.assertNotIn("step 1", r.stdout)
        # ... nor one holding what the run reads.
        holder = os.path.join(self.dir, "holder")
        os.mkdir(holder)
        data = os.path.join(holder, "stage_0.pt")
        shutil.copy(self.data, data)
        before = tree_digests(self.dir)
        r = launch(2, "train", self.manifest, "--data", data, "--loss", "cross_entropy",
                   "--save", holder)
        self.assert_refused(r, f"--save '{holder}' holds the --data file ('{data}'); refusing to "
                            "overwrite it")
        self.assert_unchanged(before)

    def test_other_commands_refuse_outputs_over_inputs(self):
        before = tree_digests(self.dir)
        cache = os.path.join(self.out, "meta_cache.rank0of1.json")
        r = ppc("inspect", self.manifest, "--dot", cache, check=False)
        self.assert_refused(r, f"--dot '{cache}' is a meta cache file; refusing to overwrite it")
        r = ppc("inspect", self.manifest, "--dot", self.model, check=False)
        self.assert_refused(r, f"--dot '{self.model}' is the model the manifest was split from")
        csv = os.path.join(self.dir, "s.csv")
        ppc("schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2",
            "--csv", csv)
        before = tree_digests(self.dir)
        r = ppc("schedule", "--from-csv", csv, "--stages", "2", "--microbatches", "2",
                "--csv", csv, check=False)
        self.assert_refused(r, f"--csv '{csv}' is the --from-csv file; refusing to overwrite it")
        trace = os.path.join(self.dir, "t.json")
        r = launch(2, "run", self.manifest, "--input", self.input, "--output",
                   os.path.join(self.dir, "o.pt"), "--trace", trace)
        self.assertEqual(r.returncode, 0, r.stderr)
        before = tree_digests(self.dir)
        r = ppc("trace", "plot", trace, "-o", trace, check=False)
        self.assert_refused(r, f"--output '{trace}' is the trace; refusing to overwrite it")
        r = ppc("join", self.manifest, "-o", os.path.join(self.out, "stage_0.pt"), check=False)
        self.assert_refused(r, "is the file of stage 0; refusing to overwrite it")
        r = ppc("split", self.model, "--stages", "2", "-o", self.dir, check=False)
        self.assert_refused(r, f"output directory '{self.dir}' holds the model ('{self.model}'); "
                            "refusing to overwrite it")
        self.assert_unchanged(before)


@unittest.skipUnless(FAULTS and os.path.exists(FAULTS), "PPC_WRITE_FAULTS is not built")
class DiskFullTest(unittest.TestCase):
    """Every command that writes, the disk full at three points of its
    writes (before the first, in the first, halfway): exit 2, one error line
    (the writing rank's), nothing of the user's changed, no temporary left.
    Each command first runs where nothing fails, for an earlier output that
    must survive; the outputs of one launch (ppc run's --output and --trace;
    ppc train's --save, --save-grads and --trace) get theirs from one such
    run (first_runs()), and each still fills the disk on its own."""

    def setUp(self):
        self.dir = tmpdir(self)
        self.work = os.path.join(self.dir, "work")  # what the commands read
        self.user = os.path.join(self.dir, "user")  # where they write
        os.mkdir(self.work)
        os.mkdir(self.user)
        self.model = os.path.join(self.work, "model.pt")
        shutil.copy(model_path("mlp"), self.model)
        self.manifest = os.path.join(self.work, "s", "manifest.json")
        ppc("split", self.model, "--stages", "2", "-o", os.path.dirname(self.manifest))
        self.input = model_path("mlp", ".input.pt")
        self.data = os.path.join(self.work, "data.pt")
        write_data(self.data, "mlp", "cross_entropy")
        # What "trace plot" reads: a copy of the trace "run --trace" writes
        # where nothing fails (commands() lists that one earlier).
        self.trace = os.path.join(self.work, "t.json")

    def commands(self):
        """{name: (ranks, arguments, what it writes: a path under the user's
        folder, or the start of the names it writes there)}, in the order
        test_disk_full_keeps_every_commands_earlier_output runs them."""
        u = lambda name: os.path.join(self.user, name)  # noqa: E731
        train = ["train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                 "--no-meta-cache", "--steps", "2"]
        run = ["run", self.manifest, "--input", self.input, "--no-meta-cache"]
        return {
            "run --output": (2, run + ["--output", u("out.pt")], "out.pt"),
            "run --trace": (2, run + ["--output", os.path.join(self.work, "o2.pt"),
                                      "--trace", u("run.trace.json")], "run.trace.json"),
            "split": (1, ["split", self.model, "--stages", "3", "-o", u("split")], "split/"),
            "join": (1, ["join", self.manifest, "-o", u("joined.pt")], "joined.pt"),
            "inspect --dot": (1, ["inspect", self.manifest, "--dot", u("g.dot")], "g.dot"),
            "schedule --csv": (1, ["schedule", "--schedule", "zb-h1", "--stages", "4",
                                   "--microbatches", "8", "--csv", u("s.csv")], "s.csv"),
            "trace plot": (1, ["trace", "plot", self.trace, "-o", u("t.svg")], "t.svg"),
            "train --save": (2, train + ["--save", u("saved")], "saved/"),
            "train --save-grads": (2, train + ["--save-grads", self.user], "grads.rank"),
            "train --trace": (2, train + ["--trace", u("train.trace.json")],
                              "train.trace.json"),
        }

    def first_runs(self):
        """{names: arguments}: one run, where nothing fails, that writes the
        outputs of the commands NAMES (2 ranks each) as each would alone."""
        u = lambda name: os.path.join(self.user, name)  # noqa: E731
        return {
            ("run --output", "run --trace"):
                ["run", self.manifest, "--input", self.input, "--no-meta-cache",
                 "--output", u("out.pt"), "--trace", u("run.trace.json")],
            ("train --save", "train --save-grads", "train --trace"):
                ["train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                 "--no-meta-cache", "--steps", "2", "--save", u("saved"),
                 "--save-grads", self.user, "--trace", u("train.trace.json")],
        }

    def execute(self, ranks, args, env):
        if ranks == 1:
            return subprocess.run([PPC, *args], capture_output=True, text=True, env=env,
                                  timeout=300)
        return launch(ranks, *args, env=env, timeout=300)

    def test_disk_full_keeps_every_commands_earlier_output(self):
        commands = self.commands()
        together = self.first_runs()
        written = {}  # name: the bytes the command's run where nothing fails wrote
        for name, (ranks, args, output) in commands.items():
            with self.subTest(name):
                # An earlier output of the same command: it must survive.
                # The commands that share a first_runs() entry get theirs
                # from its one run (the fills below still run each alone).
                if name not in written:
                    names = next((n for n in together if name in n), (name,))
                    earlier = tree_digests(self.user)
                    first = self.execute(ranks, together.get(names, args), None)
                    self.assertEqual(first.returncode, 0, first.stderr)
                    after = tree_digests(self.user)
                    for n in names:
                        written[n] = sum(os.path.getsize(os.path.join(self.user, p))
                                         for p, h in after.items()
                                         if h != "dir" and earlier.get(p) != h
                                         and p.startswith(commands[n][2]))
                        self.assertGreater(written[n], 0, n)
                    if "run --trace" in names:
                        shutil.copy(os.path.join(self.user, "run.trace.json"), self.trace)
                before = tree_digests(self.user)
                # Each process fills its own disk: a rank writes its share.
                # Full at once, after 1 byte (the first write cut short)
                # and halfway (a later write of the many of split's and
                # join's outputs; within the first write of the others,
                # which ppc writes in one or two, the first up to 64 KiB).
                # Fills of 100 bytes and a third of the share, which this
                # ran until December 2026, cut the same writes short.
                share = written[name] // ranks
                for fill in sorted({0, 1, share // 2}):
                    env = dict(os.environ, LD_PRELOAD=FAULTS, PPC_FAULT_DIR=self.user,
                               PPC_FAULT_ENOSPC_AFTER=str(fill))
                    r = self.execute(ranks, args, env)
                    what = f"{name} with the disk full after {fill} bytes"
                    self.assertEqual(r.returncode, 2, (what, r.stderr))
                    if ranks == 1:
                        self.assertEqual(len(lines_starting_error(r.stderr)), 1, (what, r.stderr))
                    else:
                        # One line from each rank that reports (the launcher
                        # adds its own last line).
                        for rank in range(ranks):
                            lines = [l for l in r.stderr.splitlines()
                                     if l.startswith(f"[rank {rank}] error: ")]
                            self.assertLessEqual(len(lines), 1, (what, r.stderr))
                    self.assertIn("No space left on device", r.stderr, what)
                    self.assertNotIn("terminate called", r.stderr, what)
                    self.assertEqual(tree_digests(self.user), before, what)
                    self.assertEqual(temporaries(self.dir), [], what)


@unittest.skipUnless(FAULTS and os.path.exists(FAULTS), "PPC_WRITE_FAULTS is not built")
class SaveKillTest(unittest.TestCase):
    """`ppc train --save DIR` over an earlier save, each rank killed at each
    file operation of the save: DIR is then the old save or the new one,
    whole (ppc join reads it). "Each" but the second of two writes of one
    file and of two fsyncs in a row, which leave the files as the first
    does (kill_points(); 11 of rank 0's 16 operations, 3 of rank 1's 4)."""

    def setUp(self):
        self.dir = tmpdir(self)
        self.work = os.path.join(self.dir, "work")
        os.mkdir(self.work)
        self.manifest = os.path.join(self.work, "s", "manifest.json")
        split_at("mlp", 2, os.path.dirname(self.manifest))
        self.data = os.path.join(self.work, "data.pt")
        write_data(self.data, "mlp", "cross_entropy")
        self.saves = os.path.join(self.dir, "saves")
        os.mkdir(self.saves)
        self.save = os.path.join(self.saves, "saved")
        self.joined = set()  # the tree_digests()s of DIR that ppc join has read

    def train_and_save(self, steps, save, env=None):
        return train(2, self.manifest, self.data, "--loss", "cross_entropy", "--no-meta-cache",
                     "--steps", str(steps), "--save", save, env=env, rank_timeout=None,
                     timeout=120)

    def manifest_of(self, save):
        with open(os.path.join(save, "manifest.json")) as f:
            return json.load(f)

    def assert_whole(self, old, new, what):
        got = self.manifest_of(self.save)
        self.assertIn(got, (old, new), what)
        files = tree_digests(self.save)
        self.assertEqual(files.keys(), {"manifest.json", "stage_0.pt", "stage_1.pt"}, what)
        # ppc join reads each distinct set of bytes once: most kills leave
        # DIR byte for byte as an earlier one did, which joined then.
        key = tuple(sorted(files.items()))
        if key not in self.joined:
            joined = os.path.join(self.dir, "joined.pt")
            ppc("join", os.path.join(self.save, "manifest.json"), "-o", joined)
            self.joined.add(key)
        return got == new

    def kill_points(self, log, rank):
        """The operations of RANK's part of a save (PPC_FAULT_LOG's lines
        under LOG, 1-based) at which a kill leaves something a kill at the
        one before does not: all of them but a write that follows a write
        of the same file (both leave the file partly written) and an fsync
        that follows an fsync (the files on disk are the same). Then the
        number after the last, at which the save completes. Every number
        below 60 when the library writes no log (an older build)."""
        try:
            with open("%s.%d" % (log, rank)) as f:
                ops = [line.rstrip("\n").split(" ", 2) for line in f]
        except FileNotFoundError:
            return list(range(1, 60))
        self.assertEqual([int(n) for n, _, _ in ops], list(range(1, len(ops) + 1)))
        points = []
        for k, (n, kind, path) in enumerate(ops):
            if k and ((kind == "write" and ops[k - 1][1:] == [kind, path])
                      or (kind == "fsync" and ops[k - 1][1] == "fsync")):
                continue
            points.append(int(n))
        return points + [len(ops) + 1]

    def test_kill_each_rank_at_each_operation(self):
        # The saves of 1 step and of 3, each written once where nothing is
        # killed (training on the CPU is deterministic: the same bytes every
        # run), the second over the first, as each kill below saves, with
        # each rank's operations logged.
        r = self.train_and_save(1, self.save)
        self.assertEqual(r.returncode, 0, r.stderr)
        one = self.manifest_of(self.save)
        log = os.path.join(self.dir, "operations")
        r = self.train_and_save(3, self.save, dict(LD_PRELOAD=FAULTS, PPC_FAULT_DIR=self.saves,
                                                   PPC_FAULT_LOG=log))
        self.assertEqual(r.returncode, 0, r.stderr)
        three = self.manifest_of(self.save)
        self.assertNotEqual(one, three)
        for sig, ranks in (("KILL", (0, 1)), ("TERM", (0,))):
            for rank in ranks:
                for at in self.kill_points(log, rank):
                    what = f"rank {rank} sent SIG{sig} at operation {at} of the save"
                    # Each kill saves over the save DIR holds (old) the other
                    # one (new): 3 steps over 1 step's save, or 1 over 3's,
                    # the same files written by the same operations.
                    old = self.manifest_of(self.save)
                    new, steps = (three, 3) if old == one else (one, 1)
                    env = dict(LD_PRELOAD=FAULTS, PPC_FAULT_DIR=self.saves,
                               PPC_FAULT_RANK=str(rank), PPC_FAULT_KILL_AT=str(at),
                               PPC_FAULT_SIGNAL=sig)
                    r = self.train_and_save(steps, self.save, env)
                    switched = self.assert_whole(old, new, what)
                    if sig == "TERM":
                        # A signal that can be handled leaves no temporary.
                        self.assertEqual(temporaries(self.saves), [], what)
                    if r.returncode == 0:
                        self.assertTrue(switched, what)
                        break
                else:
                    self.fail(f"rank {rank}'s save never completed")
        # What SIGKILL left (a staged directory) goes with the next save.
        self.assertEqual(self.train_and_save(3, self.save).returncode, 0)
        self.assertEqual(temporaries(self.saves), [])
        mode = os.stat(self.save).st_mode & 0o777
        umask = os.umask(0)
        os.umask(umask)
        self.assertEqual(mode, 0o777 & ~umask)


if __name__ == "__main__":
    main()
