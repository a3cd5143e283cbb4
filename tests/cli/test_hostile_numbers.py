"""Tests that hostile numbers get one precise error line
before any work: every numeric option of every subcommand
checks its rule (name, value as given, the whole rule; escaped; one short
line); durations lie between documented bounds (1 ms for a timeout, 7 days =
604800 s for any duration) and the job at the maximum runs; ppc launch refuses
a node or a world that does not fit before it forks anything; launch
variables from the environment are checked, never wrapped; and messages about
files (join's hash check, schedule CSVs, training data) name the real value.

Run: cd build-system && PPC=$PWD/bin/ppc PPC_MODELS_DIR=$PWD/models \
         /usr/bin/python3 ../tests/cli/test_hostile_numbers.py -v
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, assert_outputs_close, class_tmpdir, expected_output,  # noqa: E402
                    free_port, launch, main, model_path, rank_env, split_at, tmpdir)
from training import train, write_data  # noqa: E402

def help_of(args):
    """The usage error's pointer to the help of its subcommand."""
    return f" (see ppc {args[0]} --help)"


TIMEOUT_RULE = "is not a number of seconds in 0.001..604800"


def run_ppc(*args, env=None, timeout=120):
    return subprocess.run([PPC, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


class NumericOptionsTest(unittest.TestCase):
    """Every numeric option refuses a value outside its rule with 'error:
    --FLAG: VALUE is not RULE', exit 2, nothing else printed."""

    RUN = ["run", "m.json", "--input", "in.pt", "--output", "out.pt"]
    TRAIN = ["train", "m.json", "--data", "d.pt"]
    GENERATE = ["generate", "m.json", "--prompt", "p.pt", "--output", "o.pt"]
    LAUNCH = ["launch", "--nproc-per-node", "2"]
    SCHEDULE = ["schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2"]

    def rejects(self, args, message):
        r = run_ppc(*args)
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertEqual(r.stderr, "error: " + message + "\n")
        self.assertNotIn("\x1b", r.stderr)
        self.assertLess(len(r.stderr), 160, r.stderr)

    def test_bad_integer_counts_are_refused(self):
        cases = [
            (self.RUN + ["--microbatches", "-3"],
             "--microbatches: -3 is not an integer in 1..65536"),
            (self.RUN + ["--repeat", "99999999999999999999"],
             "--repeat: 99999999999999999999 is not an integer in 1..1000000"),
            (self.RUN + ["--threads", "1.5"],
             "--threads: '1.5' is not an integer in 0..%d (0: the default; at most 4 per "
             "core)" % max(4, 4 * len(os.sched_getaffinity(0)))),
            (self.TRAIN + ["--steps", "-5"],
             "--steps: -5 is not an integer in 1..2147483647"),
            (self.TRAIN + ["--steps", "2147483648"],
             "--steps: 2147483648 is not an integer in 1..2147483647"),
            (self.TRAIN + ["--loss-output", "-1"],
             "--loss-output: -1 is not an integer in 0..2147483647"),
            (self.TRAIN + ["--max-activations", "2000000"],
             "--max-activations: 2000000 is not an integer in 1..1048576"),
            (self.LAUNCH + ["--master-port", "-1", "--", "true"],
             "--master-port: -1 is not an integer in 0..65535"),
            (self.LAUNCH + ["--node-rank", "-2", "--", "true"],
             "--node-rank: -2 is not an integer in 0..2147483647"),
            (["schedule", "--schedule", "1f1b", "--stages", "2", "--ranks", "1025",
              "--microbatches", "2"],
             "--ranks: 1025 is not an integer in 1..1024"),
            (["schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches", "0x10"],
             "--microbatches: '0x10' is not an integer in 1..1024"),
            (["split", "m.pt", "-o", "out", "--stages", "-2"],
             "--stages: -2 is not an integer in 1..2147483647"),
            (["split-graph", "g.ir", "--stages", "0"],
             "--stages: 0 is not an integer in 1..2147483647"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                self.rejects(args, message + help_of(args))

    def test_bad_real_numbers_are_refused(self):
        cases = [
            (self.TRAIN + ["--momentum", "inf"],
             "--momentum: inf is not a finite number of at least 0"),
            (self.TRAIN + ["--weight-decay", "-0.5"],
             "--weight-decay: -0.5 is not a finite number of at least 0"),
            (self.TRAIN + ["--lr", "NaN"], "--lr: NaN is not a finite number above 0"),
            (self.TRAIN + ["--lr", "fast"], "--lr: 'fast' is not a finite number above 0"),
            (["verify", "m.pt", "m.json", "--input", "in.pt", "--atol", "nan"],
             "--atol: nan is not a finite number of at least 0"),
            (["verify", "m.pt", "m.json", "--input", "in.pt", "--rtol", "-1e-3"],
             "--rtol: -1e-3 is not a finite number of at least 0"),
            # A temperature whose reciprocal overflows a float would make the logits infinite
            # once the job has started.
            (self.GENERATE + ["--temperature", "1e-308"],
             "--temperature: 1e-308 is not 0 or at least 2.938736052218037e-39 (1 over the "
             "largest float)"),
            (self.GENERATE + ["--temperature", "-1"],
             "--temperature: -1 is not a finite number of at least 0"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                self.rejects(args, message + help_of(args))

    def test_timeouts_out_of_range_are_refused(self):
        # Below 1 ms (which would round to 0 ms, "no timeout" to c10d), above
        # 7 days, and no number at all; each named as given.
        cases = [
            (self.RUN + ["--timeout", "1e-4"], "--timeout: 1e-4 " + TIMEOUT_RULE),
            (self.RUN + ["--timeout", "604800.5"], "--timeout: 604800.5 " + TIMEOUT_RULE),
            (self.TRAIN + ["--timeout", "2e9"], "--timeout: 2e9 " + TIMEOUT_RULE),
            (self.TRAIN + ["--timeout", "-inf"], "--timeout: -inf " + TIMEOUT_RULE),
            (self.LAUNCH + ["--timeout", "700000", "--", "true"],
             "--timeout: 700000 " + TIMEOUT_RULE),
            (self.LAUNCH + ["--timeout", "0.0001", "--", "true"],
             "--timeout: 0.0001 " + TIMEOUT_RULE),
            (self.LAUNCH + ["--grace-period", "1e400", "--", "true"],
             "--grace-period: 1e400 is not a number of seconds in 0..604800"),
            (self.LAUNCH + ["--grace-period", "nan", "--", "true"],
             "--grace-period: nan is not a number of seconds in 0..604800"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                self.rejects(args, message + help_of(args))

    def test_overflowing_schedule_cost_is_refused(self):
        self.rejects(self.SCHEDULE + ["--costs", "1,1e999,1"],
                     "--costs '1,1e999,1': 1e999 is not a number in 0..1e+30")

    def test_raw_bytes_are_escaped(self):
        self.rejects(self.TRAIN + ["--steps", "3\x1b[2J"],
                     "--steps: '3\\x1b[2J' is not an integer in 1..2147483647"
                     + help_of(self.TRAIN))
        self.rejects(self.SCHEDULE + ["--costs", "1,\x07,1"],
                     "--costs '1,\\x07,1': '\\x07' is not a number in 0..1e+30")

    def test_accepted_numbers_are_read_in_decimal(self):
        # A leading zero is no octal prefix: --stages 010 is ten stages, one
        # rank each.
        r = run_ppc("schedule", "--schedule", "gpipe", "--stages", "010", "--microbatches", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        messages = [l for l in r.stdout.splitlines() if l.startswith("messages per step:")]
        self.assertEqual(len(messages), 1, r.stdout)
        self.assertIn(" rank9=", messages[0])
        self.assertNotIn("rank10=", messages[0])


class LaunchBoundsTest(unittest.TestCase):
    """ppc launch refuses before forking anything; what it starts gets ranks
    that fit an int."""

    def setUp(self):
        self.dir = tmpdir(self)
        # Each worker, if one were started, would leave a file.
        self.worker = ["--", "sh", "-c", 'touch "%s/$RANK"' % self.dir]

    def refuse(self, args, message):
        r = run_ppc("launch", *args, *self.worker, timeout=60)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (2, "", "error: " + message + "\n"))
        self.assertEqual(os.listdir(self.dir), [], "a worker was started")

    def test_too_many_processes_per_node(self):
        self.refuse(["--nproc-per-node", "5000"],
                    "--nproc-per-node: 5000 is not an integer in 1..1024, auto, cpu or gpu"
                    + help_of(["launch"]))

    def test_world_beyond_an_int(self):
        # 715827883 * 3 = 2147483649: one past what WORLD_SIZE holds.
        self.refuse(["--nnodes", "715827883", "--node-rank", "715827882",
                     "--nproc-per-node", "3"],
                    "--nnodes 715827883 times --nproc-per-node 3 is 2147483649 ranks; "
                    "WORLD_SIZE holds at most 2147483647")

    def test_node_rank_beyond_nnodes(self):
        self.refuse(["--nnodes", "3", "--node-rank", "3", "--nproc-per-node", "2"],
                    "--node-rank 3 is not an integer in 0..2")

    def test_largest_world_that_fits(self):
        # 715827882 * 3 = 2147483646: the last node's ranks are exact.
        r = run_ppc("launch", "--nnodes", "715827882", "--node-rank", "715827881",
                    "--nproc-per-node", "3", "--", "sh", "-c", "echo $RANK $WORLD_SIZE",
                    timeout=60)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(sorted(r.stdout.splitlines()),
                         ["[rank %d] %d 2147483646" % (rank, rank)
                          for rank in (2147483643, 2147483644, 2147483645)])

    def test_environment_numbers_are_checked(self):
        # A launcher's variables are untrusted: a size beyond an int is
        # refused as given, not wrapped into a small world.
        cases = [
            ({"WORLD_SIZE": "4294967298"},
             "WORLD_SIZE=4294967298 is not an integer in 1..2147483647"),
            ({"LOCAL_RANK": "-1"}, "LOCAL_RANK=-1 is not an integer in 0..2147483647"),
            ({"MASTER_PORT": "65536"}, "MASTER_PORT=65536 is not an integer in 1..65535"),
            ({"RANK": "0\x1b[31m"}, "RANK='0\\x1b[31m' is not an integer in 0..2147483647"),
        ]
        for extra, message in cases:
            with self.subTest(extra=extra):
                env = rank_env(0, 2, free_port())
                env.update(extra)
                r = run_ppc("run", "m.json", "--input", "in.pt", "--output", "out.pt", env=env)
                self.assertEqual((r.returncode, r.stdout, r.stderr),
                                 (2, "", "error: " + message + "\n"))


class MaximumDurationsTest(unittest.TestCase):
    """The documented maxima are usable: a real 2-rank job under the longest
    launch timeout and grace period, each rank with the longest timeout,
    succeeds (a duration that overflowed into a past deadline would fail
    it at once)."""

    def test_job_at_the_maximum(self):
        d = tmpdir(self)
        manifest = split_at("mlp", 2, os.path.join(d, "mlp"))
        out = os.path.join(d, "out.pt")
        r = launch(2, "run", manifest, "--input", model_path("mlp", ".input.pt"),
                   "--output", out, "--microbatches", "2", "--timeout", "604800",
                   launcher=("--timeout", "604800", "--grace-period", "604800"), timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        assert_outputs_close(self, expected_output("mlp"), torch.load(out))


class MessagesTest(unittest.TestCase):
    """Errors about files name the real values and escape raw bytes."""

    @classmethod
    def setUpClass(cls):
        cls.work = class_tmpdir(cls)
        cls.mlp = split_at("mlp", 2, os.path.join(cls.work, "mlp"))
        cls.data = os.path.join(cls.work, "mlp.data.pt")
        write_data(cls.data, "mlp", "cross_entropy")

    def train_mlp2(self, *args, data=None):
        return train(2, self.mlp, data or self.data, "--loss", "cross_entropy", "--microbatches",
                     "2", "--timeout", "60", "--no-meta-cache", *args, timeout=300)

    def one_error(self, r):
        """The error line of a failed launch, once per failing rank, all alike."""
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        errors = {l.split("] ", 1)[1] for l in r.stderr.splitlines() if "] error: " in l}
        errors = {e for e in errors if not e.startswith("error: lost rank")}
        self.assertEqual(len(errors), 1, r.stderr)
        return errors.pop()

    def write_bytes(self, name, data):
        path = os.path.join(tmpdir(self), name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_schedule_csv_cells_are_escaped_and_the_file_named(self):
        path = self.write_bytes("evil.csv", b"0F0,0F1,0B0,0B1\n1F0,\x1b]0;x\x07,1B0\n")
        message = ("error: schedule '%s' row 2 (rank 1), cell 2: '\\x1b]0;x\\x07' is not a "
                   "compute action like 0F1, 1B0, 0I3 or 0W3, nor a compute_comms action "
                   "like 1RECV_F0 or 0SEND_B2" % path)
        r = self.train_mlp2("--schedule-csv", path)
        self.assertEqual(self.one_error(r), message)
        self.assertNotIn("\x1b", r.stderr)
        self.assertNotIn("'--schedule-csv'", r.stderr)
        r = run_ppc("schedule", "--from-csv", path, "--stages", "2", "--microbatches", "2")
        self.assertEqual((r.returncode, r.stderr), (2, message + "\n"))

    def test_unreadable_schedule_csv_is_named(self):
        path = os.path.join(tmpdir(self), "absent.csv")
        error = self.one_error(self.train_mlp2("--schedule-csv", path))
        self.assertIn("'%s'" % path, error)
        self.assertNotIn("'--schedule-csv'", error)

    def test_byte_order_mark_and_crlf(self):
        plain = os.path.join(tmpdir(self), "gpipe.csv")
        run_ppc("schedule", "--schedule", "gpipe", "--stages", "2", "--microbatches", "2",
                "--csv", plain)
        with open(plain, "rb") as f:
            rows = f.read().splitlines()
        marked = self.write_bytes("marked.csv", b"\xef\xbb\xbf" + b"\r\n".join(rows) + b"\r\n")
        want = run_ppc("schedule", "--from-csv", plain, "--stages", "2", "--microbatches", "2")
        got = run_ppc("schedule", "--from-csv", marked, "--stages", "2", "--microbatches", "2")
        self.assertEqual((want.returncode, got.returncode), (0, 0), want.stderr + got.stderr)
        # The same grid; only the file named on the first line differs.
        self.assertEqual(got.stdout.split("\n", 1)[1], want.stdout.split("\n", 1)[1])
        self.assertTrue(got.stdout.startswith("'%s': " % marked), got.stdout)
        r = self.train_mlp2("--schedule-csv", marked, "--steps", "1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("step 1 loss ", r.stdout)

    def test_empty_tuple_of_training_data(self):
        path = os.path.join(tmpdir(self), "empty.pt")
        torch.save((), path)
        self.assertEqual(self.one_error(self.train_mlp2(data=path)),
                         "error: data '%s' is an empty tuple" % path)

    def test_join_names_the_difference(self):
        d = tmpdir(self)
        model = os.path.join(d, "mlp.pt")
        shutil.copy(model_path("mlp"), model)
        out = os.path.join(d, "split")
        run_ppc("split", model, "--stages", "2", "-o", out)
        manifest_path = os.path.join(out, "manifest.json")
        with open(manifest_path) as f:
            original = json.load(f)
        real = original["source"]["sha256"]
        size = original["source"]["size"]

        def join_with(source):
            manifest = json.loads(json.dumps(original))
            manifest["source"].update(source)
            with open(manifest_path, "w") as f:
                json.dump(manifest, f)
            r = run_ppc("join", manifest_path, "-o", os.path.join(d, "joined.pt"))
            self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
            prefix = "error: the original model '%s' does not match the manifest (" % model
            suffix = "); ppc join needs the model the stages were split from\n"
            self.assertTrue(r.stderr.startswith(prefix) and r.stderr.endswith(suffix),
                            r.stderr)
            return r.stderr[len(prefix):-len(suffix)]

        # A hash edited in its last digit: both shown in full, so they differ.
        edited = real[:-1] + ("0" if real[-1] != "0" else "1")
        self.assertEqual(join_with({"sha256": edited}), "sha256 %s != %s" % (real, edited))
        # Sizes that differ are said as sizes.
        self.assertEqual(join_with({"size": size - 3}),
                         "%d bytes, the manifest says %d" % (size, size - 3))
        # The manifest's text is untrusted: escaped.
        # The manifest's text is untrusted: escaped (and cut one past the
        # first difference).
        self.assertEqual(join_with({"sha256": real[:20] + "\x1b[2J"}),
                         "sha256 %s != %s\\x1b" % (real[:21], real[:20]))


if __name__ == "__main__":
    main()
