#!/usr/bin/env python3
"""What ppc run, train and verify tell a user besides their results: progress
while they run, a closing line, --quiet, --stats-json, one note (no warning)
on the normal first run, the --microbatches 1 note, and verify over the same
list-of-batches files ppc run takes; help that speaks of the models ppc takes
today, and an unknown command that is an error even with --help."""
import json
import os
import pty
import re
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import (PPC, class_tmpdir, free_port, launch, main, model_path, ppc,  # noqa: E402
                    rank_env, split_at, tmpdir)
from training import STEP, train, write_data  # noqa: E402

class HelpTest(unittest.TestCase):
    def test_help_names_what_ppc_takes_and_unknown_commands_fail(self):
        top = ppc("--help").stdout
        self.assertIn("runtime for PyTorch models (torch.export programs and TorchScript)",
                      top)
        self.assertIn("1 when 'ppc verify' finds a mismatch", top)
        split_help = ppc("split", "--help").stdout
        self.assertIn("a torch.export program (MODEL.pt2) or a TorchScript module", split_help)
        self.assertNotIn("TorchScript model file", split_help)
        # Another command's exit status is not theirs to explain.
        for command in (("trace", "plot"), ("inspect",)):
            self.assertNotIn("ppc verify' finds", ppc(*command, "--help").stdout, command)
        for args in (("nosuch", "--help"), ("nosuch",)):
            r = ppc(*args, check=False)
            self.assertEqual((r.returncode, r.stdout, r.stderr),
                             (2, "", "error: unknown command 'nosuch' (see ppc --help)\n"), args)


class StageCountTest(unittest.TestCase):
    def test_split_says_which_rank_counts_its_stages_take(self):
        # Where the user picks the stage count, not first at launch (issue #44).
        out = os.path.join(tmpdir(self), "s3")
        proc = ppc("split", model_path("mlp"), "-o", out, "--stages", 3)
        self.assertEqual(proc.stdout.splitlines()[1],
                         "  they run on 1 or 3 ranks (stage k on rank k mod WORLD_SIZE)")
        self.assertIn("WORLD_SIZE, which must divide the stage count", ppc("run", "--help").stdout)


class SplitMlpTest(unittest.TestCase):
    """Tests over the mlp model split in 2 stages once per class, in a
    temporary directory removed after it (tmp, out, manifest)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.out = os.path.join(cls.tmp, "mlp2")
        split_at("mlp", 2, cls.out)
        cls.manifest = os.path.join(cls.out, "manifest.json")


def read_all(master):
    """Everything written to the terminal whose master side is `master`,
    until the other side closes; closes `master`."""
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks).decode()


PROGRESS = re.compile(r"^\[rank 1\] progress: batch (\d+)/(\d+) \((\d+)%\)", re.M)


class RunFeedbackTest(SplitMlpTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        x = torch.load(model_path("mlp", ".input.pt"))
        cls.batches = [x, x * 2, x[:3], x + 1]
        cls.input = os.path.join(cls.tmp, "batches.pt")
        torch.save(cls.batches, cls.input)

    def clear_caches(self):
        for name in os.listdir(self.out):
            if name.startswith("meta_cache."):
                os.remove(os.path.join(self.out, name))

    def run_mlp(self, *extra, output="out.pt"):
        out = os.path.join(self.tmp, output)
        r = launch(2, "run", self.manifest, "--input", self.input, "--output", out,
                   "--timeout", "60", *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r, out

    def test_first_run_notes_once_and_warns_never(self):
        self.clear_caches()
        r, _ = self.run_mlp("--microbatches", "2")
        self.assertNotIn("warning:", r.stderr)
        notes = [l for l in r.stderr.splitlines() if "note:" in l and "MASTER_PORT" not in l]
        self.assertEqual(notes, ["[rank 0] note: no meta cache at '%s'; inferring shapes "
                                 "(saved there for later runs)"
                                 % os.path.join(self.out, "meta_cache.rank0of2.json")],
                         r.stderr)
        # The second run finds the caches and has nothing to say about them.
        r, _ = self.run_mlp("--microbatches", "2")
        self.assertNotIn("meta cache", r.stderr)

    def test_progress_lines_and_the_closing_line(self):
        r, out = self.run_mlp("--microbatches", "2", "--progress")
        seen = [tuple(map(int, m)) for m in PROGRESS.findall(r.stderr)]
        # The first and the last batch always show; between them at most one a second.
        self.assertEqual(seen[0], (1, 4, 25), r.stderr)
        self.assertEqual(seen[-1], (4, 4, 100), r.stderr)
        # The first batch carries the start-up: no rate and no estimate yet
        # (rates count from it, over at least a second).
        self.assertIn("[rank 1] progress: batch 1/4 (25%)\n", r.stderr)
        # 5 + 5 + 3 + 5 rows in 4 batches.
        self.assertRegex(r.stderr, r"\[rank 1\] wrote %s \(4 batches, [\d.]+ s, [\d.]+ samples/s\)"
                         % re.escape(out))
        self.assertEqual(len(torch.load(out)), 4)

    def test_no_progress_unless_asked_off_a_terminal(self):
        r, _ = self.run_mlp("--microbatches", "2")
        self.assertNotIn("progress:", r.stderr)
        self.assertIn("wrote ", r.stderr)

    def test_progress_is_one_redrawn_line_on_a_terminal(self):
        # One rank, its stderr a terminal: the line is redrawn in place
        # (carriage return, erase to the end of the line), never a new line.
        d = tmpdir(self)
        one = os.path.join(d, "one")
        ppc("split", model_path("mlp"), "-o", one, "--stages", "1")
        master, slave = pty.openpty()
        out = os.path.join(d, "o.pt")
        p = subprocess.Popen([PPC, "run", os.path.join(one, "manifest.json"), "--input",
                              self.input, "--output", out], stderr=slave,
                             stdout=subprocess.DEVNULL, env=rank_env(0, 1, free_port()))
        os.close(slave)
        text = read_all(master)
        p.wait(timeout=120)
        self.assertEqual(p.returncode, 0, text)
        self.assertIn("\rprogress: batch 1/4 (25%)", text)
        self.assertIn("\rprogress: batch 4/4 (100%)", text)
        self.assertIn("\x1b[K", text)
        self.assertNotIn("progress: batch 1/4 (25%)\r\n", text.replace("\x1b[K", ""))
        # The closing line starts on a cleared line.
        self.assertRegex(text, r"\r\x1b\[Kwrote %s \(4 batches, " % re.escape(out))

    def test_progress_lines_through_a_launcher_on_a_terminal(self):
        # ppc launch relays whole lines, so its ranks cannot redraw; when its
        # own stderr is a terminal it says so (PPC_LAUNCH_TTY=1) and the rank
        # of the last stage prints plain progress lines unasked.
        master, slave = pty.openpty()
        out = os.path.join(self.tmp, "tty.pt")
        p = subprocess.Popen([PPC, "launch", "--nproc-per-node", "2", "--master-port", "0",
                              "--", PPC, "run", self.manifest, "--input", self.input,
                              "--output", out, "--microbatches", "2"],
                             stderr=slave, stdout=subprocess.DEVNULL)
        os.close(slave)
        text = read_all(master)
        p.wait(timeout=120)
        self.assertEqual(p.returncode, 0, text)
        self.assertIn("[rank 1] progress: batch 1/4 (25%)", text)
        self.assertIn("[rank 1] progress: batch 4/4 (100%)", text)
        self.assertNotIn("\x1b[K", text)
        # And not a terminal: 0, whatever the launcher itself inherited.
        r = subprocess.run([PPC, "launch", "--nproc-per-node", "1", "--", "sh", "-c",
                            "echo tty=$PPC_LAUNCH_TTY"], capture_output=True, text=True,
                           env=dict(os.environ, PPC_LAUNCH_TTY="1"), timeout=60)
        self.assertIn("[rank 0] tty=0", r.stdout)

    def test_quiet_prints_nothing_but_errors(self):
        self.clear_caches()
        r, out = self.run_mlp("--quiet", "--progress")
        lines = [l for l in r.stderr.splitlines() if "MASTER_PORT" not in l]
        self.assertEqual(lines, [], r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(len(torch.load(out)), 4)
        # Errors still come through.
        bad = launch(2, "run", self.manifest, "--input", model_path("resnet18", ".input.pt"),
                     "--output", os.path.join(self.tmp, "bad.pt"), "--quiet")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("error: ", bad.stderr)

    def test_stats_json_records_the_runs_counts(self):
        path = os.path.join(self.tmp, "stats.json")
        r, out = self.run_mlp("--microbatches", "2", "--stats-json", path, "--stats")
        with open(path) as f:
            stats = json.load(f)
        self.assertEqual(stats["command"], "run")
        self.assertEqual(stats["rank"], 1)
        self.assertEqual(stats["world_size"], 2)
        self.assertEqual(stats["batches"], 4)
        self.assertEqual(stats["samples"], sum(b.shape[0] for b in self.batches))
        self.assertEqual(stats["microbatches"], 2)
        self.assertEqual(stats["schedule"], "1f1b")
        self.assertGreater(stats["seconds"], 0)
        self.assertAlmostEqual(stats["samples_per_second"], stats["samples"] / stats["seconds"],
                               places=3)
        # The same figures as the --stats line of that rank.
        line = [l for l in r.stdout.splitlines() if l.startswith("[rank 1] stats:")][0]
        self.assertIn("meta=%s " % stats["meta"], line)
        self.assertIn("messages_sent=%d " % stats["messages_sent"], line)
        # It is an output: it may not replace what the run reads.
        bad = launch(2, "run", self.manifest, "--input", self.input, "--output",
                     os.path.join(self.tmp, "o2.pt"), "--stats-json", self.input)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--stats-json '%s' is the input file; refusing to overwrite it"
                      % self.input, bad.stderr)

    def test_microbatches_default_says_it_does_not_pipeline(self):
        r, _ = self.run_mlp()
        note = ("[rank 0] note: --microbatches 1 (the default) runs the 2 stages one after "
                "another; --microbatches 2 or more overlaps them")
        self.assertEqual(r.stderr.count(note), 1, r.stderr)
        # Asked for explicitly, it is the user's choice: no note.
        r, _ = self.run_mlp("--microbatches", "1")
        self.assertNotIn("--microbatches 1 (the default)", r.stderr)


class TrainFeedbackTest(SplitMlpTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = os.path.join(cls.tmp, "data.pt")
        write_data(cls.data, "mlp", "cross_entropy")

    def train_three_steps(self, *extra):
        r = train(2, self.manifest, self.data, "--loss", "cross_entropy", "--steps", "3",
                  "--microbatches", "2", "--timeout", "60", *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_step_lines_time_rate_and_time_left(self):
        stats = os.path.join(self.tmp, "train.json")
        save = os.path.join(self.tmp, "saved")
        r = self.train_three_steps("--stats-json", stats, "--save", save)
        lines = [l for l in r.stdout.splitlines() if "loss" in l]
        self.assertEqual(len(lines), 3, r.stdout)
        # Step 1 carries the start-up: its own rate, no estimate of the time left.
        self.assertRegex(lines[0], r"^\[rank 1\] step 1 loss \S+ \([\d.]+ s, [\d.]+ samples/s\)$")
        self.assertRegex(lines[2], r"^\[rank 1\] step 3 loss \S+ \([\d.]+ s, [\d.]+ samples/s\)$")
        self.assertNotIn("warning:", r.stderr)
        self.assertIn("[rank 0] wrote %s (2 trained stages and their manifest, after 3 steps)"
                      % save, r.stderr)
        with open(stats) as f:
            doc = json.load(f)
        self.assertEqual(doc["command"], "train")
        self.assertEqual([s["step"] for s in doc["steps"]], [1, 2, 3])
        printed = [float(m.group(2)) for m in STEP.finditer(r.stdout)]
        for got, want in zip([s["loss"] for s in doc["steps"]], printed):
            self.assertAlmostEqual(got, want, places=6)
        self.assertEqual({s["samples"] for s in doc["steps"]}, {5})
        self.assertGreater(doc["samples_per_second"], 0)

    def test_quiet_keeps_the_losses_only(self):
        r = self.train_three_steps("--quiet")
        self.assertEqual([l for l in r.stderr.splitlines() if "MASTER_PORT" not in l], [],
                         r.stderr)
        self.assertEqual(re.findall(r"step \d+ loss \S+$", r.stdout, re.M),
                         re.findall(r"step \d+ loss \S+", r.stdout))
        self.assertEqual(len(STEP.findall(r.stdout)), 3)


class VerifyBatchesTest(unittest.TestCase):
    def test_verify_takes_a_list_of_batches(self):
        d = tmpdir(self)
        split_at("mlp", 2, d)
        x = torch.load(model_path("mlp", ".input.pt"))
        batches = os.path.join(d, "batches.pt")
        torch.save([x, x[:2], x * 3], batches)
        r = ppc("verify", model_path("mlp"), os.path.join(d, "manifest.json"), "--input",
                batches)
        self.assertEqual(r.stdout.splitlines()[-1], "verify: stages match the model")
        self.assertEqual([l.split(":")[0] for l in r.stdout.splitlines()[:-1]],
                         ["batch 0", "batch 1", "batch 2"])
        # A batch that does not fit is named.
        torch.save([x, torch.randn(2, 7)], batches)
        r = ppc("verify", model_path("mlp"), os.path.join(d, "manifest.json"), "--input",
                batches, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"^error: batch 1: ")


if __name__ == "__main__":
    main()
