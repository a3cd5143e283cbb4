#!/usr/bin/env python3
"""Generate TorchScript test models that only a PyTorch 2.x can script.

Usage: PYTHON tests/models/make_wheel_models.py OUTDIR

PYTHON: the PyTorch 2.x configuration's (`scripts/python.sh build` prints it),
not Debian's /usr/bin/python3 (torch 1.13): these models use operators
LibTorch 1.13 lacks. tests/cli/test_wheel.py runs it; a ppc built against
LibTorch 2.x must split, verify and run them, and one built against 1.13
(the system LibTorch) must refuse them with one clear error line.

Models (same files as tests/models/make_models.py writes, so tests/cli/common.py
reads them alike):
  sdpa      a small causal transformer whose attention is
            torch.nn.functional.scaled_dot_product_attention
            (aten::scaled_dot_product_attention, PyTorch >= 2.0).
  rms_norm  an MLP whose blocks normalise with torch.nn.RMSNorm
            (aten::rms_norm, PyTorch >= 2.4).

For each NAME it writes NAME.pt (torch.jit.script, saved with torch.jit.save),
NAME.input.pt, NAME.expected.pt (the scripted model's output on the input under
torch.no_grad(), computed by this Python's torch), NAME.json ({"name", "inputs",
"split_at": {"2"|"3": paths}}) and NAME.stamp (hash of this script, model_blocks.py
and the torch version): a model whose files exist with a matching stamp is skipped. Files are
written atomically (temporary name, then os.replace), so concurrent runs are
safe.
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import model_blocks
from model_blocks import Attention, atomic, write_text

BATCH = 5  # not divisible by 2, 3 or 4: microbatches of unequal sizes
SUFFIXES = (".pt", ".input.pt", ".expected.pt", ".json", ".stamp")


class Sdpa(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 4):
        super().__init__()
        self.embed = nn.Linear(16, dim)
        self.blocks = nn.ModuleList([Attention(dim, heads, 2 * dim) for _ in range(layers)])
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class RmsBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + F.silu(self.fc(self.norm(x)))


class RmsMlp(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 4):
        super().__init__()
        self.inp = nn.Linear(16, dim)
        self.layers = nn.ModuleList([RmsBlock(dim) for _ in range(depth)])
        self.out = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


MODELS = {
    "sdpa": (Sdpa, lambda: torch.randn(BATCH, 6, 16),
             {2: ["blocks.2"], 3: ["blocks.1", "blocks.3"]}),
    "rms_norm": (RmsMlp, lambda: torch.randn(BATCH, 16),
                 {2: ["layers.2"], 3: ["layers.1", "layers.3"]}),
}


def stamp() -> str:
    return model_blocks.stamp(__file__)


def make(outdir: str, name: str, spec, tag: str) -> bool:
    build, make_input, splits = spec
    base = os.path.join(outdir, name)
    if all(os.path.exists(base + s) for s in SUFFIXES):
        with open(base + ".stamp") as f:
            if f.read().strip() == tag:
                return False
    torch.manual_seed(0)
    model = build().eval()
    torch.manual_seed(1)
    inp = make_input()
    scripted = torch.jit.script(model)
    with torch.no_grad():
        out = scripted(inp)
    atomic(base + ".pt", lambda p: torch.jit.save(scripted, p))
    atomic(base + ".input.pt", lambda p: torch.save(inp, p))
    atomic(base + ".expected.pt", lambda p: torch.save(out, p))
    meta = {"name": name, "inputs": 1,
            "split_at": {str(n): paths for n, paths in sorted(splits.items())}}
    write_text(base + ".json", json.dumps(meta, indent=2) + "\n")
    write_text(base + ".stamp", tag + "\n")  # last: marks the set complete
    print("wrote", name)
    return True


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    tag = stamp()
    written = [n for n, spec in MODELS.items() if make(outdir, n, spec, tag)]
    print("%d written, %d up to date (torch %s)" % (
        len(written), len(MODELS) - len(written), torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
