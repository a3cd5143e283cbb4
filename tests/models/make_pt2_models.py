#!/usr/bin/env python3
"""Generate torch.export (`.pt2`) test models.

Usage: PYTHON tests/models/make_pt2_models.py OUTDIR

PYTHON: the PyTorch 2.x configuration's (`scripts/python.sh build` prints it):
torch.export does not exist in Debian's torch 1.13. tests/cli/test_pt2.py runs
it and caches the files in PPC_BUILD_DIR/pt2-models.

Each model is exported with torch.export.export(model, inputs,
dynamic_shapes=...) with one dynamic dimension, torch.export.Dim("batch",
min=1), on dim 0 of every input, and saved with torch.export.save. Every
model is exported in eval() mode. None of them holds dropout, and the two
trained by the tests (pt2_gpt, pt2_mlp) hold no BatchNorm either, so their
exported graphs do not depend on the mode (checked here: exporting them in
train() mode gives the same graph) and one file serves both `ppc run` and
`ppc train`.

Models (BATCH = 10 rows, so 3 and 4 microbatches cut it unevenly):
  pt2_cnn     [B,3,16,16] -> [B,10]: a stem conv/BatchNorm/ReLU, 4 residual
              blocks (conv-bn-relu-conv-bn + skip; blocks.2 downsamples with
              a 1x1 conv/BatchNorm on the skip), global average pool, fc.
  pt2_gpt     int64 tokens [B,8] (vocab 64) -> logits [B,8,64]: token
              embedding tied to the LM head (head.weight is emb.weight: one
              Parameter; both initialised N(0, 0.1)), a learned positional
              embedding (torch.arange(8) -> pos), 4 pre-norm blocks
              (LayerNorm, causal F.scaled_dot_product_attention, GELU MLP),
              a final LayerNorm.
  pt2_unet    [B,3,16,16] -> [B,2,16,16]: 3 encoder levels, a bottleneck and
              3 decoder levels, each decoder level concatenating the encoder
              output of its resolution (skips that cross stages).
  pt2_two_io  (x [B,16], y [B,8]) -> (out [B,6], aux [B,4]): model_blocks.py's
              TwoIO, as make_models.py's two_io (y is read only late; aux
              comes from the first branch).
  pt2_mlp     [B,16] -> [B,10]: Linear/ReLU x4, then Linear (for training,
              with cross_entropy).
  pt2_state   x [2,1,16] and the keyword input pos (int64 [1]) -> [2,1,16]:
              a decoder's shape of state. A counter buffer `steps` (int64 [])
              is bumped with add_ and scales x; then 3 blocks, each owning a
              buffer `cache` [2,8,16] into which it index_copy_s proj(x) at
              pos, then reading it around its `query` Linear (attention of
              query(x + cache mean) over the cache). Static shapes (the caches fix the
              batch), in-place writes kept as export writes them.
  pt2_state_functional  pt2_state after run_decompositions(): functional,
              the writes declared as buffer mutations.

For each NAME it writes into OUTDIR:
  NAME.pt2        torch.export.save of the exported program
  NAME.input.pt   the example input (torch.save): a tensor, or a tuple of
                  tensors for a model with several inputs (as make_models.py)
  NAME.output.pt  the exported program's output on it, ep.module()(*inputs)
                  under torch.no_grad(): a tensor, or a tuple for pt2_two_io
  NAME.json       {"name", "inputs": count, "outputs": count, "batch",
                   "loss": the loss the tests train it with (or null),
                   "split_at": {"2"|"3"|"4": module paths}}
  NAME.stamp      hash of this script, model_blocks.py and the torch
                  version, written last: a model whose files exist with a
                  matching stamp is skipped.
Files are written atomically (temporary name, then os.replace), so
concurrent runs are safe. Deterministic: fixed seeds, one thread.
With --print, prints each program (print(ep)) after writing or reusing it.
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import model_blocks
from model_blocks import Attention, TwoIO, atomic, write_text

BATCH = 10  # 3 and 4 microbatches cut it unevenly (4,3,3 and 3,3,2,2)
SUFFIXES = (".pt2", ".input.pt", ".output.pt", ".json", ".stamp")


# --- models ------------------------------------------------------------------

class ResBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + skip)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.blocks = nn.Sequential(ResBlock(16, 16), ResBlock(16, 16), ResBlock(16, 32, 2),
                                    ResBlock(32, 32))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def randomize_batchnorm(model):
    """Non-trivial running statistics and affine parameters, so eval-mode
    BatchNorm is not the identity."""
    g = torch.Generator().manual_seed(2)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


class Gpt(nn.Module):
    def __init__(self, vocab=64, seq=8, dim=32, heads=4, layers=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList([Attention(dim, heads, 4 * dim) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied: one Parameter
        # Small embeddings (GPT-2's 0.02, here 0.1): with N(0, 1) the logits
        # start at std 5.6 and SGD at lr 0.05 overshoots.
        nn.init.normal_(self.emb.weight, std=0.1)
        nn.init.normal_(self.pos.weight, std=0.1)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.emb(tokens) + self.pos(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, 1, 1), nn.ReLU())


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1, self.enc2, self.enc3 = conv_block(3, 8), conv_block(8, 16), conv_block(16, 32)
        self.bottleneck = conv_block(32, 32)
        self.up3, self.dec3 = nn.ConvTranspose2d(32, 32, 2, 2), conv_block(64, 32)
        self.up2, self.dec2 = nn.ConvTranspose2d(32, 16, 2, 2), conv_block(32, 16)
        self.up1, self.dec1 = nn.ConvTranspose2d(16, 8, 2, 2), conv_block(16, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)                      # 16x16
        e2 = self.enc2(F.max_pool2d(e1, 2))    # 8x8
        e3 = self.enc3(F.max_pool2d(e2, 2))    # 4x4
        b = self.bottleneck(F.max_pool2d(e3, 2))  # 2x2
        d3 = self.dec3(torch.cat([self.up3(b), e3], 1))
        d2 = self.dec2(torch.cat([self.up2(d3), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.out(d1)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                    nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.out = nn.Linear(32, 10)

    def forward(self, x):
        return self.out(self.layers(x))


STATE_BATCH, STATE_SLOTS, STATE_DIM = 2, 8, 16


class StateBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(STATE_DIM, STATE_DIM)
        self.query = nn.Linear(STATE_DIM, STATE_DIM)
        self.register_buffer("cache", torch.zeros(STATE_BATCH, STATE_SLOTS, STATE_DIM))

    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, self.proj(x))
        # The query reads the written cache, so `query` runs between the
        # cache's reads and no pass can move it out of them.
        q = self.query(x + self.cache.mean(1, keepdim=True))
        weights = torch.softmax(q @ self.cache.transpose(1, 2), dim=-1)
        return x + weights @ self.cache


class Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.blocks = nn.ModuleList(StateBlock() for _ in range(3))

    def forward(self, x, *, pos):
        self.steps.add_(1)
        x = x * self.steps.to(x.dtype)
        for block in self.blocks:
            x = block(x, pos)
        return x


def make_stateful(outdir: str, tag: str) -> list:
    """Writes pt2_state and pt2_state_functional (not in MODELS: a keyword
    input, static shapes, state); returns the names written."""
    written = []
    for name in ("pt2_state", "pt2_state_functional"):
        base = os.path.join(outdir, name)
        if all(os.path.exists(base + s) for s in SUFFIXES):
            with open(base + ".stamp") as f:
                if f.read().strip() == tag:
                    continue
        torch.manual_seed(0)
        model = Stateful().eval()
        torch.manual_seed(1)
        x = torch.randn(STATE_BATCH, 1, STATE_DIM)
        pos = torch.tensor([3])
        ep = torch.export.export(model, (x,), kwargs={"pos": pos})
        if name == "pt2_state_functional":
            ep = ep.run_decompositions()
        with torch.no_grad():
            out = ep.module()(x, pos=pos)
        atomic(base + ".pt2", lambda p: torch.export.save(ep, p))
        atomic(base + ".input.pt", lambda p: torch.save((x, pos), p))
        atomic(base + ".output.pt", lambda p: torch.save(out, p))
        meta = {"name": name, "inputs": 2, "outputs": 1, "batch": STATE_BATCH, "loss": None,
                "split_at": {"2": ["blocks.1"], "3": ["blocks.1", "blocks.2"]}}
        write_text(base + ".json", json.dumps(meta, indent=2) + "\n")
        write_text(base + ".stamp", tag + "\n")
        print("wrote", name)
        written.append(name)
    return written


def image():
    return torch.randn(BATCH, 3, 16, 16)


# name: (build, make_input -> tuple of inputs, loss, split_at, mode_free)
# mode_free: the graph must not depend on train()/eval() (the trained models).
MODELS = {
    "pt2_cnn": (lambda: randomize_batchnorm(Cnn()), lambda: (image(),), None,
                {2: ["blocks.2"], 3: ["blocks.1", "blocks.3"],
                 4: ["blocks.1", "blocks.2", "blocks.3"]}, False),
    "pt2_gpt": (Gpt, lambda: (torch.randint(0, 64, (BATCH, 8), dtype=torch.int64),), "mse",
                {2: ["blocks.2"], 3: ["blocks.1", "blocks.3"],
                 4: ["blocks.1", "blocks.2", "blocks.3"]}, True),
    # 3 stages: enc1, enc2 (stage 0) -> dec2, dec1 (stage 2); 4 stages: enc1
    # (stage 0) -> dec1 (stage 3), enc2 (stage 0) -> dec2 (stage 2).
    "pt2_unet": (UNet, lambda: (image(),), None,
                 {2: ["up3"], 3: ["enc3", "up2"], 4: ["enc2", "up3", "up1"]}, False),
    "pt2_two_io": (TwoIO, lambda: (torch.randn(BATCH, 16), torch.randn(BATCH, 8)), None,
                   {2: ["b"], 3: ["c", "b"], 4: ["c", "b", "mix"]}, False),
    "pt2_mlp": (Mlp, lambda: (torch.randn(BATCH, 16),), "cross_entropy",
                {2: ["layers.4"], 3: ["layers.2", "layers.6"],
                 4: ["layers.2", "layers.4", "layers.6"]}, True),
}


# --- writing -----------------------------------------------------------------

def stamp() -> str:
    return model_blocks.stamp(__file__)


def export(model, inputs):
    batch = torch.export.Dim("batch", min=1)
    dynamic = tuple({0: batch} for _ in inputs)
    return torch.export.export(model, inputs, dynamic_shapes=dynamic)


def graph_text(ep) -> str:
    return str(ep.graph_module.code)


def make(outdir: str, name: str, spec, tag: str) -> bool:
    build, make_input, loss, splits, mode_free = spec
    base = os.path.join(outdir, name)
    if all(os.path.exists(base + s) for s in SUFFIXES):
        with open(base + ".stamp") as f:
            if f.read().strip() == tag:
                return False
    torch.manual_seed(0)
    model = build().eval()
    torch.manual_seed(1)
    inputs = make_input()
    ep = export(model, inputs)
    if mode_free:
        trained = export(model.train(), inputs)
        model.eval()
        if graph_text(trained) != graph_text(ep):
            raise SystemExit("%s: the train() and eval() exports differ" % name)
    with torch.no_grad():
        out = ep.module()(*inputs)
    if isinstance(out, list):
        out = tuple(out)
    atomic(base + ".pt2", lambda p: torch.export.save(ep, p))
    inp = inputs[0] if len(inputs) == 1 else inputs
    atomic(base + ".input.pt", lambda p: torch.save(inp, p))
    atomic(base + ".output.pt", lambda p: torch.save(out, p))
    meta = {"name": name, "inputs": len(inputs),
            "outputs": len(out) if isinstance(out, tuple) else 1, "batch": BATCH, "loss": loss,
            "split_at": {str(n): paths for n, paths in sorted(splits.items())}}
    write_text(base + ".json", json.dumps(meta, indent=2) + "\n")
    write_text(base + ".stamp", tag + "\n")  # last: marks the set complete
    print("wrote", name)
    return True


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--print"]
    if len(args) != 1:
        sys.exit(__doc__.strip().splitlines()[2])
    outdir = args[0]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    tag = stamp()
    written = [n for n, spec in MODELS.items() if make(outdir, n, spec, tag)]
    written += make_stateful(outdir, tag)
    names = list(MODELS) + ["pt2_state", "pt2_state_functional"]
    if "--print" in sys.argv[1:]:
        for n in names:
            print("=== %s" % n)
            print(torch.export.load(os.path.join(outdir, n + ".pt2")))
    print("%d written, %d up to date (torch %s)" % (
        len(written), len(names) - len(written), torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
