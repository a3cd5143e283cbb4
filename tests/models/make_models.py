#!/usr/bin/python3
"""Generate the TorchScript test models for ppc's tests and benchmarks.

Usage: PYTHON tests/models/make_models.py OUTDIR [--only NAME[,NAME...]]
                                                    [--mlp-layers N[,N...]]

For each model NAME (mlp, resnet18, mobilenet_v3_small, mobilenet_v2, vit, unet,
decoder, two_io, values, inplace) it writes into OUTDIR:
  NAME.pt           torch.jit.script(model.eval()) saved with torch.jit.save
                    (scripted, not traced: module calls and paths survive).
  NAME.input.pt     example input (torch.save): a tensor, or a tuple for
                    multi-input models.  Batch 5: not divisible by 2, 3 or 4.
                    Images are 32x32, mobilenet_v2's 64x64 (its blocks' branches
                    on use_res_connect are what the flops cost model is tested on).
  NAME.expected.pt  the scripted model's output on it under torch.no_grad()
                    (run on a copy: `inplace` writes its inputs).
  NAME.json         {"name", "inputs": count, "split_at": {"2"|"3"|"4": paths}}:
                    for N stages, the N-1 module paths (named_modules() names)
                    where a new stage begins, in execution order.  Cuts are
                    balanced roughly by multiply-accumulates; for unet and
                    two_io they make values cross more than one stage.
  NAME.stamp        hash of this script, model_blocks.py and the Python's path: a model whose
                    files exist with a matching stamp is skipped (reruns exit before importing
                    torch); another Python (configuration) remakes it.
--mlp-layers N writes mlp_N (N Linear(16,16)+ReLU blocks in ModuleList `layers`,
input [5,16], json without split_at) for compile-speed benchmarks; without
--only, only those are written.  Files are written atomically (temporary name,
then os.replace); torch.manual_seed(0) before construction makes it deterministic.
"""
import argparse
import copy
import hashlib
import json
import os
import sys
import time
from typing import Tuple

NAMES = ["mlp", "resnet18", "mobilenet_v3_small", "mobilenet_v2", "vit", "unet", "decoder", "two_io",
         "values", "inplace"]
STAMP_SUFFIXES = (".pt", ".input.pt", ".expected.pt", ".json", ".stamp")


def parse_args():
    ap = argparse.ArgumentParser(description="Generate ppc's TorchScript test models.")
    ap.add_argument("outdir")
    ap.add_argument("--only", help="comma-separated model names (%s)" % ",".join(NAMES))
    ap.add_argument("--mlp-layers", help="comma-separated N: also write mlp_N")
    args = ap.parse_args()
    names = []
    if args.only:
        for n in args.only.split(","):
            if n not in NAMES:
                ap.error("unknown model %r (known: %s)" % (n, ", ".join(NAMES)))
            names.append(n)
    elif not args.mlp_layers:
        names = list(NAMES)
    for n in (args.mlp_layers.split(",") if args.mlp_layers else []):
        if not n.isdigit() or int(n) < 1:
            ap.error("--mlp-layers wants positive integers, got %r" % n)
        names.append("mlp_%d" % int(n))
    return args.outdir, names


def script_hash() -> str:
    """A hash of this script, model_blocks.py (read here, not imported: the
    fast path below runs before torch is imported), the Python running it and
    the OpenBLAS kernel pinned: each configuration's models and references
    come from its own torch, on the kernel its ranks run."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(os.path.realpath(sys.executable).encode())
    h.update(os.environ.get("OPENBLAS_CORETYPE", "").encode())
    for name in (os.path.basename(__file__), "model_blocks.py"):
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def up_to_date(outdir: str, name: str, stamp: str) -> bool:
    base = os.path.join(outdir, name)
    if not all(os.path.exists(base + s) for s in STAMP_SUFFIXES):
        return False
    with open(base + ".stamp") as f:
        return f.read().strip() == stamp


# The expected outputs are compared bit for bit with what ppc's ranks
# compute, so they come from the OpenBLAS kernel the ranks and the tests run:
# tests/cli/common.py pins it (from `ppc --version`: PPC, PPC_BUILD_DIR) when
# OpenBLAS would pick a lower one by itself.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import common  # noqa: E402,F401

# Fast path: when everything is current, exit before paying for `import torch`.
if __name__ == "__main__":
    _outdir, _names = parse_args()
    if all(up_to_date(_outdir, n, script_hash()) for n in _names):
        print("0 written, %d up to date" % len(_names))
        sys.exit(0)

import torch  # noqa: E402  (deliberately after the fast path)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402

from model_blocks import TwoIO, atomic, write_text  # noqa: E402

BATCH = 5


class MLP(nn.Module):
    """`layers` (ModuleList of Linear+ReLU blocks), then an optional `head`."""

    def __init__(self, width: int, depth: int, out: int = 0):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)])
        self.head = nn.Linear(width, out) if out else nn.Identity()

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def conv_relu(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU())


class Down(nn.Module):
    """conv-relu-conv-relu, then 2x2 max-pool; returns (skip feature, pooled)."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Sequential(conv_relu(cin, cout), conv_relu(cout, cout))
        self.pool = nn.MaxPool2d(2)

    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        f = self.conv(x)
        return f, self.pool(f)


class Up(nn.Module):
    """2x transposed-conv upsample, concat with the encoder skip, conv-relu."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, 2, stride=2)
        self.conv = conv_relu(2 * cout, cout)

    def forward(self, x, skip):
        return self.conv(torch.cat([self.up(x), skip], dim=1))


class UNet(nn.Module):
    def __init__(self, cin: int = 3, classes: int = 2):
        super().__init__()
        self.down1, self.down2, self.down3 = Down(cin, 8), Down(8, 16), Down(16, 32)
        self.bottleneck = nn.Sequential(conv_relu(32, 64), conv_relu(64, 64))
        self.up3, self.up2, self.up1 = Up(64, 32), Up(32, 16), Up(16, 8)
        self.final = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        s1, x = self.down1(x)
        s2, x = self.down2(x)
        s3, x = self.down3(x)
        x = self.bottleneck(x)
        x = self.up3(x, s3)
        x = self.up2(x, s2)
        x = self.up1(x, s1)
        return self.final(x)


class CausalSelfAttention(nn.Module):
    """Hand-written multi-head attention (matmul + causal mask + softmax)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        att = torch.matmul(q, k.transpose(-2, -1)) / (hd ** 0.5)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    """Decoder-only LM; the head shares (ties) its weight with the embedding.

    The causal mask is built once in forward and passed to every block, so it
    is a tensor that crosses every stage boundary."""

    def __init__(self, vocab: int = 100, dim: int = 32, layers: int = 4,
                 heads: int = 2, max_len: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(1, max_len, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, ids):
        t = ids.size(1)
        mask = torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)
        x = self.embed(ids) + self.pos[:, :t]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


class Mix(nn.Module):
    """Takes a tuple and a float, so both cross into the stage beginning here."""

    def __init__(self, dim: int):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, g, pair: Tuple[torch.Tensor, torch.Tensor], scale: float):
        a, b = pair
        return self.lin(g) * scale + a - b


class Values(nn.Module):
    """Stage boundaries carrying every non-tensor kind: int, float, bool, int[],
    Tensor[] and Tuple[Tensor], all made in stage 0 (`enc`) and used after the
    cuts (`mid`, `post`, `head`).  Each depends on tensor data, so no stage can
    recompute it from constants (docs/manifest.md): the int and int[] come from
    the microbatch's shape (rows 2, 2, 1 for batch 5 in 3: they differ between
    microbatches), the float and bool from weights, the lists from activations.
    Every row is computed on its own, so microbatching cannot change the output."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 12)
        self.mid = nn.Linear(12, 12)
        self.post = Mix(12)
        self.head = nn.Linear(12, 6)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        n = h.size(0) * 3                               # int
        scale = float(self.enc.weight.abs().mean())     # float
        flip = bool(self.enc.bias.sum() > 0)            # bool
        shape = h.size()                                # int[]
        parts = torch.chunk(h, 3, dim=1)                # Tensor[]
        pair = (h * 0.5, h + 1.0)                       # Tuple[Tensor]
        g = torch.relu(self.mid(h))
        u = self.post(g, pair, scale)
        if flip:
            u = -u
        u = u.flatten().view(shape) + torch.cat(parts, 1)
        return self.head(u).reshape(n // 3, -1)


class WriteArgs(nn.Module):
    """Writes all three arguments in place, then reads them."""

    def __init__(self, dim: int):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, v, x, y):
        v.mul_(2.0)
        x.add_(1.0)
        y.sub_(0.5)
        return self.lin(v) + x * y


class Inplace(nn.Module):
    """A stage (`c`) that writes its inputs in place (manifest `mutated`): model
    input x, also read by stage 0; model input y, read by no other stage; and
    stage 0's v, also read by `b`.  With 4 stages on 2 ranks, rank 0 runs `a`
    and `c`, so `c` writes v while v is still being sent to `b` on rank 1: only
    a copy for `c` keeps what rank 1 receives as produced."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = WriteArgs(8)
        self.d = nn.Linear(8, 8)

    def forward(self, x, y):
        v = self.a(x)
        w = self.b(v)
        u = self.c(v, x, y)
        return self.d(w) + u


def image():
    return torch.randn(BATCH, 3, 32, 32)


ENC = "encoder.layers.encoder_layer_"
MODELS = {
    "mlp": (lambda: MLP(64, 8, 10), lambda: torch.randn(BATCH, 64),
            {2: ["layers.4"], 3: ["layers.3", "layers.6"],
             4: ["layers.2", "layers.4", "layers.6"]}),
    # At 32x32 each residual stage costs ~8-9M MACs; the stem ~2M.
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), image,
                 {2: ["layer3"], 3: ["layer2", "layer4"],
                  4: ["layer2", "layer3", "layer4"]}),
    # MAC shares by features.N at 32x32 (classifier alone is ~28%).
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10), image,
                           {2: ["features.10"], 3: ["features.8", "features.12"],
                            4: ["features.6", "features.10", "features.12"]}),
    # Inverted residuals whose `if self.use_res_connect:` holds the block;
    # the cuts are those of `ppc split --cost flops` at 64x64.
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(num_classes=10),
                     lambda: torch.randn(BATCH, 3, 64, 64),
                     {2: ["features.11"], 3: ["features.6", "features.14"],
                      4: ["features.4", "features.11", "features.15"]}),
    "vit": (lambda: torchvision.models.VisionTransformer(
                image_size=32, patch_size=8, num_layers=4, num_heads=2, hidden_dim=32,
                mlp_dim=64, num_classes=10), image,
            {2: [ENC + "2"], 3: [ENC + "1", ENC + "3"],
             4: [ENC + "1", ENC + "2", ENC + "3"]}),
    # 3 stages: s1, s2 (stage 0) -> up1, up2 (stage 2).
    # 4 stages: s1 (stage 0) -> up1 (stage 3); s2 (stage 0) -> up2 (stage 2).
    "unet": (UNet, image,
             {2: ["up3"], 3: ["bottleneck", "up2"], 4: ["down3", "up3", "up1"]}),
    "decoder": (Decoder, lambda: torch.randint(0, 100, (BATCH, 12), dtype=torch.int64),
                {2: ["blocks.2"], 3: ["blocks.1", "blocks.3"],
                 4: ["blocks.1", "blocks.2", "blocks.3"]}),
    # y enters at stage 1/2/2; aux (stage 0) is a model output; with 4 stages
    # hc goes from stage 1 to stage 3.
    "two_io": (TwoIO, lambda: (torch.randn(BATCH, 16), torch.randn(BATCH, 8)),
               {2: ["b"], 3: ["c", "b"], 4: ["c", "b", "mix"]}),
    # 2 stages: all six kinds cross the one cut; 3 and 4: they skip stages.
    "values": (Values, lambda: torch.randn(BATCH, 8),
               {2: ["post"], 3: ["mid", "head"], 4: ["mid", "post", "head"]}),
    # c writes x, y and v; 2 stages put a and b together.
    "inplace": (Inplace, lambda: (torch.randn(BATCH, 8), torch.randn(BATCH, 8)),
                {2: ["c"], 3: ["b", "c"], 4: ["b", "c", "d"]}),
}

assert list(MODELS) == NAMES, "keep NAMES (used before torch is imported) in sync"


def mlp_n(n: int):
    return (lambda: MLP(16, n), lambda: torch.randn(BATCH, 16), None)


def check_splits(name: str, model: nn.Module, inp, splits) -> None:
    """Each cut must name a module whose forward runs, in execution order."""
    mods = dict(model.named_modules())
    order = []
    hooks = [m.register_forward_pre_hook(lambda m, i, p=p: order.append(p))
             for p, m in mods.items()]
    inp = copy.deepcopy(inp)  # a model may write its inputs
    with torch.no_grad():
        model(*inp) if isinstance(inp, tuple) else model(inp)
    for h in hooks:
        h.remove()
    first = {}
    for i, p in enumerate(order):
        first.setdefault(p, i)
    for n, paths in splits.items():
        assert len(paths) == n - 1, "%s: %d stages need %d cuts" % (name, n, n - 1)
        for p in paths:
            assert p in first, "%s: split path %r is not an executed submodule" % (name, p)
        idx = [first[p] for p in paths]
        assert idx == sorted(idx) and len(set(idx)) == len(idx), \
            "%s: split paths %r are not in execution order" % (name, paths)


def param_bytes(model: nn.Module) -> int:
    """Bytes of unique parameter and buffer tensors (tied weights count once)."""
    uniq = {t.data_ptr(): t for t in list(model.parameters()) + list(model.buffers())}
    return sum(t.numel() * t.element_size() for t in uniq.values())


def make(outdir: str, name: str, spec, stamp: str) -> bool:
    """Write one model's files; return False if they were up to date."""
    build, make_input, splits = spec
    base = os.path.join(outdir, name)
    if up_to_date(outdir, name, stamp):
        return False
    if os.path.exists(base + ".stamp"):
        os.remove(base + ".stamp")  # the set is incomplete until rewritten

    torch.manual_seed(0)
    model = build().eval()
    torch.manual_seed(1)
    inp = make_input()
    if splits:
        check_splits(name, model, inp, splits)
    scripted = torch.jit.script(model)
    run_on = copy.deepcopy(inp)  # `inp` is saved below as it was made
    with torch.no_grad():
        out = scripted(*run_on) if isinstance(run_on, tuple) else scripted(run_on)

    atomic(base + ".pt", lambda p: torch.jit.save(scripted, p))
    atomic(base + ".input.pt", lambda p: torch.save(inp, p))
    atomic(base + ".expected.pt", lambda p: torch.save(out, p))
    meta = {"name": name, "inputs": len(inp) if isinstance(inp, tuple) else 1}
    if splits:
        meta["split_at"] = {str(n): paths for n, paths in sorted(splits.items())}

    write_text(base + ".json", json.dumps(meta, indent=2) + "\n")

    if name == "decoder":  # tied weights must survive save/load as one tensor
        sd = torch.jit.load(base + ".pt").state_dict()
        if sd["embed.weight"].data_ptr() != sd["head.weight"].data_ptr():
            print("warning: decoder: embed.weight and head.weight are no longer "
                  "shared after torch.jit.load", file=sys.stderr)

    write_text(base + ".stamp", stamp + "\n")  # last: marks the set complete
    print("wrote %-20s %10d param bytes" % (name, param_bytes(model)))
    return True


def main() -> int:
    outdir, names = parse_args()
    todo = {n: MODELS[n] if n in MODELS else mlp_n(int(n[4:])) for n in names}
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    stamp = script_hash()
    t0 = time.time()
    written = [n for n, spec in todo.items() if make(outdir, n, spec, stamp)]
    print("%d written, %d up to date, %.1fs" % (
        len(written), len(todo) - len(written), time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
