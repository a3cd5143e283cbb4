"""What the test-model generators share: model pieces and file writing.

make_models.py (under each configuration's Python: Debian's torch 1.13 or
PyTorch 2.x), make_wheel_models.py and make_pt2_models.py (torch 2.x only)
import it; it needs only torch (not torchvision, which a PyTorch 2.x Python
of your own may lack), and its modules both script and export. A generator's
stamp covers this file too (stamp()), so a change here regenerates the models
built from it.
"""
import hashlib
import os
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoIO(nn.Module):
    """Two inputs, two outputs.  y is consumed only late (by `b`), and `aux`
    comes from the first branch, so with the chosen cuts a model input enters
    a later stage and an early stage's value is a model output."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.a_head = nn.Linear(32, 4)
        self.c = nn.Sequential(nn.Linear(32, 32), nn.ReLU())
        self.b = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.mix = nn.Bilinear(32, 32, 6)  # a stock two-input module

    def forward(self, x, y) -> Tuple[torch.Tensor, torch.Tensor]:
        ha = self.a(x)
        aux = self.a_head(ha)
        hc = self.c(ha)
        hb = self.b(y)
        return self.mix(hc, hb), aux


class Attention(nn.Module):
    """A pre-norm transformer block: causal self-attention with
    scaled_dot_product_attention (PyTorch >= 2.0), then a GELU MLP of
    `hidden` units, each added to its input."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def stamp(script: str) -> str:
    """What a generator writes as NAME.stamp: a hash of `script`, this file
    and the torch version."""
    h = hashlib.sha256()
    for path in (script, __file__):
        with open(os.path.abspath(path), "rb") as f:
            h.update(f.read())
    h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


def atomic(path: str, write) -> None:
    """write(tmp), then os.replace(tmp, path). The temporary file has the
    same name in a private directory beside PATH: torch.export.save names the
    archive's top folder after the file (NAME/models/model.json) and warns
    about a name not ending in .pt2."""
    head, tail = os.path.split(path)
    tmpdir = os.path.join(head, ".tmp.%d" % os.getpid())
    tmp = os.path.join(tmpdir, tail)
    os.makedirs(tmpdir, exist_ok=True)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        try:
            os.rmdir(tmpdir)
        except OSError:
            pass


def write_text(path: str, text: str) -> None:
    def write(p):
        with open(p, "w") as f:
            f.write(text)
    atomic(path, write)
