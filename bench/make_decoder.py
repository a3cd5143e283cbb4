#!/usr/bin/env python3
"""Generate the decode benchmark's decoder (bench/run.py benchmark 30) into OUTDIR.

Usage: PYTHON bench/make_decoder.py OUTDIR

PYTHON: the PyTorch 2.x configuration's (torch 2.x and transformers;
`scripts/python.sh build` prints it). A LLaMA causal LM large enough that a
decode step is compute (and weight traffic), not per-action overhead: 8
layers, hidden 512, intermediate 1408, 8 heads (8 key/value heads),
vocabulary 1024, about 26M parameters,
randomly initialised (torch.manual_seed(0)). It is exported the way
ExecuTorch's LLM flow exports one (as tests/models/make_decoder_models.py
does): a static cache of L = CACHE_LENGTH positions for b = BATCH rows,
keyword inputs input_ids [b, 1] and cache_position [1], logits [b, 1, V]
out, the caches held as buffers written in place.

Writes, unless a matching stamp says they are there:
  decoder.pt2             torch.export.save of the program
  decoder.prompt.M.pt     int64 [M * b, PROMPT_LENGTH] random token ids, for
                          each M of GROUPS (the first M * b rows of one draw)
  decoder.json            {"batch", "cache_length", "vocab", "prompt_length",
                           "groups", "layers", "hidden", "parameters"}
  decoder.stamp           hash of this script and the torch and transformers
                          versions, written last
Files are written atomically (temporary name, then os.replace).
"""
import hashlib
import importlib.metadata
import json
import os
import sys

import torch

BATCH = 4            # b, the program's static batch
CACHE_LENGTH = 64    # L: prompt + new tokens must fit
PROMPT_LENGTH = 8    # P
GROUPS = (1, 2, 4, 8)
VOCAB = 1024
CONFIG = dict(vocab_size=VOCAB, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
              num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=256,
              bos_token_id=0, eos_token_id=1)


def stamp() -> str:
    h = hashlib.sha256()
    with open(os.path.abspath(__file__), "rb") as f:
        h.update(f.read())
    h.update(torch.__version__.encode())
    h.update(importlib.metadata.version("transformers").encode())
    return h.hexdigest()[:16]


def atomic(path, write):
    """write(tmp) into a private directory beside PATH, then os.replace: the
    temporary file keeps PATH's name (torch.export.save names the archive's
    top folder after it)."""
    head, tail = os.path.split(path)
    tmpdir = os.path.join(head, ".tmp.%d" % os.getpid())
    os.makedirs(tmpdir, exist_ok=True)
    try:
        write(os.path.join(tmpdir, tail))
        os.replace(os.path.join(tmpdir, tail), path)
    finally:
        for name in os.listdir(tmpdir):
            os.remove(os.path.join(tmpdir, name))
        os.rmdir(tmpdir)


def write_text(path, text):
    def write(p):
        with open(p, "w") as f:
            f.write(text)
    atomic(path, write)


def export():
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": BATCH, "max_cache_len": CACHE_LENGTH})
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=BATCH,
                                                       max_cache_len=CACHE_LENGTH)
    ep = exportable.export(input_ids=torch.zeros(BATCH, 1, dtype=torch.int64),
                           cache_position=torch.tensor([0], dtype=torch.int64))
    return ep, sum(p.numel() for p in model.parameters())


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    base = os.path.join(outdir, "decoder")
    tag = stamp()
    files = [base + ".pt2", base + ".json", base + ".stamp"] + [
        "%s.prompt.%d.pt" % (base, m) for m in GROUPS]
    if all(os.path.exists(f) for f in files):
        with open(base + ".stamp") as f:
            if f.read().strip() == tag:
                return 0
    torch.set_num_threads(1)
    ep, params = export()
    atomic(base + ".pt2", lambda p: torch.export.save(ep, p))
    prompt = torch.randint(2, VOCAB, (max(GROUPS) * BATCH, PROMPT_LENGTH),
                           generator=torch.Generator().manual_seed(1))
    for m in GROUPS:
        rows = prompt[:m * BATCH].clone()
        atomic("%s.prompt.%d.pt" % (base, m), lambda p: torch.save(rows, p))
    meta = {"batch": BATCH, "cache_length": CACHE_LENGTH, "vocab": VOCAB,
            "prompt_length": PROMPT_LENGTH, "groups": list(GROUPS),
            "layers": CONFIG["num_hidden_layers"], "hidden": CONFIG["hidden_size"],
            "parameters": params}
    write_text(base + ".json", json.dumps(meta, indent=1) + "\n")
    write_text(base + ".stamp", tag + "\n")  # last: marks the set complete
    print("bench decoder: wrote %s (%.1fM parameters)" % (base + ".pt2", params / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
