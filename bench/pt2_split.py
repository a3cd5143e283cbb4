#!/usr/bin/env python3
"""ppc split of a torch.export program (.pt2) against its TorchScript twin (issue #16).

Usage (with the PyTorch 2.x build's Python, whose torch exports; `scripts/python.sh build`
prints it; ppc built against that torch):
  PYTHON bench/pt2_split.py [--ppc build/bin/ppc] [--reps 5]
      [--stages 4] [--layers 8] [--dim 256] [--work DIR]

Builds the decoder-only transformer of tests/models/make_pt2_models.py (tied embeddings,
scaled_dot_product_attention) at a size where splitting takes measurable time, saves it twice
from the same weights: torch.export.export + torch.export.save (a dynamic batch dimension) and
torch.jit.trace + torch.jit.save. Then splits each with `ppc split --stages N` REPS times,
alternating the two so that machine noise hits both alike, and reports per format the median
wall time and the peak resident memory of the ppc process (ru_maxrss from wait4), and the
.pt2 / TorchScript ratios measured in this run. One thread (OMP/OpenBLAS/MKL_NUM_THREADS=1).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import make_pt2_models  # noqa: E402


def split_once(ppc, model, out, stages, env):
    """(wall seconds, peak RSS bytes) of one `ppc split`."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.Popen([ppc, "split", model, "--stages", str(stages), "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("ppc split %s failed: %s" % (model, proc.stderr.read().decode()))
    proc.stderr.close()
    return wall, usage.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ppc", default=os.path.join(ROOT, "build", "bin", "ppc"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="ppc-pt2-bench-")
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    model = make_pt2_models.Gpt(vocab=4096, seq=64, dim=a.dim, heads=8, layers=a.layers).eval()
    tokens = torch.randint(0, 4096, (4, 64))
    files = {"pt2": os.path.join(work, "gpt.pt2"), "torchscript": os.path.join(work, "gpt.pt")}
    ep = torch.export.export(model, (tokens,),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=1)},))
    torch.export.save(ep, files["pt2"])
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, (tokens,)), files["torchscript"])
    params = sum(p.numel() for p in model.parameters())
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    samples = {k: [] for k in files}
    for _ in range(a.reps):
        for kind, path in files.items():
            samples[kind].append(split_once(a.ppc, path, os.path.join(work, "out-" + kind),
                                            a.stages, env))
    med = {k: (statistics.median(s[0] for s in v), max(s[1] for s in v))
           for k, v in samples.items()}
    print("transformer: %d layers, dim %d, %.1fM parameters; .pt2 %.1f MB, TorchScript %.1f MB;"
          " ppc split --stages %d, %d runs each" % (
              a.layers, a.dim, params / 1e6, os.path.getsize(files["pt2"]) / 1e6,
              os.path.getsize(files["torchscript"]) / 1e6, a.stages, a.reps))
    print("| format | split wall (median) | peak RSS |")
    print("|---|---|---|")
    for kind in files:
        print("| %s | %.3f s | %.0f MiB |" % (kind, med[kind][0], med[kind][1] / 2**20))
    print("ratio .pt2 / TorchScript: time %.2f, peak memory %.2f" % (
        med["pt2"][0] / med["torchscript"][0], med["pt2"][1] / med["torchscript"][1]))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
