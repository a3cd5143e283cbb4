"""Tests that `ppc launch` starts workers like torchrun and supervises them.

Run: /usr/bin/python3 tests/cli/test_launch.py -v
The ppc binary comes from $PPC (see common.py). Workers are small
`sh -c` scripts, so these tests need no models and take a few seconds.
"""

import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PPC, free_port, tmpdir  # noqa: E402


def timed_launch(*args, env=None, timeout=20):
    """Runs `ppc launch ARGS...`; returns (exit code, stdout, stderr, seconds)."""
    start = time.monotonic()
    result = subprocess.run([PPC, "launch", *args], capture_output=True,
                            text=True, env=env, timeout=timeout)
    return (result.returncode, result.stdout, result.stderr,
            time.monotonic() - start)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class LaunchTest(unittest.TestCase):
    def test_env_per_rank(self):
        code, out, err, _ = timed_launch(
            "--nproc-per-node", "3", "--",
            "sh", "-c", "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
            "$GROUP_RANK $MASTER_ADDR $MASTER_PORT")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(out.splitlines()), [
            "[rank 0] 0 3 0 3 0 127.0.0.1 29500",
            "[rank 1] 1 3 1 3 0 127.0.0.1 29500",
            "[rank 2] 2 3 2 3 0 127.0.0.1 29500",
        ])
        self.assertEqual(err, "")

    def test_nnodes_and_node_rank(self):
        code, out, err, _ = timed_launch(
            "--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "2",
            "--master-addr", "10.1.2.3", "--master-port", "1234", "--",
            "sh", "-c", "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
            "$GROUP_RANK $MASTER_ADDR $MASTER_PORT")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(out.splitlines()), [
            "[rank 4] 4 6 0 2 2 10.1.2.3 1234",
            "[rank 5] 5 6 1 2 2 10.1.2.3 1234",
        ])

    def test_inherits_environment_and_overrides_launch_variables(self):
        env = dict(os.environ, PPC_TEST_VALUE="kept", RANK="99",
                   WORLD_SIZE="99")
        code, out, err, _ = timed_launch(
            "--nproc-per-node", "2", "--",
            "sh", "-c", "echo $PPC_TEST_VALUE $RANK $WORLD_SIZE", env=env)
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(out.splitlines()),
                         ["[rank 0] kept 0 2", "[rank 1] kept 1 2"])

    def test_command_without_dashes(self):
        code, out, err, _ = timed_launch("--nproc-per-node", "1", "sh", "-c",
                                         "echo $0 $1", "--timeout", "x")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "[rank 0] --timeout x\n")

    def test_line_prefixes_per_stream(self):
        code, out, err, _ = timed_launch(
            "--nproc-per-node", "2", "--",
            "sh", "-c", "echo out $RANK; echo err $RANK >&2; printf 'no-eol'")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(out.splitlines(keepends=True)), [
            "[rank 0] no-eol\n", "[rank 0] out 0\n",
            "[rank 1] no-eol\n", "[rank 1] out 1\n",
        ])
        self.assertEqual(sorted(err.splitlines(keepends=True)),
                         ["[rank 0] err 0\n", "[rank 1] err 1\n"])

    def test_lines_are_never_interleaved(self):
        script = ("import os\n"
                  "r = os.environ['RANK']\n"
                  "for i in range(3000):\n"
                  "    print(f'{r}:{i}:' + r * (i % 500))\n")
        code, out, err, _ = timed_launch("--nproc-per-node", "4", "--",
                                         sys.executable, "-c", script)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 4 * 3000)
        pattern = re.compile(r"\[rank (\d)\] (\d):(\d+):(\d*)")
        next_index = {}
        for line in lines:
            m = pattern.fullmatch(line)
            self.assertIsNotNone(m, line[:100])
            rank, index = m.group(1), int(m.group(3))
            self.assertEqual(m.group(2), rank)
            self.assertEqual(m.group(4), rank * (index % 500))
            self.assertEqual(next_index.get(rank, 0), index)
            next_index[rank] = index + 1

    def test_long_lines_arrive_whole(self):
        # A 100 KiB line (a JSON record, a tensor print) arrives as one
        # prefixed line; only a runaway line without '\n' past 1 MiB is cut.
        script = ("import os, sys\n"
                  "r = os.environ['RANK']\n"
                  "sys.stdout.write(r * 102400 + '\\n')\n"
                  "sys.stdout.write('z' * (3 << 20))\n")
        code, out, err, _ = timed_launch("--nproc-per-node", "2", "--",
                                         sys.executable, "-c", script, timeout=60)
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        # Compare lengths and flags, not the lines: a failure must not print
        # megabytes.
        for rank in "01":
            whole = f"[rank {rank}] " + rank * 102400
            self.assertTrue(whole in lines, f"rank {rank}'s 100 KiB line is not whole: "
                            f"line lengths {[len(l) for l in lines]}")
            pieces = [l[len("[rank 0] "):] for l in lines
                      if l.startswith(f"[rank {rank}] z")]
            self.assertTrue("".join(pieces) == "z" * (3 << 20),
                            f"rank {rank}'s unterminated 3 MiB: pieces "
                            f"{[len(p) for p in pieces]}")
            self.assertLessEqual(max(len(p) for p in pieces), 1 << 20)
        self.assertEqual(len(lines), 2 + 2 * 3, [len(l) for l in lines])

    def test_master_port_zero_serves_the_store_in_the_launcher(self):
        # The launcher holds the port for the whole job (workers meet at its
        # store), so no other process can take it between choosing and use.
        script = ("import os, socket\n"
                  "port = int(os.environ['MASTER_PORT'])\n"
                  "s = socket.socket()\n"
                  "try:\n"
                  "    s.bind(('0.0.0.0', port)); print('free')\n"
                  "except OSError:\n"
                  "    print('held')\n"
                  "print(os.environ.get('TORCHELASTIC_USE_AGENT_STORE'), "
                  "os.environ.get('PPC_JOB_TOKEN'))\n")
        tokens = set()
        for _ in range(2):
            code, out, err, _ = timed_launch("--nproc-per-node", "2", "--master-port", "0",
                                             "--", sys.executable, "-c", script)
            self.assertEqual(code, 0, err)
            lines = out.splitlines()
            per_rank = [[l for l in lines if l.startswith(f"[rank {r}] ")] for r in (0, 1)]
            m = re.fullmatch(r"\[rank 0\] True ([0-9a-f]{16})", per_rank[0][-1])
            self.assertIsNotNone(m, lines)
            self.assertEqual(per_rank, [["[rank 0] held", "[rank 0] True " + m.group(1)],
                                        ["[rank 1] held", "[rank 1] True " + m.group(1)]])
            tokens.add(m.group(1))
        self.assertEqual(len(tokens), 2)

    def test_explicit_port_is_left_to_rank_0(self):
        port = free_port()
        code, out, err, _ = timed_launch("--nproc-per-node", "1", "--master-port", str(port),
                                         "--", "sh", "-c",
                                         "echo ${TORCHELASTIC_USE_AGENT_STORE:-rank0} $MASTER_PORT")
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(out, f"[rank 0] rank0 {port}\n")

    def test_stdin_is_dev_null(self):
        code, out, err, elapsed = timed_launch("--nproc-per-node", "2", "--", "cat")
        self.assertEqual((code, out, err), (0, "", ""))
        self.assertLess(elapsed, 5)

    def test_failing_rank_stops_peers(self):
        pids = tmpdir(self)
        code, out, err, elapsed = timed_launch(
            "--nproc-per-node", "3", "--",
            "sh", "-c",
            f"echo $$ > {pids}/$RANK; "
            "if [ $RANK = 1 ]; then sleep 0.2; echo failing; exit 3; fi; "
            "exec sleep 30")
        self.assertEqual(code, 2)
        self.assertLess(elapsed, 5)
        self.assertIn("[rank 1] failing\n", out)
        self.assertEqual(err, "error: rank 1 exited with status 3\n")
        for rank in range(3):
            with open(os.path.join(pids, str(rank))) as f:
                self.assertFalse(pid_alive(int(f.read())), rank)

    def test_an_error_every_rank_prints_shows_once(self):
        # Ranks that check the same thing fail alike (issue #44): one rank's
        # line is forwarded, a note names the others, and the launcher's last
        # line gives the error again as the root cause.
        code, _, err, _ = timed_launch(
            "--nproc-per-node", "3", "--",
            "sh", "-c", "echo 'error: --lr -1 is not above 0' >&2; "
            "echo \"error: rank-specific $RANK\" >&2; sleep 1; exit 2")
        self.assertEqual(code, 2)
        lines = err.splitlines()
        same = [l for l in lines if l.endswith("] error: --lr -1 is not above 0")]
        self.assertEqual(len(same), 1, err)
        # Lines that differ between ranks are each forwarded.
        self.assertEqual(sorted(l for l in lines if l.startswith("[rank") and "specific" in l),
                         ["[rank %d] error: rank-specific %d" % (r, r) for r in range(3)], err)
        cause = re.match(r"^error: rank (\d) exited with status 2: rank-specific \1$", lines[-1])
        self.assertTrue(cause, err)
        # Each rank's last error line is its error: they all differ, so no note.
        self.assertFalse([l for l in lines if l.startswith("note:")], err)
        code, _, err, _ = timed_launch(
            "--nproc-per-node", "3", "--",
            "sh", "-c", "echo 'error: --lr -1 is not above 0' >&2; sleep 1; exit 2")
        self.assertEqual(code, 2)
        lines = err.splitlines()
        self.assertEqual(len(lines), 3, err)
        self.assertRegex(lines[0], r"^\[rank \d\] error: --lr -1 is not above 0$")
        cause = re.match(r"^error: rank (\d) exited with status 2: --lr -1 is not above 0$",
                         lines[2])
        self.assertTrue(cause, err)
        others = [str(r) for r in range(3) if r != int(cause.group(1))]
        self.assertEqual(lines[1], "note: ranks %s and %s reported the same error" % tuple(others))

    def test_rank_killed_by_signal(self):
        code, _, err, elapsed = timed_launch(
            "--nproc-per-node", "2", "--",
            "sh", "-c", "if [ $RANK = 0 ]; then kill -KILL $$; fi; sleep 30")
        self.assertEqual(code, 2)
        self.assertLess(elapsed, 5)
        self.assertEqual(err, "error: rank 0 killed by signal SIGKILL\n")

    def test_peer_ignoring_sigterm_is_killed_after_grace_period(self):
        code, _, err, elapsed = timed_launch(
            "--nproc-per-node", "2", "--grace-period", "0.5", "--",
            "sh", "-c",
            "if [ $RANK = 0 ]; then sleep 0.2; exit 1; fi; "
            "trap '' TERM; sleep 30")
        self.assertEqual(code, 2)
        self.assertGreater(elapsed, 0.6)
        self.assertLess(elapsed, 5)
        self.assertEqual(err, "error: rank 0 exited with status 1\n")

    def test_timeout_stops_the_ranks_with_one_error(self):
        code, _, err, elapsed = timed_launch("--nproc-per-node", "2", "--timeout",
                                             "0.5", "--", "sleep", "30")
        self.assertEqual(code, 2)
        self.assertLess(elapsed, 5)
        self.assertEqual(err, "error: timed out after 0.5 seconds\n")

    def start_and_signal(self, sig, to_group):
        """Starts 2 workers that report `sig`, then signals the launcher (or
        its whole process group, like a terminal's Ctrl-C)."""
        name = signal.Signals(sig).name[3:]
        proc = subprocess.Popen(
            [PPC, "launch", "--nproc-per-node", "2", "--",
             "sh", "-c", f"trap 'echo got {name}; exit 0' {name}; "
             "echo ready; while :; do sleep 0.05; done"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        try:
            ready = [proc.stdout.readline() for _ in range(2)]
            self.assertEqual(sorted(ready),
                             ["[rank 0] ready\n", "[rank 1] ready\n"])
            start = time.monotonic()
            if to_group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            out, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertLess(time.monotonic() - start, 5)
        self.assertEqual(proc.returncode, 2)
        got = sorted(line for line in out.splitlines() if "got" in line)
        self.assertEqual(got, [f"[rank 0] got {name}", f"[rank 1] got {name}"])
        self.assertTrue(err.endswith(f"error: interrupted by SIG{name}\n"), err)

    def test_sigterm_is_forwarded(self):
        self.start_and_signal(signal.SIGTERM, to_group=False)

    def test_ctrl_c_reaches_workers_through_launcher(self):
        self.start_and_signal(signal.SIGINT, to_group=True)

    def test_master_port_zero_picks_a_free_port(self):
        code, out, err, _ = timed_launch("--nproc-per-node", "2", "--master-port",
                                         "0", "--", "sh", "-c", "echo $MASTER_PORT")
        self.assertEqual(code, 0, err)
        m = re.fullmatch(r"note: using MASTER_PORT=(\d+)\n", err)
        self.assertIsNotNone(m, err)
        port = m.group(1)
        self.assertTrue(0 < int(port) < 65536)
        self.assertEqual(sorted(out.splitlines()),
                         [f"[rank 0] {port}", f"[rank 1] {port}"])

    def test_command_not_found(self):
        code, out, err, _ = timed_launch("--nproc-per-node", "2", "--",
                                         "ppc-no-such-command", "x")
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(
            err,
            "error: cannot run 'ppc-no-such-command': No such file or "
            "directory\n")

    def test_bad_arguments_get_one_line_errors(self):
        cases = [
            (["--nproc-per-node", "0", "--", "true"],
             "error: --nproc-per-node: 0 is not an integer in 1..1024, auto, cpu "
             "or gpu (see ppc launch --help)"),
            (["--nproc-per-node", "2"],
             "error: no command to launch (put it after '--')"),
            (["--nproc-per-node", "2", "--"],
             "error: no command to launch (put it after '--')"),
            (["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2",
              "--", "true"],
             "error: --node-rank 2 is not an integer in 0..1"),
            (["--nproc-per-node", "1", "--nnodes", "0", "--", "true"],
             "error: --nnodes: 0 is not an integer in 1..2147483647 (see ppc "
             "launch --help)"),
            (["--nproc-per-node", "1", "--timeout", "0", "--", "true"],
             "error: --timeout: 0 is not a number of seconds in 0.001..604800 "
             "(see ppc launch --help)"),
            (["--nproc-per-node", "1", "--master-port", "70000", "--",
              "true"],
             "error: --master-port: 70000 is not an integer in 0..65535 (see "
             "ppc launch --help)"),
            (["--nproc-per-node", "1", "--nnodes", "2", "--master-port", "0",
              "--", "true"],
             "error: --master-port 0 needs --nnodes 1: the nodes must agree "
             "on the port"),
            (["--nproc-per-node", "1", "--grace-period", "-1", "--", "true"],
             "error: --grace-period: -1 is not a number of seconds in "
             "0..604800 (see ppc launch --help)"),
            (["--", "true"],
             "error: --nproc-per-node is required (see ppc launch --help)"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                code, out, err, _ = timed_launch(*args)
                self.assertEqual((code, out, err), (2, "", message + "\n"))

    def test_torchrun_flag_spellings_are_accepted(self):
        script = ["sh", "-c", "echo $RANK $WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT"]
        code, out, err, _ = timed_launch("--nproc_per_node=2", "--", *script)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(sorted(out.splitlines()), ["[rank 0] 0 2 0 127.0.0.1 29500",
                                                    "[rank 1] 1 2 0 127.0.0.1 29500"])
        code, out, err, _ = timed_launch("--nproc_per_node", "1", "--nnodes=3", "--node_rank=2",
                                         "--master_addr=10.1.2.3", "--master_port=1234", *script)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(out, "[rank 2] 2 3 2 10.1.2.3 1234\n")
        code, out, err, _ = timed_launch("--nproc_per_node=0", "--", "true")
        self.assertEqual((code, out, err), (2, "", "error: --nproc-per-node: 0 is not an integer "
                                                   "in 1..1024, auto, cpu or gpu (see ppc launch "
                                                   "--help)\n"))

    def test_standalone_serves_the_store_on_a_free_port(self):
        code, out, err, _ = timed_launch(
            "--standalone", "--nproc-per-node=2", "--", "sh", "-c",
            "echo $MASTER_ADDR:$MASTER_PORT $TORCHELASTIC_USE_AGENT_STORE")
        self.assertEqual(code, 0, err)
        m = re.fullmatch(r"note: using MASTER_PORT=(\d+)\n", err)
        self.assertIsNotNone(m, err)
        port = m.group(1)
        self.assertNotEqual(port, "29500")
        self.assertEqual(sorted(out.splitlines()), [f"[rank 0] 127.0.0.1:{port} True",
                                                    f"[rank 1] 127.0.0.1:{port} True"])
        for option, flag in ((["--nnodes", "2"], "--nnodes"),
                             (["--master_port", "1234"], "--master-port"),
                             (["--node_rank=0"], "--node-rank")):
            with self.subTest(option=option):
                code, out, err, _ = timed_launch("--standalone", "--nproc-per-node", "1", *option,
                                                 "--", "true")
                self.assertEqual((code, out, err), (2, "", f"error: {flag} excludes --standalone "
                                                           "(see ppc launch --help)\n"))

    def test_nproc_per_node_words(self):
        # As torchrun: cpu is one worker per CPU, gpu one per GPU (an error
        # without one), auto gpu when there is one, else cpu.
        rank0_world = ["--", "sh", "-c", "if [ $RANK = 0 ]; then echo $WORLD_SIZE; fi"]
        cpus = os.cpu_count()
        code, out, err, _ = timed_launch("--nproc-per-node", "cpu", *rank0_world)
        self.assertEqual((code, out, err), (0, f"[rank 0] {cpus}\n", ""))
        version = subprocess.run([PPC, "--version"], capture_output=True, text=True).stdout
        has_gpu = "CUDA: yes" in version and os.path.exists("/dev/nvidia0")
        if has_gpu:
            return
        code, out, err, _ = timed_launch("--nproc-per-node", "auto", *rank0_world)
        self.assertEqual((code, out, err), (0, f"[rank 0] {cpus}\n", ""))
        code, out, err, _ = timed_launch("--nproc-per-node", "gpu", *rank0_world)
        self.assertEqual((code, out, err), (2, "", "error: --nproc-per-node gpu: this machine "
                                                   "has no GPU that this ppc's LibTorch can use "
                                                   "(CUDA is not available)\n"))

    def test_all_ranks_succeed(self):
        code, _, err, _ = timed_launch("--nproc-per-node", "4", "--", "true")
        self.assertEqual((code, err), (0, ""))

    def test_help_explains_every_option(self):
        result = subprocess.run([PPC, "launch", "--help"], capture_output=True,
                                text=True, timeout=20)
        self.assertEqual(result.returncode, 0)
        for option in ["--nproc-per-node", "--nnodes", "--node-rank",
                       "--master-addr", "--master-port", "--timeout",
                       "--grace-period", "command", "--nproc_per_node",
                       "--node_rank", "--master_addr", "--master_port",
                       "--standalone"]:
            self.assertIn(option, result.stdout)


if __name__ == "__main__":
    unittest.main()
