"""Shared helpers for the Python-driven CLI tests (run by ctest)."""
import json
import os
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
