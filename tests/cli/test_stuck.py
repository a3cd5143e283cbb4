"""Tests that a stuck job says where it is stuck (issue #31, section 7), and
that its status records can be neither redirected nor blocked (issue #45).

One rank of a 3-rank `ppc launch` is stopped (SIGSTOP) mid-run, in
inference (`ppc run`) and in training (`ppc train`). The other ranks' waits
time out: each prints one error line with its position in its schedule
(runtime/exec/Executor.h, "Where a rank stands"), and the launcher's closing
line names the stopped rank and who waits for it (tools/ppc/Launcher.h).

StatusFilesTest: three ranks started by hand share a PPC_STATUS_DIR where a
link or a FIFO was planted at rank 2's temporary record name; rank 1 is
stopped and rank 2 times out. And a launched job that makes its own record a
FIFO, or a TMPDIR that is missing, cannot keep the launcher from its line.

Run: /usr/bin/python3 tests/cli/test_stuck.py -v
Needs the test models (PPC_MODELS_DIR); about 50 s.
"""

import json
import os
import pwd
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, child_pids, class_tmpdir, free_port, launch, main,  # noqa: E402
                    model_path, rank_env, split_at, tmpdir)
from training import write_data  # noqa: E402

RANK_TIMEOUT = 3
GRACE = 1
STOPPED = 1

# A timed-out rank's line: its wait, then its position: at an action of its
# schedule, or before a run of it (waiting for the next batch's or step's
# microbatch signatures, as a rank that finished its part of one does).
POSITION = re.compile(
    r"^\[rank (\d+)\] error: (?:.*: )?lost rank (\d+) \(no answer within 3 s while waiting for "
    r"[^;]*; (?:at (?:action (\d+) of (\d+) \((\w+) mb (-?\d+) stage (-?\d+)\)|the final flush "
    r"of \d+ actions); sent: ([^;]*); received: ([^;]*)|before a run of its schedule)\); a "
    r"consequence: this rank stopped because of rank (\d+)$")
CLOSING = re.compile(
    r"^error: rank (\d+) is stuck \(stopped by a signal, state T\): rank (\d+) waited for it "
    r"(?:at (?:action \d+ of \d+ \(\w+ mb -?\d+ stage -?\d+\)|the final flush of \d+ actions)|"
    r"before a run of its schedule); (?:rank|ranks) ([\d, and]+) waits? for it$")


def rank_of(pid):
    """RANK of process PID, from its environment."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        for var in f.read().split(b"\0"):
            if var.startswith(b"RANK="):
                return int(var[5:])
    return None


def watch_lines(stream, pattern):
    """Reads STREAM's lines on a thread of its own. Returns (lines, started,
    thread): the lines so far (without newlines), and an event set at the
    first line that PATTERN (a regex) matches, or when the stream ends."""
    lines, started = [], threading.Event()

    def read():
        for line in stream:
            lines.append(line.rstrip("\n"))
            if not started.is_set() and re.search(pattern, line):
                started.set()
        started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, started, reader


class StuckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.manifest = split_at("mlp", 3, os.path.join(cls.tmp, "mlp3"))
        cls.data = os.path.join(cls.tmp, "data.pt")
        write_data(cls.data, "mlp", "cross_entropy")

    def stop_mid_run(self, args, progress):
        """Launches ARGS on 3 ranks; at the first output line matching
        PROGRESS, stops rank STOPPED with SIGSTOP. Returns (return code,
        seconds from the stop to the launcher's exit, stderr lines)."""
        cmd = [PPC, "launch", "--nproc-per-node", "3", "--master-port", "0", "--grace-period",
               str(GRACE), "--", PPC, *args, "--timeout", str(RANK_TIMEOUT)]
        # One stream: training's loss lines are on stdout.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        stopped = []
        lines, started, reader = watch_lines(proc.stdout, progress)
        try:
            self.assertTrue(started.wait(60), "\n".join(lines))
            self.assertIsNone(proc.poll(), "\n".join(lines))
            for pid in child_pids(proc.pid):
                if rank_of(pid) == STOPPED:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            self.assertEqual(len(stopped), 1, "\n".join(lines))
            at = time.monotonic()
            rc = proc.wait(timeout=RANK_TIMEOUT + 2 + GRACE + 20)
            took = time.monotonic() - at
            reader.join(10)
            return rc, took, lines
        finally:
            for pid in stopped:
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()

    def assert_stuck(self, rc, took, lines):
        text = "\n".join(lines)
        self.assertNotEqual(rc, 0, text)
        # The rank timeout, the settle time, the grace period, and slack.
        self.assertLess(took, RANK_TIMEOUT + 2 + GRACE + 8, text)
        waiting = {}
        for line in lines:
            m = POSITION.match(line)
            if m:
                rank = int(m.group(1))
                self.assertNotIn(rank, waiting, text)
                waiting[rank] = int(m.group(2))
        # Every alive rank reported its position, wherever the stop found
        # it (in its schedule, or done with one batch or step and waiting
        # before the next), and none is the stopped one.
        self.assertNotIn(STOPPED, waiting, text)
        self.assertIn(STOPPED, waiting.values(), text)
        self.assertEqual(set(waiting), {0, 2}, text)
        closing = CLOSING.match(lines[-1])
        self.assertIsNotNone(closing, text)
        self.assertEqual(int(closing.group(1)), STOPPED, text)
        self.assertEqual(waiting[int(closing.group(2))], STOPPED, text)
        self.assertEqual(closing.group(3), " and ".join(map(str, sorted(waiting))), text)

    def test_stuck_inference_is_diagnosed(self):
        rc, took, lines = self.stop_mid_run(
            ["run", self.manifest, "--input", model_path("mlp", ".input.pt"), "--output",
             os.path.join(self.tmp, "out.pt"), "--repeat", "1000000", "--microbatches", "5",
             "--progress", "--no-meta-cache"], r"progress: batch ")
        self.assert_stuck(rc, took, lines)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out.pt")))

    def test_stuck_training_is_diagnosed(self):
        rc, took, lines = self.stop_mid_run(
            ["train", self.manifest, "--data", self.data, "--loss", "cross_entropy", "--steps",
             "1000000", "--microbatches", "5", "--no-meta-cache"], r"step \d+ loss ")
        self.assert_stuck(rc, took, lines)


class StatusFilesTest(unittest.TestCase):
    # Three ranks, so that the stopped one (STOPPED) is not the one serving the rendezvous
    # store, and the one watched holds the last stage (it writes --output, so it reports
    # progress).
    WATCHED = 2

    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.manifest = split_at("mlp", 3, os.path.join(cls.tmp, "mlp3"))

    def setUp(self):
        self.dir = tmpdir(self)
        self.status = os.path.join(self.dir, "status")
        os.mkdir(self.status, 0o700)
        self.partial = os.path.join(self.status, f"rank-{self.WATCHED}.json.partial")

    def time_out_watched_rank(self):
        """Starts 3 ranks of a long `ppc run` by hand with PPC_STATUS_DIR;
        once rank WATCHED reports progress, stops rank STOPPED (SIGSTOP).
        Returns rank WATCHED's exit status, seconds from the stop to its
        exit, and its output."""
        port = free_port()
        args = ["run", self.manifest, "--input", model_path("mlp", ".input.pt"), "--output",
                os.path.join(self.dir, "out.pt"), "--repeat", "1000000", "--progress",
                "--no-meta-cache", "--timeout", str(RANK_TIMEOUT)]
        procs = [subprocess.Popen([PPC, *args], env=rank_env(rank, 3, port,
                                                              PPC_STATUS_DIR=self.status),
                                  stdout=subprocess.PIPE if rank == self.WATCHED
                                  else subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT, text=True)
                 for rank in range(3)]
        watched = procs[self.WATCHED]
        lines, started, reader = watch_lines(watched.stdout, "progress: batch ")
        try:
            self.assertTrue(started.wait(60), "\n".join(lines))
            self.assertIsNone(watched.poll(), "\n".join(lines))
            os.kill(procs[STOPPED].pid, signal.SIGSTOP)
            at = time.monotonic()
            try:
                rc = watched.wait(timeout=RANK_TIMEOUT + 20)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.monotonic() - at
            reader.join(10)
            return rc, took, "\n".join(lines)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                p.wait()
            watched.stdout.close()

    def assert_timed_out_with_record(self, rc, took, text):
        self.assertEqual(rc, 2, text)
        self.assertLess(took, RANK_TIMEOUT + 8, text)
        self.assertIn(f"lost rank {STOPPED} (no answer within 3 s", text)
        self.assertNotIn("status record", text)
        with open(os.path.join(self.status, f"rank-{self.WATCHED}.json")) as f:
            record = json.load(f)
        self.assertEqual((record["rank"], record["waitingFor"], record["timedOut"]),
                         (self.WATCHED, STOPPED, True), record)
        self.assertFalse(os.path.lexists(self.partial))

    def test_planted_link_is_not_written_through(self):
        # Tests that a link at the watched rank's temporary record name, pointing at another
        # file of the user's, leaves that file's bytes as they were: the rank replaces the link.
        victim = os.path.join(self.dir, "victim")
        with open(victim, "w") as f:
            f.write("the victim's bytes\n")
        os.symlink(victim, self.partial)
        self.assert_timed_out_with_record(*self.time_out_watched_rank())
        with open(victim) as f:
            self.assertEqual(f.read(), "the victim's bytes\n")

    def test_planted_fifo_does_not_block(self):
        # Tests that a FIFO at the watched rank's temporary record name (no reader: opening it
        # to write would block forever) does not keep the rank past its --timeout.
        os.mkfifo(self.partial)
        self.assert_timed_out_with_record(*self.time_out_watched_rank())

    def test_launcher_is_not_blocked_by_a_fifo_record(self):
        # Tests that a job whose rank 0 makes its own status record a FIFO, then fails as if it
        # had lost rank 1 (so the launcher reads the records), ends the launcher with rank 0's
        # line: reading the FIFO would block it forever, SIGTERM included.
        script = ('if [ "$RANK" = 0 ]; then mkfifo "$PPC_STATUS_DIR/rank-0.json"; '
                  'echo "error: lost rank 1 (no answer within 3 s while waiting for it); '
                  'a consequence: this rank stopped because of rank 1" >&2; exit 2; fi; '
                  'exec sleep 60')
        at = time.monotonic()
        proc = launch(2, "-c", script, program="/bin/sh", launcher=["--grace-period", GRACE],
                      timeout=60)
        self.assertLess(time.monotonic() - at, 20, proc.stderr)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(proc.stderr.splitlines()[-1],
                         "error: rank 0 exited with status 2: lost rank 1 (no answer within 3 s "
                         "while waiting for it); a consequence: this rank stopped because of "
                         "rank 1", proc.stderr)

    def test_status_dir_is_private_without_tmpdir(self):
        # Tests that the launcher's status directory is 0700, and that a TMPDIR that does not
        # exist puts it in /tmp instead of leaving the ranks without one.
        script = 'stat -c "%a %U" "$PPC_STATUS_DIR"; dirname "$PPC_STATUS_DIR"'
        for tmp in [self.dir, os.path.join(self.dir, "missing")]:
            env = dict(os.environ, TMPDIR=tmp)
            proc = launch(1, "-c", script, program="/bin/sh", env=env, timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            user = pwd.getpwuid(os.geteuid()).pw_name
            where = self.dir if tmp == self.dir else "/tmp"
            self.assertEqual(proc.stdout, f"[rank 0] 700 {user}\n[rank 0] {where}\n", proc.stderr)


if __name__ == "__main__":
    main()
