#!/usr/bin/env python3
"""Generate the models of tests/cli/test_weights.py: programs exported on the
meta device, and the checkpoints their weights come from.

Usage: PYTHON tests/models/make_weight_models.py OUTDIR

PYTHON: the PyTorch 2.x configuration's (torch 2.x, transformers, accelerate,
safetensors). Each model is built twice from one seed: once without weights
(torch.device("meta") for the MLPs, accelerate.init_empty_weights() for the
transformers decoders, which keeps buffers such as rotary frequencies real and
makes the wrapper's static caches on meta) and exported, and once with its
random weights, which are saved as a user's checkpoint is: safetensors'
save_file for the MLPs, transformers' save_pretrained (shards small enough
that there are several, with model.safetensors.index.json) for the decoders.

Into OUTDIR:
  mlp.pt2, mlp.safetensors            a 3-layer MLP (batch dimension
                                      dynamic), fp32
  mlp.input.pt, mlp.expected.pt       a batch of 8 and the real model's output
  mlp_bf16.pt2, mlp_bf16.safetensors  the same MLP in bfloat16
  mlp_bf16.input.pt, .expected.pt     the batch in bf16, the real bf16
                                      program's output
  mlp.data.pt, mlp_bf16.data.pt       (input, target) batches of 8, the
                                      input in fp32 and bf16, the target fp32
  mlp.losses.json, mlp_bf16.losses.json
                                      3 SGD steps (lr 0.1, MSE in float32)
                                      of the real fp32 and bf16 models
  llama.pt2, llama/                   a LLaMA decoder (untied embeddings)
                                      exported as docs/generate.md does,
                                      b = 2, L = 32; llama/ holds the shards
                                      and config.json
  gpt2.pt2, gpt2/                     a GPT-2 decoder (tied embeddings: the
                                      shards lack lm_head.weight)
  llama_bf16.pt2, llama_bf16/         the LLaMA in bfloat16 (exported from the
                                      bf16 model, shards in bf16)
  NAME.json                           for the decoders: {"prompt": [4][P],
                                      "generate": [4][N] transformers' own
                                      greedy generate() on the real model;
                                      for llama_bf16 the real bf16 program's
                                      greedy tokens, run in Python}
  stamp                               hash of this script and the versions,
                                      written last: up-to-date files are kept
Files are written atomically.
"""
import hashlib
import importlib.metadata
import json
import os
import sys

import torch
import torch.nn as nn

BATCH = 2
CACHE = 32
PROMPT = 5
NEW = 6
ROWS = 4


def atomic_save(obj, path, saver=torch.save):
    tmp = path + ".tmp"
    saver(obj, tmp)
    os.replace(tmp, path)


def write_json(data, path):
    atomic_save(data, path, lambda d, p: open(p, "w").write(json.dumps(d)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 32)
        self.l3 = nn.Linear(32, 8)

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


def export_mlp(model, x):
    batch = torch.export.Dim("batch", min=1)
    return torch.export.export(model, (x,), dynamic_shapes=({0: batch},))


def make_mlps(out):
    from safetensors.torch import save_file
    torch.manual_seed(0)
    real = MLP()
    x = torch.randn(8, 16)
    target = torch.randn(8, 8)
    for name, dtype in (("mlp", torch.float32), ("mlp_bf16", torch.bfloat16)):
        with torch.device("meta"):
            empty = MLP().to(dtype)
        # Meta weights take a meta example (the program records shapes alone).
        ep = export_mlp(empty, x.to(dtype).to("meta"))
        atomic_save(ep, os.path.join(out, name + ".pt2"), torch.export.save)
        weights = {k: v.detach().to(dtype).contiguous() for k, v in real.state_dict().items()}
        atomic_save(weights, os.path.join(out, name + ".safetensors"),
                    lambda d, p: save_file(d, p, metadata={"format": "pt"}))
        if dtype == torch.float32:
            with torch.no_grad():
                atomic_save(real(x), os.path.join(out, "mlp.expected.pt"))
        else:
            atomic_save(x.to(dtype), os.path.join(out, name + ".input.pt"))
            full = export_mlp(MLP().to(dtype), x.to(dtype))
            module = full.module()
            module.load_state_dict(weights)
            with torch.no_grad():
                atomic_save(module(x.to(dtype)), os.path.join(out, name + ".expected.pt"))
    atomic_save(x, os.path.join(out, "mlp.input.pt"))
    for name, dtype in (("mlp", torch.float32), ("mlp_bf16", torch.bfloat16)):
        atomic_save((x.to(dtype), target), os.path.join(out, name + ".data.pt"))
        # The unsplit model's losses over 3 SGD steps, as ppc train runs them:
        # the mean over the batch of the MSE, computed in float32 (a bf16
        # output is cast up first), the weights and their updates in dtype.
        model = MLP().to(dtype)
        model.load_state_dict(real.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(dtype)).float(), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        write_json(losses, os.path.join(out, name + ".losses.json"))


def decoder(arch, tied):
    import transformers as t
    if arch == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            initializer_range=0.1, bos_token_id=0, eos_token_id=1, tie_word_embeddings=tied))
    return t.GPT2LMHeadModel(t.GPT2Config(
        vocab_size=128, n_embd=64, n_layer=4, n_head=4, n_positions=64,
        initializer_range=0.2, bos_token_id=0, eos_token_id=1, tie_word_embeddings=tied))


def export_decoder(model):
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": BATCH, "max_cache_len": CACHE})
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=BATCH,
                                                       max_cache_len=CACHE)
    return exportable.export(input_ids=torch.zeros(BATCH, 1, dtype=torch.int64),
                             cache_position=torch.tensor([0], dtype=torch.int64))


def greedy_program(ep, prompt):
    """Greedy tokens of the exported program in Python, each group of BATCH
    rows from the program's initial buffers, the prompt fed one token a step
    as `ppc generate` feeds it."""
    module = ep.module()
    initial = {k: v.clone() for k, v in module.named_buffers()}
    rows = []
    for g in range(0, prompt.shape[0], BATCH):
        for k, v in module.named_buffers():
            v.copy_(initial[k])
        ids, picked = prompt[g:g + BATCH], []
        with torch.no_grad():
            for t in range(PROMPT + NEW - 1):
                step = ids[:, t:t + 1] if t < PROMPT else picked[-1]
                logits = module(input_ids=step, cache_position=torch.tensor([t]))[:, -1]
                if t >= PROMPT - 1:
                    picked.append(logits.argmax(-1, keepdim=True))
        rows.append(torch.cat(picked, 1))
    return torch.cat(rows)


def make_decoder(out, name, arch, tied, dtype=torch.float32):
    from accelerate import init_empty_weights
    with init_empty_weights():
        empty = decoder(arch, tied).to(dtype)
    ep = export_decoder(empty.eval())
    atomic_save(ep, os.path.join(out, name + ".pt2"), torch.export.save)
    torch.manual_seed(0)
    real = decoder(arch, tied).to(dtype).eval()
    shards = os.path.join(out, name)
    tmp = shards + ".tmp"
    if os.path.exists(tmp):
        import shutil
        shutil.rmtree(tmp)
    real.save_pretrained(tmp, max_shard_size="100KB")
    if os.path.exists(shards):
        import shutil
        shutil.rmtree(shards)
    os.replace(tmp, shards)
    prompt = torch.randint(2, 128, (ROWS, PROMPT), generator=torch.Generator().manual_seed(1))
    if dtype == torch.float32:
        # Every new token, end of sequence included, as `ppc generate`
        # without --eos-id picks them.
        real.generation_config.eos_token_id = None
        with torch.no_grad():
            tokens = real.generate(prompt, attention_mask=torch.ones_like(prompt),
                                   max_new_tokens=NEW, do_sample=False,
                                   pad_token_id=0)[:, PROMPT:]
    else:
        # bf16: the real program exported the same way, run in Python (its
        # rounding is the program's, which transformers' eager one is not).
        tokens = greedy_program(export_decoder(real), prompt)
    assert tokens.shape == (ROWS, NEW), tokens.shape
    atomic_save(prompt, os.path.join(out, name + ".prompt.pt"))
    write_json({"prompt": prompt.tolist(), "generate": tokens.tolist()},
               os.path.join(out, name + ".json"))


def stamp():
    h = hashlib.sha256(open(os.path.abspath(__file__), "rb").read())
    for package in ("torch", "transformers", "accelerate", "safetensors"):
        h.update(importlib.metadata.version(package).encode())
    return h.hexdigest()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    stamp_path = os.path.join(out, "stamp")
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp():
        print("up to date")
        return
    torch.set_num_threads(1)
    make_mlps(out)
    make_decoder(out, "llama", "llama", tied=False)
    make_decoder(out, "gpt2", "gpt2", tied=True)
    make_decoder(out, "llama_bf16", "llama", tied=False, dtype=torch.bfloat16)
    atomic_save(stamp(), stamp_path, lambda d, p: open(p, "w").write(d))


if __name__ == "__main__":
    main()
