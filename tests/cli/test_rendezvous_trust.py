"""Tests that the rendezvous is the job's own (docs/security.md, issue 31 §1, §5):

- a single-host job's store listens on loopback only (LibTorch 2.x build);
- a store client without PPC_JOB_SECRET that rewrites every key it can name,
  and forges a ring descriptor pointing at a file another process holds,
  makes the job fail with one line naming a key, and the file is untouched;
- a rank's records copied from an earlier job with the same secret and job
  token fail the check (the MACs bind every rank's fresh nonce);
- a rank whose own start-up record is deleted says so, not that it is lost;
- what such a client reads holds no trace of the secret;
- ranks without a secret warn once, and `--link shm` then is refused;
- a rank stopped (SIGSTOP) during the rendezvous is named by the others.

Run in build-system/ (or build/): PPC=$PWD/bin/ppc PPC_MODELS_DIR=$PWD/models
/usr/bin/python3 ../tests/cli/test_rendezvous_trust.py -v (about 30 s).
"""

import datetime
import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, finish, free_port, libtorch_major, main, model_path,  # noqa: E402
                    rank_env, split_at, tmpdir)

TIMEOUT = 5

FORGED = re.compile(r"error: rendezvous key '(ppc/[^']+)' at 127\.0\.0\.1:(\d+) was not "
                    r"written by this job \(it fails the check against PPC_JOB_SECRET and "
                    r"this job's rendezvous nonces\): it was replayed from another job, "
                    r"written by a rank given another secret, or another process is writing "
                    r"into this job's store")


def stopped(pid):
    """Whether process `pid` is stopped (state T)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


def bytes_and_mtime(path):
    """The bytes and modification time of `path`."""
    with open(path, "rb") as f:
        return f.read(), os.stat(path).st_mtime_ns


def has_key(store, key):
    """Whether `store` holds `key` (1.13's Python store has no check())."""
    try:
        store.wait([key], datetime.timedelta(milliseconds=200))
        return True
    except RuntimeError:
        return False


def listening(port):
    """The local addresses listening on TCP `port` (from /proc/net/tcp{,6})."""
    found = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            addr, hexport = fields[1].rsplit(":", 1)
            if int(hexport, 16) == port and fields[3] == "0A":
                found.append(addr)
    return found


class RendezvousTrustTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.communicate()

    def split_mlp(self, stages=3):
        return split_at("mlp", stages, os.path.join(self.tmp, f"mlp{stages}"))

    def rank_run_command(self, manifest, *extra):
        return [PPC, "run", manifest, "--input", model_path("mlp", ".input.pt"),
                "--output", os.path.join(self.tmp, "out.pt"), "--timeout", str(TIMEOUT),
                *extra]

    def start_process(self, cmd, env):
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.procs.append(p)
        return p

    def test_single_host_store_listens_on_loopback_only(self):
        if libtorch_major() < 2:
            self.skipTest("LibTorch 1.13's TCPStoreOptions cannot take a bound socket "
                          "(no masterListenFd): its store listens on every interface, "
                          "protected by the job secret's MACs only (docs/security.md)")
        # Rank 0 serving the store, waiting for rank 1.
        port = free_port()
        p = self.start_process(self.rank_run_command(self.split_mlp(2)), rank_env(0, 2, port))
        deadline = time.monotonic() + TIMEOUT
        while not listening(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(listening(port), ["0100007F"])
        p.kill()
        p.communicate()
        # The launcher's store (--standalone).
        launcher = self.start_process([PPC, "launch", "--standalone", "--nproc-per-node", "1", "--",
                                       "sleep", "3"], dict(os.environ))
        line = launcher.stderr.readline()
        m = re.fullmatch(r"note: using MASTER_PORT=(\d+)\n", line)
        self.assertIsNotNone(m, line)
        self.assertEqual(listening(int(m.group(1))), ["0100007F"])
        launcher.kill()
        launcher.communicate()

    def test_a_client_without_the_secret_cannot_make_a_rank_act(self):
        import torch.distributed as dist
        secret = os.environ["PPC_JOB_SECRET"]
        port = free_port()
        store = dist.TCPStore("127.0.0.1", port, 1, True, datetime.timedelta(seconds=30),
                              wait_for_workers=False)
        manifest = self.split_mlp(3)
        crafted = os.path.join(self.tmp, "crafted.bin")
        with open(crafted, "wb") as f:
            f.write(b"PPCRING!" + bytes(range(256)) * 64)
        before = bytes_and_mtime(crafted)
        holder = subprocess.Popen(["sh", "-c", f"exec sleep 60 3<>'{crafted}'"])
        self.procs.append(holder)
        ranks = []
        for rank in range(3):
            extra = {"TORCHELASTIC_USE_AGENT_STORE": "True"}
            if rank == 2:
                extra["PPC_TEST_RENDEZVOUS_STOP"] = "group"
            ranks.append(self.start_process(self.rank_run_command(manifest, "--link", "shm"),
                                            rank_env(rank, 3, port, **extra)))
        # Ranks 0 and 1 connect their process group; rank 2 stopped before.
        deadline = time.monotonic() + TIMEOUT
        while not stopped(ranks[2].pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(stopped(ranks[2].pid))
        if hasattr(store, "list_keys"):
            keys = store.list_keys()
        else:
            keys = ["ppc/job", "ppc/agree/read", "ppc/group//0/0", "ppc/group//0/1"]
            keys += [f"ppc/{kind}/{r}" for kind in ("rank", "progress", "agree")
                     for r in range(3)]
            keys = [k for k in keys if has_key(store, k)]
        read = {k: store.get(k) for k in keys}
        # Nothing read gives the secret away.
        for key, value in read.items():
            self.assertNotIn(secret, key)
            self.assertNotIn(secret.encode(), value)
        # Rewrite each value (keeping counters counting), and forge what
        # ranks 0 and 1 will read of rank 2.
        for key, value in read.items():
            if re.fullmatch(rb"-?\d+", value):
                store.add(key, 1)
            else:
                store.set(key, value[:-1] + bytes([value[-1] ^ 1]) if value else b"x")
        nonce = b"12345"
        forged = {"ppc/group//ppc_shm/peer/2": f"1\nh\n{holder.pid}\n0\nshm".encode()}
        for to in (0, 1):
            forged[f"ppc/group//ppc_shm/ring/2/{to}/0"] = f"{holder.pid} 3 ".encode() + nonce
        for key in keys:
            m = re.fullmatch(r"(ppc/group/.*\D)0", key)
            if m:
                forged[m.group(1) + "2"] = read[key]
        forged["ppc/progress/2"] = b"connected"
        for key, value in forged.items():
            store.set(key, value)
        results = finish(ranks[:2], timeout=TIMEOUT * 4)
        os.kill(ranks[2].pid, signal.SIGKILL)
        ranks[2].communicate()
        for rc, _, err in results:
            self.assertNotEqual(rc, 0, err)
            errors = [line for line in err.splitlines() if line.startswith("error: ")]
            self.assertEqual(len(errors), 1, err)
            m = FORGED.fullmatch(errors[0])
            self.assertIsNotNone(m, err)
            self.assertEqual(m.group(2), str(port))
        self.assertEqual(bytes_and_mtime(crafted), before)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out.pt")))

    def test_a_rank_replayed_from_an_earlier_job_with_the_same_secret_is_refused(self):
        # Issue #45, class 1: ranks started by hand share one secret and the
        # job token 'default', job after job. A store client copies job A's
        # rank 1 (its nonce, agreement and progress records) into job B's
        # store and counts it, so that B's rank 0 meets a rank that never ran.
        import torch.distributed as dist
        manifest = self.split_mlp(2)
        agent = {"TORCHELASTIC_USE_AGENT_STORE": "True"}

        def store():
            port = free_port()
            return port, dist.TCPStore("127.0.0.1", port, 1, True,
                                       datetime.timedelta(seconds=30), wait_for_workers=False)

        def args(job, micro):
            return [PPC, "run", manifest, "--input", model_path("mlp", ".input.pt"), "--output",
                    os.path.join(self.tmp, job + ".pt"), "--timeout", str(TIMEOUT),
                    "--microbatches", str(micro)]

        port_a, store_a = store()
        job_a = [self.start_process(args("a", 2), rank_env(r, 2, port_a,
                                                           **agent)) for r in range(2)]
        for rc, _, err in finish(job_a, timeout=60):
            self.assertEqual(rc, 0, err)
        copied = {k: store_a.get(k) for k in ("ppc/nonce/1", "ppc/agree/1", "ppc/progress/1")}
        port_b, store_b = store()
        for key, value in copied.items():
            store_b.set(key, value)
        store_b.add("ppc/rank/1", 1)
        rank0 = self.start_process(args("b", 4), rank_env(0, 2, port_b, **agent))
        [(rc, _, err)] = finish([rank0], timeout=TIMEOUT * 4)
        self.assertEqual(rc, 2, err)
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        self.assertEqual(len(errors), 1, err)
        m = FORGED.fullmatch(errors[0])
        self.assertIsNotNone(m, err)
        self.assertEqual((m.group(1), m.group(2)), ("ppc/agree/1", str(port_b)))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "b.pt")))

    def test_a_rank_whose_own_record_is_deleted_does_not_blame_itself(self):
        # Issue #45, class 7: a client stands in for rank 1 (its nonce and its
        # count) and deletes rank 0's start-up record once it is there.
        import torch.distributed as dist
        port = free_port()
        store = dist.TCPStore("127.0.0.1", port, 1, True, datetime.timedelta(seconds=30),
                              wait_for_workers=False)
        store.set("ppc/nonce/1", b"0" * 64)
        store.add("ppc/rank/1", 1)
        rank0 = self.start_process(self.rank_run_command(self.split_mlp(2)),
                                   rank_env(0, 2, port, TORCHELASTIC_USE_AGENT_STORE="True"))
        deadline = time.monotonic() + TIMEOUT * 4
        while not has_key(store, "ppc/agree/0") and time.monotonic() < deadline:
            pass
        store.delete_key("ppc/agree/0")
        [(rc, _, err)] = finish([rank0], timeout=TIMEOUT * 4)
        self.assertEqual((rc, err), (2, "error: this rank's start-up record (rendezvous key "
                                        "'ppc/agree/0') was deleted from the store: another "
                                        "process is writing into this job's store\n"))

    def test_without_a_secret_ranks_warn_and_refuse_shm(self):
        port = free_port()
        manifest = self.split_mlp(2)
        env = [rank_env(r, 2, port) for r in range(2)]
        for e in env:
            e.pop("PPC_JOB_SECRET", None)
        warning = (f"warning: PPC_JOB_SECRET is not set: any process that reaches the "
                   f"rendezvous at 127.0.0.1:{port} can rewrite what the ranks exchange there, "
                   "and the shared-memory link is off; start the ranks with 'ppc launch', or "
                   "set the same PPC_JOB_SECRET on every rank (docs/security.md)")
        procs = [self.start_process(self.rank_run_command(manifest), e) for e in env]
        for rc, _, err in finish(procs, timeout=60):
            self.assertEqual(rc, 0, err)
            self.assertEqual([l for l in err.splitlines() if l.startswith("warning: ")],
                             [warning], err)
        refusal = ("error: --link shm needs PPC_JOB_SECRET: the shared-memory link trusts "
                   "only rendezvous values this job wrote; start the ranks with 'ppc launch', "
                   "or set the same PPC_JOB_SECRET on every rank (docs/security.md)\n")
        procs = [self.start_process(self.rank_run_command(manifest, "--link", "shm"),
                                    e) for e in env]
        for rc, _, err in finish(procs, timeout=60):
            self.assertEqual((rc, err), (2, refusal))

    def test_a_rank_stopped_during_the_rendezvous_is_named(self):
        port = free_port()
        manifest = self.split_mlp(3)
        procs = []
        for rank in range(3):
            extra = {"PPC_TEST_RENDEZVOUS_STOP": "group"} if rank == 2 else {}
            procs.append(self.start_process(self.rank_run_command(manifest),
                                            rank_env(rank, 3, port, **extra)))
        results = finish(procs[:2], timeout=TIMEOUT * 4)
        self.assertTrue(stopped(procs[2].pid))
        os.kill(procs[2].pid, signal.SIGKILL)
        procs[2].communicate()
        named = ("error: lost rank 2 (it never got past comparing the ranks' options in the "
                 f"rendezvous at 127.0.0.1:{port}; connecting the process group timed out "
                 f"after {TIMEOUT} s)")
        for rc, _, err in results:
            self.assertNotEqual(rc, 0, err)
            self.assertTrue(err.startswith(named), err)


if __name__ == "__main__":
    main()
