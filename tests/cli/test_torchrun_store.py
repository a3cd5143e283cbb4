"""Tests that a LibTorch 1.13 ppc under PyTorch 2.x's torchrun fails at once.

torchrun 2.x serves the rendezvous store on MASTER_PORT itself, in the 2.x
store protocol, which LibTorch 1.13's client cannot speak: without a check
every rank would wait its whole --timeout for an answer. The ppc under test
must tell within a couple of seconds and say what to do, on every rank, in
one line.

Needs a torch 2.x torchrun: $PPC_TORCHRUN, else the one next to the PyTorch
2.x configuration's Python (common.pytorch2_python(), scripts/python.sh);
skipped without one, and for a ppc built against LibTorch 2.x (whose pairing
with torchrun test_run_multinode.py's test_ranks_start_under_a_real_torchrun checks).
Run in build-system/: PPC=$PWD/bin/ppc PPC_MODELS_DIR=$PWD/models
/usr/bin/python3 ../tests/cli/test_torchrun_store.py -v (about 10 s).
"""

import os
import random
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, libtorch_major, main, model_path, pytorch2_python,  # noqa: E402
                    split_at, tmpdir)

PPC = os.path.abspath(PPC)
TORCHRUN = os.environ.get("PPC_TORCHRUN") or os.path.join(
    os.path.dirname(pytorch2_python()), "torchrun")


class TorchrunStoreTest(unittest.TestCase):
    def test_a_1_13_ppc_under_torchrun_2_fails_fast(self):
        if not os.access(TORCHRUN, os.X_OK):
            self.skipTest(f"no torch 2.x torchrun at {TORCHRUN} (scripts/python.sh build, "
                          "or set PPC_TORCHRUN)")
        if libtorch_major() >= 2:
            self.skipTest("this ppc is built against LibTorch 2.x: it pairs with torchrun "
                          "(test_run_multinode.py, test_ranks_start_under_a_real_torchrun)")
        tmp = tmpdir(self)
        manifest = split_at("mlp", 2, os.path.join(tmp, "mlp"))
        out = os.path.join(tmp, "out.pt")
        port = str(random.randrange(20000, 40000))
        start = time.monotonic()
        proc = subprocess.Popen(
            [TORCHRUN, "--nproc_per_node", "2", "--master_port", port, "--no_python", PPC,
             "run", manifest, "--input", model_path("mlp", ".input.pt"),
             "--output", out, "--timeout", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        elapsed = time.monotonic() - start
        self.assertNotEqual(proc.returncode, 0, err)
        message = (f"error: rendezvous at 127.0.0.1:{port} failed: its store speaks the "
                   "protocol of PyTorch 2.x (torchrun from a pip-installed torch?), which this "
                   "ppc, built against LibTorch 1.13, cannot; start the ranks with 'ppc "
                   "launch' instead, or use a ppc built against LibTorch 2.x")
        errors = [l for l in err.splitlines() if re.match(r"^(\[\S+\]:?)?\s*error: ", l)]
        # Each rank that reports says so; torchrun sends SIGTERM to the
        # other rank as soon as one fails, which may end it before its
        # own probe has answered (about 1 run in 6 here).
        self.assertIn(len(errors), (1, 2), err)
        self.assertEqual(errors, [message] * len(errors), err)
        # Well below the 30 s --timeout: the start of torchrun and of two
        # ppc processes, and a probe of about a second.
        self.assertLess(elapsed, 20, err)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    main()
