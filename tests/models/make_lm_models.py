#!/usr/bin/env python3
"""Generate the language models of tests/cli/test_train_lm.py and what
transformers computes for them.

Usage: PYTHON tests/models/make_lm_models.py OUTDIR

PYTHON: the PyTorch 2.x configuration's (torch 2.x, transformers). Two tiny
causal LMs from config (random weights, seed 0), a LLaMA and a GPT-2 (whose
head is tied to its embedding), are exported as docs/export.md's recipe for
transformers causal LMs says: use_cache=False, the logits out, the batch
dimension dynamic. Its data is what a transformers user prepares:
(input_ids, labels) with the padding labelled -100, spread unevenly over the
rows so that the microbatches hold different numbers of tokens.

Into OUTDIR, for NAME llama and gpt2:
  NAME.pt2        the exported program (weights inside)
  NAME.json       {"causal_lm": the losses of STEPS SGD steps (lr LR) of
                  transformers' own training loop, `model(input_ids,
                  labels=labels).loss` on the whole batch;
                  "cross_entropy": the first step's loss with the logits
                  scored against the unshifted labels, as
                  F.cross_entropy(logits.view(-1, V), labels.view(-1));
                  "eval_after": the causal_lm loss of the whole batch after
                  those steps}
and for both:
  lm.data.pt      (input_ids [8, 12], labels [8, 12]) for `ppc train --data`
  lm.eval.pt      the same rows as a list of two batches, 3 and 5 rows
  stamp           hash of this script and the versions, written last:
                  up-to-date files are kept
Files are written atomically.
"""
import hashlib
import importlib.metadata
import json
import os
import sys

import torch

ROWS, LENGTH, VOCAB = 8, 12, 64
STEPS, LR = 5, 0.2


def atomic_save(obj, path, saver=torch.save):
    tmp = path + ".tmp" + os.path.splitext(path)[1]
    saver(obj, tmp)
    os.replace(tmp, path)


class Logits(torch.nn.Module):
    """The causal LM as a program of input_ids to logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def make_model(name):
    import transformers as t
    torch.manual_seed(0)
    if name == "llama":
        config = t.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=4, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=64,
                               tie_word_embeddings=False)
        return t.LlamaForCausalLM(config).float()
    # No dropout: ppc trains in training mode, and dropout's draws differ.
    config = t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=4, n_head=4, n_positions=64,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                          bos_token_id=0, eos_token_id=0)
    return t.GPT2LMHeadModel(config).float()


def make_data():
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, VOCAB, (ROWS, LENGTH), generator=g)
    labels = input_ids.clone()
    # Row r holds `lengths[r]` real tokens, then padding (token 0, label
    # -100): the microbatches of 2 rows hold 21, 16, 12 and 7 labels.
    lengths = [12, 9, 10, 6, 7, 5, 3, 4]
    for row, n in enumerate(lengths):
        input_ids[row, n:] = 0
        labels[row, n:] = -100
    return input_ids, labels


def train_reference(model, input_ids, labels):
    """transformers' own loop: the loss of the whole batch, then SGD."""
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    with torch.no_grad():
        logits = model(input_ids=input_ids, use_cache=False).logits
        first_ce = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                     labels.reshape(-1)).item()
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = model(input_ids=input_ids, labels=labels, use_cache=False).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        after = model(input_ids=input_ids, labels=labels, use_cache=False).loss.item()
    return {"causal_lm": losses, "cross_entropy": first_ce, "eval_after": after}


def stamp():
    h = hashlib.sha256(open(os.path.abspath(__file__), "rb").read())
    for package in ("torch", "transformers"):
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
    input_ids, labels = make_data()
    atomic_save((input_ids, labels), os.path.join(out, "lm.data.pt"))
    # The same rows as two batches of 3 and 5 rows (26 and 22 labels).
    atomic_save([(input_ids[:3], labels[:3]), (input_ids[3:], labels[3:])],
                os.path.join(out, "lm.eval.pt"))
    for name in ("llama", "gpt2"):
        model = make_model(name)
        batch = torch.export.Dim("batch", min=1, max=1024)
        program = torch.export.export(Logits(model).eval(), (input_ids[:2],),
                                      dynamic_shapes=({0: batch},), strict=False)
        atomic_save(program, os.path.join(out, name + ".pt2"), torch.export.save)
        reference = train_reference(model, input_ids, labels)
        atomic_save(reference, os.path.join(out, name + ".json"),
                    lambda d, p: open(p, "w").write(json.dumps(d)))
    atomic_save(stamp(), stamp_path, lambda d, p: open(p, "w").write(d))


if __name__ == "__main__":
    main()
