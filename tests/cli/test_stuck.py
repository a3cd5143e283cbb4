"""Tests that a stuck job says where it is stuck (issue #31, section 7).

One rank of a 3-rank `ppc launch` is stopped (SIGSTOP) mid-run, in
inference (`ppc run`) and in training (`ppc train`). The other ranks' waits
time out: each prints one error line with its position in its schedule
(runtime/exec/Executor.h, "Where a rank stands"), and the launcher's closing
line names the stopped rank and who waits for it (tools/ppc/Launcher.h).

Run: /usr/bin/python3 tests/cli/test_stuck.py -v
Needs the test models (PPC_MODELS_DIR); about 30 s.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PPC, class_tmpdir, main, model_path, split_at  # noqa: E402
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


def children(pid):
    """The pids of PID's children (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def rank_of(pid):
    """RANK of process PID, from its environment."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        for var in f.read().split(b"\0"):
            if var.startswith(b"RANK="):
                return int(var[5:])
    return None


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
        lines, stopped = [], []
        started = threading.Event()

        def read():
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if not started.is_set() and re.search(progress, line):
                    started.set()
            started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            self.assertTrue(started.wait(60), "\n".join(lines))
            self.assertIsNone(proc.poll(), "\n".join(lines))
            for pid in children(proc.pid):
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

    def test_inference(self):
        rc, took, lines = self.stop_mid_run(
            ["run", self.manifest, "--input", model_path("mlp", ".input.pt"), "--output",
             os.path.join(self.tmp, "out.pt"), "--repeat", "1000000", "--microbatches", "5",
             "--progress", "--no-meta-cache"], r"progress: batch ")
        self.assert_stuck(rc, took, lines)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out.pt")))

    def test_training(self):
        rc, took, lines = self.stop_mid_run(
            ["train", self.manifest, "--data", self.data, "--loss", "cross_entropy", "--steps",
             "1000000", "--microbatches", "5", "--no-meta-cache"], r"step \d+ loss ")
        self.assert_stuck(rc, took, lines)


if __name__ == "__main__":
    main()
