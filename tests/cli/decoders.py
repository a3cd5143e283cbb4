"""Helpers for the `ppc generate` tests (tests/cli/test_generate.py): the
decoders of tests/models/make_decoder_models.py, their reference tokens and
prompts cut to a number of rows.

  make_decoder_models(outdir, python)
                             runs the generator (which caches: a model with a
                             current stamp is kept); skipped when PYTHON is
                             this one and every model is up to date
  has_transformers(python)   whether PYTHON can import transformers
  common.model_meta(name, models)
                             NAME.json: the program's batch b, cache length
                             L, vocabulary, prompt length P, new tokens N,
                             the reference tokens ("greedy", "reset")
  load_prompt(models, name)       NAME.prompt.pt, int64 [8, P]
  write_prompt(path, models, name, rows)
                             saves the first ROWS rows of NAME.prompt.pt to
                             PATH; returns them
  greedy(models, name, rows) the reference greedy tokens of the first ROWS
                             rows, int64 [ROWS, N]
  transformers_greedy_tokens(models, name, rows)
                             the same from transformers' generate() (the
                             *_chunked models)

The reference tokens decode each group of b rows from a fresh copy of the
program's state, feeding the prompt one token a step, as `ppc generate`
does; rows g*b .. g*b+b-1 are group g whatever the number of groups, so the
first rows' tokens serve every M.
"""
import functools
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ROOT, model_meta, run_generator  # noqa: E402

GENERATOR = os.path.join(ROOT, "tests", "models", "make_decoder_models.py")
NAMES = ["dec_llama", "dec_gpt2", "dec_qwen2", "dec_llama_long", "dec_stateless",
         "dec_llama_chunked", "dec_qwen2_chunked"]
SUFFIXES = (".pt2", ".prompt.pt", ".json")


@functools.lru_cache(maxsize=None)
def has_transformers(python):
    # (abspath, not realpath: a venv's python is a link to the system one.)
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        try:
            import transformers  # noqa: F401
            return True
        except ImportError:
            return False
    return subprocess.run([python, "-c", "import transformers"],
                          capture_output=True).returncode == 0


def make_decoder_models(outdir, python=sys.executable, timeout=600):
    """Runs the generator into OUTDIR with PYTHON; returns a
    CompletedProcess (the caller checks returncode)."""
    return run_generator(GENERATOR, outdir, NAMES, SUFFIXES, python, timeout)


def model_file(models, name, suffix=".pt2"):
    return os.path.join(models, name + suffix)


def load_prompt(models, name):
    return torch.load(model_file(models, name, ".prompt.pt"))


def write_prompt(out, models, name, rows):
    """Saves the first ROWS rows of NAME.prompt.pt to OUT; returns them."""
    p = load_prompt(models, name)[:rows].clone()
    torch.save(p, out)
    return p


def greedy(models, name, rows):
    """The reference greedy tokens of the first ROWS rows, int64 [ROWS, N]."""
    return torch.tensor(model_meta(name, models)["greedy"][:rows], dtype=torch.int64)


def transformers_greedy_tokens(models, name, rows):
    """The tokens of transformers' own greedy generate() on the eager model
    (the models with a dynamic sequence dimension), int64 [ROWS, N]."""
    return torch.tensor(model_meta(name, models)["transformers"][:rows], dtype=torch.int64)


def reset_state_tokens(models, name, rows):
    """The tokens of the first ROWS rows with the state reset before every
    step: what a decoder that lost its cache would give."""
    return torch.tensor(model_meta(name, models)["reset"][:rows], dtype=torch.int64)
