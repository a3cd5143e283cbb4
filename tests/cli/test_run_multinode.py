#!/usr/bin/python3
"""Tests `ppc run` across nodes and under a real torchrun.

1. Two nodes in network namespaces: two fresh namespaces joined by a veth
   pair with private addresses (10.213.X.1/24 and 10.213.X.2/24, only inside
   these namespaces), one `ppc launch --nnodes 2 --node-rank R` in each. The
   output must equal a single-node 2-rank run's exactly and the model's
   NAME.expected.pt with allclose(rtol=atol=1e-5). Needs root (ip netns add);
   skipped otherwise.
2. A real torchrun (`torchrun --no-python --nproc-per-node 2 ppc run ...`):
   the PyTorch 2.x configuration's (next to common.pytorch2_python(): build/venv
   from scripts/python.sh, or your python3's), else one in PATH when it works
   here; skipped otherwise. Its output must equal `ppc launch`'s
   exactly and the model's expected output.

Each test is its own ctest entry (tests/CMakeLists.txt), so a skip shows as
"Skipped" with its reason.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import random
import re
import shutil
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, assert_identical, assert_outputs_close,  # noqa: E402
                    expected_output, launch, main, model_path, pytorch2_python, split_at,
                    tmpdir)

PPC = os.path.abspath(PPC)  # `ip netns exec` and torchrun run it from elsewhere
NAME = "two_io"
STEP_TIMEOUT = 45  # seconds for any one subprocess


def find_torchrun():
    """The torchrun to test: the one next to the PyTorch 2.x configuration's
    Python (common.pytorch2_python()), else one in PATH."""
    beside = os.path.join(os.path.dirname(pytorch2_python()), "torchrun")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("torchrun")


def major_version(text, prefix):
    m = re.search(r"^%s(\d+)\." % prefix, text, re.M)
    return int(m.group(1)) if m else None


def store_mismatch(torchrun):
    """Why this ppc cannot join `torchrun`'s store, or None. torchrun serves
    the rendezvous store itself (TORCHELASTIC_USE_AGENT_STORE=True), and a
    2.x TCPStore server drops clients that skip the validation handshake,
    which LibTorch 1.x's client predates ("Connection reset by peer")."""
    ppc_major = major_version(run_step([PPC, "--version"]).stdout, "LibTorch ")
    with open(torchrun, "rb") as f:
        shebang = f.readline().decode(errors="replace")
    if not shebang.startswith("#!"):
        return None
    r = run_step([shebang[2:].strip(), "-c", "import torch; print(torch.__version__)"], timeout=120)
    torchrun_major = major_version(r.stdout, "")
    if ppc_major is not None and torchrun_major is not None and \
            ppc_major < 2 <= torchrun_major:
        return ("%s is torch %s's: its store expects a client handshake that this ppc's "
                "LibTorch %d.x lacks; run this test with a ppc built against LibTorch 2.x "
                "(scripts/build.sh pytorch2)" % (torchrun, r.stdout.strip(), ppc_major))
    return None


def run_step(cmd, timeout=STEP_TIMEOUT, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def communicate(proc, timeout):
    """Waits for proc; kills it on timeout. Returns (rc, stdout+stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, (out or "") + (err or "") + "\n(timed out after %ss)" % timeout
    return proc.returncode, out + err


class MultiNodeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)

    def node_run_command(self, manifest, output):
        return [PPC, "run", manifest, "--input", os.path.abspath(model_path(NAME, ".input.pt")),
                "--output", output, "--microbatches", "3", "--no-meta-cache",
                "--timeout", "30"]

    def check_expected(self, got):
        assert_outputs_close(self, expected_output(NAME), got)

    # -- network namespaces ------------------------------------------------

    def ip(self, *args):
        r = run_step(["ip", *args], timeout=15)
        self.assertEqual(r.returncode, 0, "ip %s: %s" % (" ".join(args), r.stderr))

    def make_namespaces(self):
        """Two namespaces joined by a veth pair; returns (ns_a, ns_b, addr_a)."""
        if shutil.which("ip") is None:
            self.skipTest("network namespaces unavailable: no 'ip' (iproute2)")
        tag = "ppc-%d-%04x" % (os.getpid(), random.randrange(0x10000))
        ns_a, ns_b = tag + "-a", tag + "-b"
        r = run_step(["ip", "netns", "add", ns_a], timeout=15)
        if r.returncode != 0:
            self.skipTest("network namespaces unavailable: " + r.stderr.strip())
        self.addCleanup(run_step, ["ip", "netns", "delete", ns_a], timeout=15)
        r = run_step(["ip", "netns", "add", ns_b], timeout=15)
        if r.returncode != 0:
            self.skipTest("network namespaces unavailable: " + r.stderr.strip())
        self.addCleanup(run_step, ["ip", "netns", "delete", ns_b], timeout=15)
        # The veth ends are created directly inside the namespaces, so nothing
        # is added to the caller's namespace; deleting a namespace removes
        # its end and with it the pair.
        x = random.randrange(1, 255)
        addr_a, addr_b = "10.213.%d.1" % x, "10.213.%d.2" % x
        r = run_step(["ip", "link", "add", "va", "netns", ns_a, "type", "veth",
                      "peer", "name", "vb", "netns", ns_b], timeout=15)
        if r.returncode != 0:
            self.skipTest("network namespaces unavailable: veth: " + r.stderr.strip())
        for ns, dev, addr in ((ns_a, "va", addr_a), (ns_b, "vb", addr_b)):
            self.ip("-n", ns, "link", "set", "lo", "up")
            self.ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
            self.ip("-n", ns, "link", "set", dev, "up")
        # Wait until the link answers (veth carrier comes up asynchronously).
        r = run_step(["ip", "netns", "exec", ns_b, "ping", "-c", "1", "-W", "5", addr_a],
                     timeout=15) \
            if shutil.which("ping") else None
        if r is not None and r.returncode != 0:
            self.fail("no connectivity between namespaces: " + r.stdout + r.stderr)
        return ns_a, ns_b, addr_a

    def test_two_nodes_in_network_namespaces(self):
        ns_a, ns_b, master = self.make_namespaces()
        manifest = split_at(NAME, 2, os.path.join(self.tmp, "split"))

        # Reference: one node, two ranks.
        single = os.path.join(self.tmp, "single.pt")
        r = launch(2, *self.node_run_command(manifest, single)[1:], timeout=STEP_TIMEOUT,
                   launcher=("--timeout", "40"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

        port = str(random.randrange(20000, 40000))
        procs, outs = [], []
        for rank, ns in enumerate((ns_a, ns_b)):
            out = os.path.join(self.tmp, "node%d.pt" % rank)
            outs.append(out)
            cmd = ["ip", "netns", "exec", ns, PPC, "launch", "--nnodes", "2",
                   "--node-rank", str(rank), "--nproc-per-node", "1",
                   "--master-addr", master, "--master-port", port, "--timeout", "40",
                   "--"] + self.node_run_command(manifest, out)
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        results = [communicate(p, STEP_TIMEOUT) for p in procs]
        for rank, (rc, text) in enumerate(results):
            self.assertEqual(rc, 0, "node %d:\n%s" % (rank, text))

        # Stage 1 (the last) runs on rank 1, i.e. on node 1.
        self.assertFalse(os.path.exists(outs[0]), "node 0 wrote an output")
        got = torch.load(outs[1])
        assert_identical(self, torch.load(single), got)
        self.check_expected(got)

    # -- torchrun ----------------------------------------------------------

    def test_ranks_start_under_a_real_torchrun(self):
        torchrun = find_torchrun()
        why = ("no torchrun next to %s (scripts/python.sh build) nor in PATH"
               % pytorch2_python())
        if torchrun is not None:
            try:
                r = run_step([torchrun, "--help"], timeout=30)
                why = None if r.returncode == 0 else \
                    "torchrun --help exited %d: %s" % (r.returncode, r.stderr.strip())
            except subprocess.TimeoutExpired:
                why = "torchrun --help did not finish within 30 s"
        if why is None:
            # --help alone is not enough: Debian's torchrun 1.13 parses its
            # options on Python 3.11 but fails before starting any worker.
            try:
                r = run_step([torchrun, "--nproc_per_node", "1", "--master_port",
                              str(random.randrange(20000, 40000)), "--no_python", "true"],
                             timeout=30, start_new_session=True)
                if r.returncode != 0:
                    lines = r.stderr.strip().splitlines()
                    why = "a trivial 'torchrun --no_python true' exited %d: %s" % (
                        r.returncode, lines[-1] if lines else "")
            except subprocess.TimeoutExpired:
                why = "a trivial 'torchrun --no_python true' did not finish within 30 s"
        if why is not None:
            self.skipTest("no working torchrun here (Debian's 1.13 torchrun fails on "
                          "Python 3.11); " + why)
        why = store_mismatch(torchrun)
        if why is not None:
            self.skipTest(why)
        manifest = split_at(NAME, 2, os.path.join(self.tmp, "split"))
        # Reference: the same run under ppc launch.
        single = os.path.join(self.tmp, "launch.pt")
        r = launch(2, *self.node_run_command(manifest, single)[1:], timeout=STEP_TIMEOUT,
                   launcher=("--timeout", "40"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = os.path.join(self.tmp, "torchrun.pt")
        port = str(random.randrange(20000, 40000))
        # Underscored options: the only spelling old torchruns know, still
        # accepted by new ones. A torch 2.x torchrun serves the rendezvous
        # store on MASTER_PORT itself (TORCHELASTIC_USE_AGENT_STORE=True):
        # ppc's rank 0 must join it as a client, not fail to bind the port.
        p = subprocess.Popen([torchrun, "--nproc_per_node", "2", "--master_port", port,
                              "--no_python"] + self.node_run_command(manifest, out),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            text = p.communicate(timeout=STEP_TIMEOUT)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)  # torchrun and its workers, all in this new session
            text = p.communicate()
            rc = None
        self.assertEqual(rc, 0, "torchrun:\n%s\n%s" % text)
        got = torch.load(out)
        assert_identical(self, torch.load(single), got)
        self.check_expected(got)


if __name__ == "__main__":
    main()
