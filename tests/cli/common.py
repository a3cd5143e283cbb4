"""Shared helpers for the Python-driven CLI tests (run by ctest)."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("PPC_BUILD_DIR", os.path.join(ROOT, "build"))
PPC = os.environ.get("PPC", os.path.join(BUILD, "bin", "ppc"))
MODELS = os.environ.get("PPC_MODELS_DIR", os.path.join(BUILD, "models"))

# The real models of tests/models/make_models.py.
MODEL_NAMES = ["mlp", "resnet18", "mobilenet_v3_small", "vit", "unet", "decoder", "two_io"]


def ppc(*args, check=True, timeout=300, env=None):
    """Runs ppc; returns the CompletedProcess (text mode)."""
    proc = subprocess.run([PPC, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"ppc {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def model_path(name, suffix=".pt"):
    return os.path.join(MODELS, name + suffix)


def model_meta(name):
    with open(model_path(name, ".json")) as f:
        return json.load(f)


def load_manifest(outdir):
    with open(os.path.join(outdir, "manifest.json")) as f:
        return json.load(f)


def tmpdir(test):
    d = tempfile.TemporaryDirectory(prefix="ppc-test-")
    test.addCleanup(d.cleanup)
    return d.name


def as_tuple(v):
    """A model output as a tuple (a single tensor becomes a 1-tuple)."""
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nproc, *args, timeout=300, env=None):
    """Runs `ppc launch --nproc-per-node NPROC --master-port 0 -- ppc ARGS...`."""
    cmd = [PPC, "launch", "--nproc-per-node", str(nproc), "--master-port", "0", "--",
           PPC, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def rank_env(rank, world, port, **extra):
    """The torchrun-style environment of one rank on this host."""
    return dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                **extra)


def start_ranks(world, args, port=None, env=None):
    """Starts `ppc run ARGS` once per rank, without a launcher; returns the Popens.
    `env`, if given, maps a rank to extra environment variables."""
    port = port or free_port()
    procs = []
    for rank in range(world):
        extra = (env or {}).get(rank, {})
        procs.append(subprocess.Popen([PPC, "run", *map(str, args)],
                                      env=rank_env(rank, world, port, **extra),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs, timeout=60):
    """Waits for each process (killing it after `timeout`); returns [(rc, out, err)]."""
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
        out.append((p.returncode, o, e))
    return out


# `ppc run --stats` lines: rank, meta source, meta messages, messages, first output ms,
# total ms, cache written.
STATS = re.compile(r"stats: rank=(\d+) meta=(\w+) meta_messages_sent=(\d+) "
                   r"messages_sent=(\d+) first_output_ms=([\d.]+) total_ms=([\d.]+) "
                   r"cache_written=(\d)")
