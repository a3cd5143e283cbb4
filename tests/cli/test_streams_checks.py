#!/usr/bin/python3
"""Tests that every ppc command treats its standard streams alike, and that
values a run depends on are checked before it starts (docs/runtime.md,
"Standard streams"; docs/training.md).

  - a reader of stdout that goes away ends nothing: the command exits with
    its own status and prints nothing about it; a stdout that cannot be
    written (a full disk) is one error line;
  - a rank started with stdin and stdout closed (no launcher) gets them on
    /dev/null, so that its store socket never takes fd 1: it trains;
  - an output that is a FIFO is refused before any work, --log-file as
    --stats-json and ppc schedule --csv (one shared check);
  - the --log-file stays JSON when the evaluation loss is not finite (null),
    and a non-finite evaluation loss is an error, as a training loss's;
  - --eval-data that does not fit the model is refused before step 1;
  - --seed, --costs, a manifest's predicted_cost, PPC_HOST_ID and PPC_LINK
    are checked as one-line errors; --link overrides a bad PPC_LINK.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import json
import os
import re
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PPC, class_tmpdir, free_port, main, model_path, ppc, rank_env  # noqa: E402
from training import split_under, train  # noqa: E402

SCHEDULE = ["schedule", "--schedule", "1f1b", "--stages", "8", "--ranks", "8",
            "--microbatches", "512"]


def mlp_batch(rows=5, seed=0):
    """An (input, target) pair of the MLP (64 features, 10 classes)."""
    x = torch.load(model_path("mlp", ".input.pt"))[:rows]
    g = torch.Generator().manual_seed(seed)
    return x, torch.randint(0, 10, (x.shape[0],), generator=g)


class MlpCase(unittest.TestCase):
    """A 2-stage split of the MLP and one batch of its data, per class."""
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.manifest = split_under(cls.tmp, "mlp", 2)
        cls.data = os.path.join(cls.tmp, "data.pt")
        torch.save(mlp_batch(), cls.data)


class StreamsTest(MlpCase):

    def train_alone(self, *args, **kw):
        """`ppc train` as the only rank of a job, without a launcher."""
        return ppc("train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                   "--no-meta-cache", "--timeout", "60", *args, check=False,
                   env=rank_env(0, 1, free_port()), **kw)

    def test_stdout_reader_gone(self):
        """`ppc schedule ... | head -1`: exit 0, nothing on stderr."""
        proc = subprocess.Popen([PPC, *SCHEDULE], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        self.assertEqual(proc.wait(timeout=60), 0, err)
        self.assertEqual(err, "")
        self.assertTrue(first.startswith("1f1b: 8 stages on 8 ranks"), first)

    def test_full_stdout_is_an_error(self):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([PPC, *SCHEDULE], stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr,
                         "error: cannot write to standard output: No space left on device\n")

    def test_rank_with_closed_streams(self):
        log = os.path.join(self.tmp, "closed.jsonl")
        proc = subprocess.run(["sh", "-c", 'exec "$0" "$@" <&- >&-', PPC, "train", self.manifest,
                               "--data", self.data, "--loss", "cross_entropy", "--steps", "2",
                               "--no-meta-cache", "--timeout", "60", "--log-file", log],
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env=rank_env(0, 1, free_port()))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("error", proc.stderr)
        with open(log) as f:
            self.assertEqual([json.loads(line)["step"] for line in f], [1, 2])

    def test_fifo_outputs_refused(self):
        fifo = os.path.join(self.tmp, "out.fifo")
        os.mkfifo(fifo)
        want = f"error: cannot write '{fifo}': it exists and is not a regular file\n"
        for option in ("--log-file", "--stats-json"):
            with self.subTest(option=option):
                proc = self.train_alone(option, fifo, timeout=60)
                self.assertEqual((proc.returncode, proc.stdout), (2, ""))
                self.assertTrue(proc.stderr.endswith(want), proc.stderr)
        proc = ppc(*SCHEDULE, "--csv", fifo, check=False, timeout=60)
        self.assertEqual((proc.returncode, proc.stderr), (2, want))
        self.assertTrue(os.path.exists(fifo) and not os.path.isfile(fifo))

    def test_non_finite_eval_loss(self):
        """An evaluation batch holding inf: its loss is null in the log and
        the run ends with an error after printing it."""
        x, t = mlp_batch(seed=3)
        bad = x.clone()
        bad[1, 5] = float("inf")
        eval_data = os.path.join(self.tmp, "inf.eval.pt")
        torch.save([(x, t), (bad, t)], eval_data)
        log = os.path.join(self.tmp, "inf.jsonl")
        proc = self.train_alone("--steps", "2", "--eval-data", eval_data, "--log-file", log,
                                "--quiet")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertTrue(proc.stdout.endswith("eval loss nan at step 2\n"), proc.stdout)
        self.assertTrue(proc.stderr.endswith("error: step 2: the evaluation loss is nan\n"),
                        proc.stderr)
        with open(log) as f:
            records = [json.loads(line) for line in f]
        self.assertGreater(records[-1].pop("seconds"), 0)
        self.assertEqual(records[-1], {"eval_loss": None, "step": 2})
        self.assertEqual([r["step"] for r in records], [1, 2, 2])


class ChecksTest(MlpCase):

    def error(self, *args, env=None):
        proc = ppc(*args, check=False, env=env, timeout=60)
        self.assertEqual((proc.returncode, proc.stdout), (2, ""), proc.stderr)
        return proc.stderr

    def test_bad_seeds_are_refused(self):
        rule = "is not an integer in 0..9223372036854775807"
        for command, value, shown in (("train", "-7", "-7"), ("train", "0x1F", "'0x1F'"),
                                      ("train", "3e19", "'3e19'"),
                                      ("generate", "18446744073709551616", "18446744073709551616")):
            with self.subTest(command=command, value=value):
                self.assertEqual(self.error(command, self.manifest, "--seed", value),
                                 f"error: --seed: {shown} {rule} (see ppc {command} --help)\n")

    def test_out_of_range_costs_are_refused(self):
        for costs, problem in (("1e309,1,1", "1e309 is not"), ("1,inf,1", "inf is not"),
                               ("2,1,5e30", "5e30 is not")):
            with self.subTest(costs=costs):
                self.assertEqual(self.error(*SCHEDULE[:7], "--microbatches", "4",
                                            "--costs", costs),
                                 f"error: --costs '{costs}': {problem} a number in 0..1e+30\n")

    def test_huge_predicted_cost_is_refused(self):
        manifest = os.path.join(self.tmp, "mlp.2", "manifest.json")
        with open(manifest) as f:
            doc = json.load(f)
        doc["stages"][0]["predicted_cost"] = 3e200
        big = os.path.join(self.tmp, "big.json")
        with open(big, "w") as f:
            json.dump(doc, f)
        want = (f"error: {big}: expected a number in 0..1e+30 at "
                "manifest.stages[0].predicted_cost\n")
        self.assertEqual(self.error("schedule", "--schedule", "1f1b", "--ranks", "2",
                                    "--microbatches", "2", "--manifest", big), want)

    def test_unprintable_host_id_is_refused(self):
        for host_id, shown in (("node\t7", "node\\x097"), ("a\rb", "a\\x0db")):
            with self.subTest(host_id=shown):
                env = rank_env(0, 1, free_port(), PPC_HOST_ID=host_id)
                stderr = self.error("train", self.manifest, "--data", self.data, env=env)
                self.assertEqual(stderr, f"error: PPC_HOST_ID '{shown}' must be at most 256 "
                                 "printable characters\n")

    def test_link_option_wins(self):
        env = rank_env(0, 1, free_port(), PPC_LINK="ring")
        stderr = self.error("train", self.manifest, "--data", self.data, "--loss",
                            "cross_entropy", "--no-meta-cache", env=env)
        self.assertTrue(stderr.endswith("error: PPC_LINK 'ring' is not a link: expected auto, "
                                        "gloo, shm (--link overrides it)\n"), stderr)
        proc = ppc("train", self.manifest, "--data", self.data, "--loss", "cross_entropy",
                   "--no-meta-cache", "--link", "gloo", "--quiet", env=env, timeout=120)
        self.assertEqual(proc.stdout, "step 1 loss %s\n" % proc.stdout.split()[3])
        # Commands that run no rank never read it.
        self.assertEqual(ppc(*SCHEDULE[:7], "--microbatches", "2", env=env).returncode, 0)

    def test_eval_data_checked_before_step_1(self):
        x, t = mlp_batch(rows=4, seed=5)
        wide = torch.cat([x, x[:, :3]], dim=1)
        eval_data = os.path.join(self.tmp, "wide.eval.pt")
        torch.save([(x, t), (x[:2], t[:2]), (wide, t)], eval_data)
        save = os.path.join(self.tmp, "trained")
        run = train(2, self.manifest, self.data, "--loss", "cross_entropy", "--steps", "3",
                    "--no-meta-cache", "--eval-data", eval_data, "--save", save,
                    rank_timeout=60, timeout=180)
        self.assertEqual(run.proc.returncode, 2, run.output)
        self.assertNotIn("step 1 loss", run.proc.stdout)
        # (LibTorch 2.x names the operator: "addmm: mat1 and mat2 ...".)
        self.assertRegex(
            run.proc.stderr,
            "\nerror: rank 0 exited with status 2: --eval-data '%s' batch 2 does not fit the "
            "model: stage 0 failed: (addmm: )?mat1 and mat2 shapes cannot be multiplied "
            "\\(4x67 and 64x64\\)\n$" % re.escape(eval_data))
        self.assertFalse(os.path.exists(save))


if __name__ == "__main__":
    main()
