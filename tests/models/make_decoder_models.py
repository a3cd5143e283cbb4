#!/usr/bin/env python3
"""Generate decoder test models for `ppc generate`, exported the ExecuTorch way.

Usage: PYTHON tests/models/make_decoder_models.py OUTDIR

PYTHON: the PyTorch 2.x configuration's (torch 2.x and transformers;
`scripts/python.sh build` prints it). tests/cli/test_generate.py runs it and
caches the files in PPC_BUILD_DIR/decoder-models.

Each decoder is a transformers causal LM at a small size (4 layers, width
64, vocabulary 128), randomly initialised (torch.manual_seed(0)) with a
larger initializer_range than the default 0.02, so that the greedy tokens
depend on the history (checked below). It is exported as ExecuTorch's LLM
flow exports one:

  model.generation_config = GenerationConfig(use_cache=True,
      cache_implementation="static",
      cache_config={"batch_size": b, "max_cache_len": L})
  TorchExportableModuleForDecoderOnlyLM(model, batch_size=b, max_cache_len=L)
      .export(input_ids=int64 [b, 1], cache_position=int64 [1])

The program takes the keyword inputs input_ids [b, 1] and cache_position
[1], returns the logits [b, 1, V], and holds its key/value caches as buffers
written in place (key_cache_i, value_cache_i, cumulative_length_i).

Models (b = 2 rows, so a prompt of B = M * b rows runs as M groups):
  dec_llama      LlamaForCausalLM (RMSNorm, rotary, grouped-query attention:
                 4 heads, 2 key/value heads), L = 32
  dec_gpt2       GPT2LMHeadModel (LayerNorm, learned positions), L = 32
  dec_qwen2      Qwen2ForCausalLM (LLaMA with q/k/v biases), L = 32
  dec_llama_long dec_llama's architecture with L = 512: a long run to kill a
                 rank in (no reference tokens)
  dec_stateless  no state: an embedding and two Linear layers taking the
                 same keyword inputs (for the "no state" error)
  dec_llama_chunked, dec_qwen2_chunked
                 dec_llama's and dec_qwen2's models (the same weights)
                 exported with a dynamic sequence dimension, as transformers
                 exports a prefill program: input_ids [b, S] and
                 cache_position [S], S in 1..L (chunked prefill); their
                 references also hold "transformers": the tokens of
                 transformers' own greedy generate() on the eager model

For each NAME it writes into OUTDIR:
  NAME.pt2        torch.export.save of the exported program
  NAME.prompt.pt  int64 [8, P = 5] random token ids (torch.save); a test
                  takes its first B = M * b rows
  NAME.json       {"name", "arch", "batch": b, "cache_length": L,
                   "vocab": V, "prompt_length": P, "rows": 8,
                   "new_tokens": N = 6, "state": the buffers a step changes,
                   "greedy": [8][N] reference tokens,
                   "reset": [8][N] the tokens with the state reset before
                            every step (they differ from "greedy"),
                   "min_margin": the smallest gap between the largest and
                                 the second largest logit of a greedy pick,
                   "sampling": the settings of SAMPLING,
                   "log_p_sample_is_greedy": log of the probability that
                            sampling with those settings picks every greedy
                            token of the 8 rows}
                  (the decoding fields are null for the models without
                  reference tokens)
  NAME.stamp      hash of this script, model_blocks.py and the torch and
                  transformers versions, written last: a model whose files
                  exist with a matching stamp is skipped.

The reference tokens come from the unsplit program, torch.export.load(
NAME.pt2).module(), decoding each group of b rows from a fresh copy of its
state, as `ppc generate` decodes: step t < P feeds prompt[:, t] with
cache_position [t]; the logits of step P - 1 give new token 0 (argmax over
the vocabulary, the first maximum); step P + i feeds new token i with
cache_position [P + i]. The generator checks that the tokens depend on the
history (reset differs from greedy in most places), that no greedy pick is
a near tie (min_margin >= MIN_MARGIN, so rounding cannot flip it), and that
sampling is unlikely to reproduce the greedy tokens. Files are written
atomically (temporary name, then os.replace), so concurrent runs are safe.
Deterministic: fixed seeds, one thread.
"""
import importlib.metadata
import json
import math
import os
import sys

import torch
import torch.nn as nn

import model_blocks
from model_blocks import atomic, write_text

BATCH = 2          # the program's static batch b
ROWS = 8           # prompt rows: M = 1, 2 and 4 groups of b
PROMPT_LENGTH = 5  # P
NEW_TOKENS = 6     # N
VOCAB = 128
SAMPLING = {"temperature": 0.8, "top_k": 20, "top_p": 0.9}
MIN_MARGIN = 1e-3
SUFFIXES = (".pt2", ".prompt.pt", ".json", ".stamp")


# --- models ------------------------------------------------------------------

def llama(std):
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        initializer_range=std, bos_token_id=0, eos_token_id=1))


def gpt2(std):
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_embd=64, n_layer=4, n_head=4, n_positions=64,
        initializer_range=std, bos_token_id=0, eos_token_id=1))


def qwen2(std):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=std, bos_token_id=0, eos_token_id=1))


class Stateless(nn.Module):
    """The decoders' keyword inputs and logits, and no buffer written."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.pos = nn.Embedding(64, 32)
        self.l1 = nn.Linear(32, 32)
        self.l2 = nn.Linear(32, VOCAB)

    def forward(self, input_ids, cache_position):
        x = self.emb(input_ids) + self.pos(cache_position)
        return self.l2(torch.relu(self.l1(x)))


# name: (arch, build, cache length L, reference tokens?, dynamic sequence?)
MODELS = {
    "dec_llama": ("llama", lambda: llama(0.1), 32, True, False),
    "dec_gpt2": ("gpt2", lambda: gpt2(0.2), 32, True, False),
    "dec_qwen2": ("qwen2", lambda: qwen2(0.2), 32, True, False),
    "dec_llama_long": ("llama", lambda: llama(0.1), 512, False, False),
    "dec_stateless": ("stateless", Stateless, 32, False, False),
    "dec_llama_chunked": ("llama", lambda: llama(0.1), 32, True, True),
    "dec_qwen2_chunked": ("qwen2", lambda: qwen2(0.2), 32, True, True),
}


def configure(model, cache_length):
    from transformers import GenerationConfig
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": BATCH, "max_cache_len": cache_length})


def export(arch, model, cache_length, dynamic):
    ids = torch.zeros(BATCH, 1, dtype=torch.int64)
    position = torch.tensor([0], dtype=torch.int64)
    if arch == "stateless":
        return torch.export.export(model, (), {"input_ids": ids, "cache_position": position})
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    configure(model, cache_length)
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=BATCH,
                                                       max_cache_len=cache_length)
    if not dynamic:
        return exportable.export(input_ids=ids, cache_position=position)
    # transformers' prefill form: an example of 4 tokens, S dynamic in both.
    seq = torch.export.Dim("seq", min=1, max=cache_length)
    return exportable.export(input_ids=torch.zeros(BATCH, 4, dtype=torch.int64),
                             cache_position=torch.arange(4),
                             dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}},
                             strict=False)


def transformers_greedy(model, prompt):
    """transformers' own greedy generate() on the eager model, a group of b
    rows at a time (its static cache holds b rows): int64 [ROWS, N]."""
    out = []
    with torch.no_grad():
        for g in range(0, ROWS, BATCH):
            rows = prompt[g:g + BATCH]
            new = model.generate(rows, attention_mask=torch.ones_like(rows),
                                 max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                 do_sample=False, pad_token_id=0)
            out.append(new[:, PROMPT_LENGTH:])
    return torch.cat(out)


# --- the Python reference ------------------------------------------------------

class Program:
    """The unsplit program as a callable module whose state can be put back
    to the program's initial buffer values (a fresh copy)."""

    def __init__(self, path):
        self.module = torch.export.load(path).module()
        self.initial = {k: v.clone() for k, v in self.module.named_buffers()}

    def reset(self):
        with torch.no_grad():
            for k, v in self.module.named_buffers():
                v.copy_(self.initial[k])

    def step(self, ids, position):
        with torch.no_grad():
            return self.module(input_ids=ids, cache_position=torch.tensor([position]))[:, -1, :]

    def changed(self):
        """The buffers that differ from their initial values."""
        return sorted(k for k, v in self.module.named_buffers()
                      if not torch.equal(v, self.initial[k]))


def log_p_greedy(logits):
    """Per row, the log probability that sampling with SAMPLING (temperature,
    then top-k, then top-p) picks the largest logit."""
    x = logits / SAMPLING["temperature"]
    kth = x.topk(SAMPLING["top_k"], -1).values[:, -1:]
    p = x.masked_fill(x < kth, -math.inf).softmax(-1)
    sorted_p, _ = p.sort(-1, descending=True)
    kept = sorted_p * ((sorted_p.cumsum(-1) - sorted_p) < SAMPLING["top_p"])
    return (kept[:, 0] / kept.sum(-1)).log()


def decode(program, prompt, reset_every_step=False):
    """Greedy decoding of one group (b rows), as `ppc generate` feeds it;
    returns (tokens [b, N], smallest top-1 margin, log P(sampling = greedy))."""
    program.reset()
    tokens, margin, log_p = [], math.inf, 0.0
    for t in range(PROMPT_LENGTH + NEW_TOKENS - 1):
        if reset_every_step:
            program.reset()
        ids = prompt[:, t:t + 1] if t < PROMPT_LENGTH else tokens[-1]
        logits = program.step(ids, t)
        if t < PROMPT_LENGTH - 1:
            continue
        tokens.append(logits.argmax(-1, keepdim=True))  # the first maximum
        top = logits.topk(2, -1).values
        margin = min(margin, (top[:, 0] - top[:, 1]).min().item())
        log_p += log_p_greedy(logits).sum().item()
    return torch.cat(tokens, 1), margin, log_p


def references(path, prompt):
    """The reference fields of NAME.json; checks they are fit for the tests."""
    program = Program(path)
    greedy, reset, margin, log_p = [], [], math.inf, 0.0
    for g in range(0, ROWS, BATCH):
        rows = prompt[g:g + BATCH]
        tokens, m, lp = decode(program, rows)
        greedy.append(tokens)
        margin, log_p = min(margin, m), log_p + lp
        reset.append(decode(program, rows, reset_every_step=True)[0])
    greedy, reset = torch.cat(greedy), torch.cat(reset)
    differ = (greedy != reset).sum().item()
    if differ < greedy.numel() // 2:
        raise SystemExit("%s: only %d of %d tokens change when the state is reset before "
                         "every step" % (path, differ, greedy.numel()))
    if margin < MIN_MARGIN:
        raise SystemExit("%s: a greedy pick is a near tie (margin %g)" % (path, margin))
    if log_p > math.log(1e-6):
        raise SystemExit("%s: sampling would likely give the greedy tokens (log p %g)"
                         % (path, log_p))
    program.reset()
    program.step(prompt[:BATCH, :1], 0)
    return {"state": program.changed(), "greedy": greedy.tolist(), "reset": reset.tolist(),
            "min_margin": margin, "sampling": SAMPLING, "log_p_sample_is_greedy": log_p}


def state_of(path):
    program = Program(path)
    program.step(torch.zeros(BATCH, 1, dtype=torch.int64), 0)
    return program.changed()


# --- writing -----------------------------------------------------------------

def stamp() -> str:
    # model_blocks.stamp hashes torch's version; the programs depend on
    # transformers' too.
    return model_blocks.stamp(__file__) + "-transformers-" + importlib.metadata.version(
        "transformers")


def make(outdir: str, name: str, spec, tag: str) -> bool:
    arch, build, cache_length, refs, dynamic = spec
    base = os.path.join(outdir, name)
    if all(os.path.exists(base + s) for s in SUFFIXES):
        with open(base + ".stamp") as f:
            if f.read().strip() == tag:
                return False
    torch.manual_seed(0)
    model = build().eval()
    ep = export(arch, model, cache_length, dynamic)
    prompt = torch.randint(0, VOCAB, (ROWS, PROMPT_LENGTH),
                           generator=torch.Generator().manual_seed(1))
    atomic(base + ".pt2", lambda p: torch.export.save(ep, p))
    atomic(base + ".prompt.pt", lambda p: torch.save(prompt, p))
    meta = {"name": name, "arch": arch, "batch": BATCH, "cache_length": cache_length,
            "vocab": VOCAB, "prompt_length": PROMPT_LENGTH, "rows": ROWS,
            "new_tokens": NEW_TOKENS, "state": None, "greedy": None, "reset": None,
            "min_margin": None, "sampling": None, "log_p_sample_is_greedy": None}
    if refs:
        meta.update(references(base + ".pt2", prompt))
    if dynamic:
        meta["transformers"] = transformers_greedy(model, prompt).tolist()
    else:
        meta["state"] = state_of(base + ".pt2")
    # One line a key: the token tables stay readable.
    write_text(base + ".json", "{\n%s\n}\n" % ",\n".join(
        " %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in meta.items()))
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
    print("%d written, %d up to date (torch %s, transformers %s)" % (
        len(written), len(MODELS) - len(written), torch.__version__,
        importlib.metadata.version("transformers")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
