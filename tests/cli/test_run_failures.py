#!/usr/bin/python3
"""Tests how `ppc run` fails: one-line errors for bad set-ups, and a lost
rank making the others exit non-zero within the timeout.

Ranks are started by hand (the torchrun variables set per process), so a
test can kill or stop one rank and watch what the others do.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MODELS, PPC, class_tmpdir, finish, free_port, rank_env, start_ranks  # noqa: E402


def wait_listening(port, proc, limit=30):
    """Waits until something accepts connections on 127.0.0.1:PORT (rank 0
    serving the rendezvous) or `proc` exits."""
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


def start_rank(rank, world, port, args, **extra):
    """Starts `ppc run ARGS` as rank RANK of WORLD meeting at PORT."""
    return subprocess.Popen([PPC, "run", *map(str, args)],
                            env=rank_env(rank, world, port, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def never_reached(missing, port, seconds):
    """The error of a rank whose peer `missing` never came. The same under
    every LibTorch: 1.13's store client gives up connecting within the
    timeout, 2.x's may overshoot it, and then ppc's own deadline finds that
    nothing listens at the port."""
    return (f"error: lost rank {missing} (never reached the rendezvous at "
            f"127.0.0.1:{port} within {seconds} s); a consequence: this rank stopped "
            f"because of rank {missing}")


class RunFailuresTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.mlp = os.path.join(cls.tmp, "mlp")
        r = subprocess.run([PPC, "split", os.path.join(MODELS, "mlp.pt"), "-o", cls.mlp,
                            "--stages", "2"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        cls.resnet = os.path.join(cls.tmp, "resnet18")
        r = subprocess.run([PPC, "split", os.path.join(MODELS, "resnet18.pt"), "-o",
                            cls.resnet, "--stages", "2"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        cls.big_input = os.path.join(cls.tmp, "big.pt")
        torch.manual_seed(0)
        torch.save(torch.randn(64, 3, 32, 32), cls.big_input)

    def args(self, manifest_dir, inp=None, *extra, timeout="20"):
        return [os.path.join(manifest_dir, "manifest.json"), "--input",
                inp or os.path.join(MODELS, "mlp.input.pt"), "--output",
                os.path.join(self.tmp, "out.pt"), "--no-meta-cache", "--timeout", timeout] + \
            list(extra)

    def one_line_error(self, stderr):
        errors = [l for l in stderr.splitlines() if l.startswith("error: ")]
        self.assertEqual(len(errors), 1, stderr)
        return errors[0]

    def test_no_launch_environment(self):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        r = subprocess.run([PPC, "run"] + self.args(self.mlp), env=env,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(),
                         "error: RANK is not set; start each rank under ppc launch or torchrun")

    def test_world_size_does_not_fit(self):
        results = finish(start_ranks(3, self.args(self.mlp)))
        for code, _, err in results:
            self.assertEqual(code, 2)
            self.assertEqual(self.one_line_error(err),
                             "error: 2 stages cannot be placed on WORLD_SIZE=3 ranks: the "
                             "stage count must equal WORLD_SIZE or be a multiple of it (2 "
                             "stages run on 1 or 2 ranks)")

    def broken_copy(self, name):
        d = os.path.join(self.tmp, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.mlp, d)
        return d

    def test_missing_stage_file(self):
        d = self.broken_copy("missing")
        os.remove(os.path.join(d, "stage_1.pt"))
        (c0, _, e0), (c1, _, e1) = finish(start_ranks(2, self.args(d)))
        self.assertEqual(c1, 2)
        self.assertEqual(self.one_line_error(e1),
                         "error: stage 1 file '%s/stage_1.pt' is missing" % d)
        self.assertEqual(c0, 2)
        self.assertTrue(self.one_line_error(e0).startswith("error: lost rank 1 ("), e0)

    def test_stage_file_hash_mismatch(self):
        d = self.broken_copy("corrupt")
        path = os.path.join(d, "stage_0.pt")
        with open(path, "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
        (c0, _, e0), (c1, _, e1) = finish(start_ranks(2, self.args(d)))
        self.assertEqual(c0, 2)
        self.assertRegex(self.one_line_error(e0),
                         r"^error: stage 0 file '.*stage_0.pt' does not match the manifest "
                         r"\(sha256 [0-9a-f]{12} != [0-9a-f]{12}\)$")
        self.assertEqual(c1, 2)
        self.assertTrue(self.one_line_error(e1).startswith("error: lost rank 0 ("), e1)

    def test_missing_input_fails_its_rank_and_is_named(self):
        missing = os.path.join(self.tmp, "nope.pt")
        (c0, _, e0), (c1, _, e1) = finish(start_ranks(2, self.args(self.mlp, missing)))
        self.assertEqual(c0, 2)
        self.assertEqual(self.one_line_error(e0),
                         "error: cannot read input '%s': No such file or directory" % missing)
        self.assertEqual(c1, 2)
        self.assertTrue(self.one_line_error(e1).startswith("error: lost rank 0 ("), e1)

    def test_input_arity_and_dtype(self):
        two = os.path.join(self.tmp, "two.pt")
        torch.save((torch.randn(5, 64), torch.randn(5, 64)), two)
        (c0, _, e0), (c1, _, _) = finish(start_ranks(2, self.args(self.mlp, two)))
        self.assertEqual((c0, c1), (2, 2))
        self.assertEqual(self.one_line_error(e0), "error: the model takes 1 input, got 2")

        ints = os.path.join(self.tmp, "ints.pt")
        torch.save(torch.ones(5, 64, dtype=torch.int64), ints)
        (c0, _, e0), (c1, _, _) = finish(start_ranks(2, self.args(self.mlp, ints)))
        self.assertEqual((c0, c1), (2, 2))
        self.assertTrue(self.one_line_error(e0).startswith("error: stage 0 failed: "), e0)

    def wait_for_schedule(self, proc):
        """Reads the rank's stdout until its schedule is printed (it has met
        the others)."""
        line = proc.stdout.readline()
        self.assertTrue(line.startswith("schedule: "), line)

    def test_killed_rank_is_named(self):
        procs = start_ranks(2, self.args(self.resnet, self.big_input, "--microbatches", "8",
                                         "--print-schedule"))
        self.wait_for_schedule(procs[1])
        procs[1].send_signal(signal.SIGKILL)
        start = time.time()
        code, _, err = finish(procs[:1], timeout=30)[0]
        finish(procs[1:])
        self.assertNotEqual(code, 0)
        self.assertLess(time.time() - start, 25)
        self.assertTrue(self.one_line_error(err).startswith("error: lost rank 1 ("), err)

    def test_stopped_rank_times_out(self):
        procs = start_ranks(2, self.args(self.resnet, self.big_input, "--microbatches", "8",
                                         "--print-schedule", timeout="4"))
        self.wait_for_schedule(procs[1])
        procs[1].send_signal(signal.SIGSTOP)
        start = time.monotonic()
        code, _, err = finish(procs[:1], timeout=30)[0]
        elapsed = time.monotonic() - start
        procs[1].send_signal(signal.SIGKILL)
        finish(procs[1:])
        self.assertEqual(code, 2, err)
        # One timeout to notice, then an exit that waits on nothing of rank
        # 1's: not for it to map the shared-memory rings (a second timeout),
        # and at most 2 s (Transport::kStoreDropBound) for rank 0's store
        # server, which LibTorch 1.13 never stops while rank 1 is stopped
        # half-way through a request (it had held rank 0 for ever).
        self.assertLess(elapsed, 8.5)
        self.assertRegex(self.one_line_error(err),
                         r"^error: lost rank 1 \(no answer within 4 s while waiting for ")


    def test_stopped_rank_0_during_start_up_is_named(self):
        # Rank 0 serves the rendezvous store and stops once it listens: its
        # store no longer answers, which c10d alone would wait on forever.
        port = free_port()
        args = self.args(self.mlp, timeout="3")
        rank0 = start_rank(0, 2, port, args)
        try:
            wait_listening(port, rank0)
            rank0.send_signal(signal.SIGSTOP)
            start = time.monotonic()
            code, _, err = finish([start_rank(1, 2, port, args)], timeout=30)[0]
            elapsed = time.monotonic() - start
        finally:
            rank0.kill()
            finish([rank0])
        self.assertEqual(code, 2, err)
        # 3 s of timeout, plus process start-up on a loaded machine.
        self.assertLess(elapsed, 12)
        self.assertEqual(err, "error: lost rank 0 (the rendezvous store at "
                              f"127.0.0.1:{port} did not answer within 3 s); a consequence: "
                              "this rank stopped because of rank 0\n")

    def test_stopped_rank_0_mid_run_is_named(self):
        procs = start_ranks(2, self.args(self.resnet, self.big_input, "--microbatches", "8",
                                         "--print-schedule", timeout="3"))
        self.wait_for_schedule(procs[0])
        procs[0].send_signal(signal.SIGSTOP)
        start = time.monotonic()
        code, _, err = finish(procs[1:], timeout=30)[0]
        elapsed = time.monotonic() - start
        procs[0].kill()
        finish(procs[:1])
        self.assertEqual(code, 2, err)
        self.assertLess(elapsed, 12)
        self.assertRegex(self.one_line_error(err),
                         r"^error: lost rank 0 \(no answer within 3 s while waiting for ")

    def test_lone_rank_names_the_rank_that_never_arrived(self):
        for present, missing in ((0, 1), (1, 0)):
            with self.subTest(present=present):
                port = free_port()
                start = time.monotonic()
                proc = start_rank(present, 2, port, self.args(self.mlp, timeout="3"))
                code, _, err = finish([proc], timeout=30)[0]
                self.assertEqual(code, 2, err)
                self.assertLess(time.monotonic() - start, 12)
                # The whole of stderr: c10d's glog lines are hidden.
                self.assertEqual(err, never_reached(missing, port, 3) + "\n")

    def test_a_rank_ignores_broken_pipes(self):
        # A write to a peer that has gone must fail as a lost rank, never
        # end the rank with SIGPIPE before the peer's own error is seen: a
        # rank ignores SIGPIPE from its start (SigIgn in /proc holds it
        # while the rank waits for its peer).
        proc = start_rank(1, 2, free_port(), self.args(self.mlp, timeout="20"))
        try:
            deadline = time.monotonic() + 15
            ignored = 0
            while time.monotonic() < deadline and not ignored & (1 << (signal.SIGPIPE - 1)):
                with open(f"/proc/{proc.pid}/status") as f:
                    line = next(l for l in f if l.startswith("SigIgn:"))
                ignored = int(line.split()[1], 16)
                time.sleep(0.05)
            self.assertTrue(ignored & (1 << (signal.SIGPIPE - 1)), hex(ignored))
        finally:
            proc.kill()
            proc.communicate()

    def test_verbose_shows_torch_diagnostics(self):
        port = free_port()
        proc = start_rank(1, 2, port, self.args(self.mlp, timeout="2") + ["--verbose"])
        code, _, err = finish([proc], timeout=30)[0]
        self.assertEqual(code, 2, err)
        self.assertIn("socket", err)
        self.assertEqual(self.one_line_error(err), never_reached(0, port, 2))

    def test_two_jobs_on_one_port_refuse_each_other(self):
        port = free_port()
        args_a = self.args(self.mlp, timeout="30")
        a0 = start_rank(0, 2, port, args_a, PPC_JOB_TOKEN="job-a")
        try:
            wait_listening(port, a0)
            out_b = os.path.join(self.tmp, "out_b.pt")
            args_b = self.args(self.mlp, timeout="5")
            args_b[args_b.index("--output") + 1] = out_b
            (b0, _, e0), (b1, _, e1) = finish(
                [start_rank(r, 2, port, args_b, PPC_JOB_TOKEN="job-b") for r in (0, 1)])
            a1 = start_rank(1, 2, port, args_a, PPC_JOB_TOKEN="job-a")
            (c0, _, ea0), (c1, _, ea1) = finish([a0, a1])
        finally:
            a0.kill()
        self.assertEqual((b0, b1), (2, 2))
        self.assertEqual(e0, f"error: MASTER_PORT {port} is taken on this machine "
                             "(another job?); choose another port\n")
        self.assertEqual(e1, "error: another job (job token 'job-a') holds the rendezvous "
                             f"at 127.0.0.1:{port}; give each job its own MASTER_PORT\n")
        self.assertFalse(os.path.exists(out_b))
        # Job a is not disturbed.
        self.assertEqual((c0, c1), (0, 0), ea0 + ea1)
        got = torch.load(os.path.join(self.tmp, "out.pt"))
        want = torch.load(os.path.join(MODELS, "mlp.expected.pt"))
        torch.testing.assert_close(got, want)

    def test_huge_microbatch_count_fails_before_building_anything(self):
        start = time.monotonic()
        results = finish(start_ranks(2, self.args(self.mlp, None, "--microbatches",
                                                  "100000000")))
        self.assertLess(time.monotonic() - start, 20)
        for code, _, err in results:
            self.assertEqual(code, 2)
            self.assertEqual(err, "error: --microbatches: 100000000 is not an integer in "
                                  "1..65536 (see ppc run --help)\n")

    def test_microbatches_above_the_batch(self):
        results = finish(start_ranks(2, self.args(self.mlp, None, "--microbatches", "1000")))
        (c0, _, e0), (c1, _, e1) = results
        self.assertEqual((c0, c1), (2, 2))
        self.assertEqual(self.one_line_error(e0),
                         "error: --microbatches 1000 exceeds the batch size 5")
        self.assertTrue(self.one_line_error(e1).startswith("error: lost rank 0 ("), e1)

    def test_threads_out_of_range(self):
        limit = max(4, 4 * os.cpu_count())
        for threads in ("-1", "100000"):
            with self.subTest(threads=threads):
                results = finish(start_ranks(2, self.args(self.mlp, None, "--threads", threads)))
                for code, _, err in results:
                    self.assertEqual(code, 2)
                    self.assertEqual(err, f"error: --threads: {threads} is not an integer in "
                                          f"0..{limit} (0: the default; at most 4 per core) "
                                          "(see ppc run --help)\n")

    def max_threads_of_run(self, threads):
        """Runs one rank (world 1) with --threads THREADS; returns the most
        threads its process had for two samples in a row (20 ms apart), from
        /proc/PID/task: a thread that lives shorter than a sample interval
        (the store's, a connection's) is rarely seen twice."""
        port = free_port()
        proc = start_rank(0, 1, port, self.args(self.resnet, self.big_input, "--microbatches",
                                                "4", "--threads", threads))
        most = [0]

        def sample():
            last = 0
            while proc.poll() is None:
                try:
                    now = len(os.listdir(f"/proc/{proc.pid}/task"))
                except FileNotFoundError:
                    break
                most[0] = max(most[0], min(last, now))
                last = now
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        code, _, err = finish([proc], timeout=120)[0]
        sampler.join()
        self.assertEqual(code, 0, err)
        return most[0]

    def test_threads_sets_the_intra_op_pool(self):
        # Each thread pool that honours the setting (OpenMP, and the BLAS
        # LibTorch was built with) adds THREADS - 1 workers to a rank's fixed
        # threads (Gloo, store, interop). Short-lived threads (a Gloo
        # connection, the store's accept loop) may or may not be caught by the
        # sampler, so the difference is bounded, not exact: at least one pool
        # grew by 3, and no more than the two pools did plus a couple of
        # transient threads.
        one, four = self.max_threads_of_run("1"), self.max_threads_of_run("4")
        self.assertGreaterEqual(four - one, 3, (one, four))
        self.assertLessEqual(four - one, 2 * 3 + 2, (one, four))


    def test_unknown_schedule_names_are_refused(self):
        # The names come from the runtime's one table; an enum's number is
        # not a name.
        for name in ("bogus", "0"):
            with self.subTest(name=name):
                r = subprocess.run([PPC, "run", *self.args(self.mlp), "--schedule", name],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual((r.returncode, r.stdout), (2, ""))
                self.assertEqual(r.stderr, f"error: --schedule: must be gpipe, 1f1b or looped-bfs (got "
                                           f"'{name}') (see ppc run --help)\n")


if __name__ == "__main__":
    unittest.main()
