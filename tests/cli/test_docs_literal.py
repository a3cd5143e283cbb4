"""Runs the code of the docs a new user follows, literally (issue #44), and
checks that it prints what the docs show.

The docs mark what runs with an HTML comment on the line before a fenced
block (invisible when rendered):

  <!-- test: docs_literal NAME -->                 ```python or ```sh block
                                                   of recipe NAME: run it
  <!-- test: docs_literal NAME output -->          ``` block: what the sh
                                                   blocks of NAME since the
                                                   last output block print
  <!-- test: docs_literal NAME output cuts-vary --> the same, for a split by
                                                   measured time (below)

Each recipe runs in a scratch folder of its own: its Python blocks in order
in one Python session ($PPC_TORCH_PYTHON, the docs' `python`/`$python`), as
a user who keeps one interpreter open; its sh blocks in bash with `ppc`
($PPC) and `python` on PATH and $python set, as the README's setup says
(that setup block itself, which runs in the checkout, is not run).

The recipes: README.md's tutorial (resnet18: export, split by measured
time, verify, inspect, run on 2 ranks with a trace, trace summary and plot,
train with checkpoints, join, back in Python), docs/export.md's Hugging Face
recipes (a causal LM trained, a BERT classifier and a timm ViT split,
verified and run on 2 ranks against the model) and docs/generate.md's
decoder (export, split, text to prompt.pt, generate, tokens.pt to text).

What is compared:
  - an output block against the combined stdout and stderr of its sh
    blocks, as lines in any order (ranks interleave): every line shown must
    be printed, and nothing else unless the block elides lines with a
    `...` line; `...` inside a line matches any text. Measured numbers
    (times, rates, memory, cost percentages, trace times, bubbles, file
    sizes and hashes) and the link and BLAS names are wildcarded on both
    sides (normalize()); everything else, losses included, is literal.
  - `cuts-vary`: README's `--cost profile` split balances measured times,
    so its cuts (the README says) move from run to run: in those blocks
    every number and the module lists and boundary values a cut decides
    are wildcarded too, and a run of boundary value lines counts as one.
  - a Python line `print(...)  # SHOWN` against what the block prints.
  - what the prose claims: ppc's outputs equal the model's (README's y.pt,
    the BERT and ViT outputs), step 1's loss is transformers' own, and the
    decoded tokens are transformers' greedy generate()'s.

docs/generate.md's tokenizer comes from the Hugging Face hub, which a test
may not reach: that one line (`tok = AutoTokenizer.from_pretrained(...)`)
is replaced by a byte-level BPE tokenizer built here (offline_tokenizer),
so the model's vocabulary (`vocab_size=len(tok)`) is smaller than the
doc's 49152. Nothing else is changed.

Every test skips where ppc is built against LibTorch 1.x (the recipes are
.pt2) or the PyTorch 2.x Python is missing; each also where that Python
lacks a package its recipe imports (torchvision, transformers, timm).

Env: PPC, PPC_BUILD_DIR, PPC_TORCH_PYTHON (else PPC_PT2_PYTHON).
"""
# ctest: one entry: the recipes' `ppc launch` use its default rendezvous port,
# 29500, as the docs do, so they must not run at the same time; the skips are
# the whole file's (LibTorch 1.x, no PyTorch 2.x Python) except a recipe whose
# package is missing, which common.main() still reports as SKIPPED.
import json
import os
import re
import select
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PPC, ROOT, RTOL, class_tmpdir, libtorch_major, main,  # noqa: E402
                    pytorch2_python)

PYTHON = pytorch2_python()
MARK = re.compile(r"^<!-- test: docs_literal (\w+)( output)?( cuts-vary)? -->$")
# The one line of docs/generate.md that needs the network, and what replaces it.
HUB_TOKENIZER = re.compile(r'^tok = AutoTokenizer\.from_pretrained\("[^"]+"\).*$', re.M)
OFFLINE_TOKENIZER = "tok = offline_tokenizer()  # (the test's: the doc's needs the hub)"


class Block:
    """A marked fenced block: recipe NAME, kind 'python', 'sh' or 'output',
    its text, where it is (path:line) and whether its cuts vary."""

    def __init__(self, name, kind, text, where, cuts_vary=False):
        self.name, self.kind, self.text, self.where = name, kind, text, where
        self.cuts_vary = cuts_vary


def marked_blocks(relpath):
    """The marked blocks of ROOT/RELPATH, in order. A marker not followed by
    a fenced block of its kind fails the test run."""
    with open(os.path.join(ROOT, relpath)) as f:
        lines = f.read().split("\n")
    blocks = []
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if not m:
            continue
        where = "%s:%d" % (relpath, i + 1)
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        want = ("```",) if m.group(2) else ("```python", "```sh")
        if fence not in want:
            raise AssertionError("%s: the marker is not followed by %s"
                                 % (where, " or ".join(want)))
        end = lines.index("```", i + 2)
        kind = "output" if m.group(2) else fence[3:]
        blocks.append(Block(m.group(1), kind, "\n".join(lines[i + 2:end]) + "\n", where,
                            bool(m.group(3))))
    return blocks


NUM = r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# Measured numbers, wildcarded on both sides as '#'.
MEASURED = [
    (re.compile(NUM + r"(?= ?(?:ms|s|MB|MiB|GB|samples/s|tokens/s)\b)"), "#"),
    (re.compile(r"\b(\w+_(?:ms|mb|s)|bubble)([= ])" + NUM), r"\1\2#"),
    (re.compile(NUM + "%"), "#%"),
    # The time left shows once the steps after the first span a second:
    # whether a line has one depends on the machine's speed.
    (re.compile(r", # s left\)"), ")"),
    (re.compile(r"\(" + NUM + r" bytes"), "(# bytes"),
    (re.compile(r"sha256 [0-9a-f]+"), "sha256 #"),
    (re.compile(r"^model: \S*/"), "model: "),  # ppc inspect: the model's absolute path
    (re.compile(r"\b(link|blas)=\w+"), r"\1=#"),
    # ppc trace summary: which stage is slowest, and the times in its tables.
    (re.compile(r"slowest stage: \d+ \(F mean # ms over \d+\)"), "slowest stage: #"),
    (re.compile(r"\bslowest_f_stage=\d+"), "slowest_f_stage=#"),
]
TABLE_ROW = re.compile(r"^\d+( +[\d.]+)+$")
# Where the cuts fall (cuts-vary blocks only).
CUTS = [
    (re.compile(r"\d+"), "#"),
    (re.compile(r" runs .*"), " runs *"),
    (re.compile(r"^stage #: .*"), "stage #: *"),
    (re.compile(r": Tensor .*"), ": Tensor *"),
]


def normalize(line, cuts_vary):
    line = " ".join(line.split())
    for pattern, repl in MEASURED:
        line = pattern.sub(repl, line)
    if TABLE_ROW.match(line):
        line = re.sub(r"\d+\.\d+", "#", line)
    if cuts_vary:
        for pattern, repl in CUTS:
            line = pattern.sub(repl, line)
    return line


def normalized(lines, cuts_vary):
    out = []
    for line in lines:
        if not line.strip():
            continue
        line = normalize(line, cuts_vary)
        # A cut's lists (their '*'): as many lines as values cross the cuts.
        if not ("*" in line and out and out[-1] == line):
            out.append(line)
    return out


def as_regex(shown):
    """A shown line (normalized) as a regex: `...` inside it matches anything."""
    return re.compile(".*?".join(re.escape(part) for part in shown.split("...")))


# Test code, run in the decoder's session first: a transformers tokenizer (a
# byte-level BPE) built here, for the doc's hub tokenizer (see the docstring).
OFFLINE_TOKENIZER_DEF = '''
def offline_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        ["The capital of France is Paris.", "Pipelines split a model into stages."],
        trainers.BpeTrainer(vocab_size=400, show_progress=False,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=bpe)
'''


# One Python session: exec()s each block in one namespace, in the scratch
# folder; its replies (JSON lines) go on a copy of the original stdout, and
# what the blocks print, to Python's sys.stdout and sys.stderr, is captured.
WORKER = r'''
import contextlib, io, json, os, sys, traceback
reply = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
namespace = {"__name__": "__main__"}
for request in sys.stdin:
    request = json.loads(request)
    out, err, error = io.StringIO(), io.StringIO(), None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(request["code"], request["where"], "exec"), namespace)
        except BaseException:
            error = traceback.format_exc()
    reply.write(json.dumps({"stdout": out.getvalue(), "stderr": err.getvalue(),
                            "error": error}) + "\n")
    reply.flush()
'''


class Session:
    def __init__(self, cwd, env):
        self.proc = subprocess.Popen([PYTHON, "-W", "ignore", "-c", WORKER], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def run(self, code, where, timeout=300):
        """Runs CODE; returns (stdout, stderr, error traceback or None)."""
        self.proc.stdin.write(json.dumps({"code": code, "where": where}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise AssertionError("%s: the Python session %s:\n%s" % (
                where, "timed out" if not ready else "died", self.proc.stderr.read()[-4000:]))
        r = json.loads(line)
        return r["stdout"], r["stderr"], r["error"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


# The packages the recipes import, found (not imported: that takes seconds) once.
PACKAGES = ("torchvision", "transformers", "tokenizers", "timm")
FIND = ("import importlib.util, json, sys; "
        "print(json.dumps([importlib.util.find_spec(m) is not None for m in sys.argv[1:]]))")


class DocsLiteralTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.skip = None
        major = libtorch_major()
        if major < 2:
            cls.skip = ("needs a ppc built against LibTorch 2.x (the docs' recipes are .pt2); "
                        "this one has LibTorch %d" % major)
        elif not os.access(PYTHON, os.X_OK):
            cls.skip = ("no PyTorch 2.x Python: %s is missing (scripts/python.sh build makes it)"
                        % PYTHON)
        if cls.skip:
            return
        found = subprocess.run([PYTHON, "-c", FIND, *PACKAGES], capture_output=True, text=True,
                               check=True)
        cls.found = dict(zip(PACKAGES, json.loads(found.stdout)))
        cls.tmp = class_tmpdir(cls)
        # `ppc` and `python` on PATH, as the README's setup puts them there.
        cls.bin = os.path.join(cls.tmp, "bin")
        os.mkdir(cls.bin)
        for name, target in (("ppc", os.path.abspath(PPC)), ("python", PYTHON)):
            path = os.path.join(cls.bin, name)
            with open(path, "w") as f:
                f.write('#!/bin/sh\nexec "%s" "$@"\n' % target)
            os.chmod(path, 0o755)
        cls.env = dict(os.environ, PATH=cls.bin + os.pathsep + os.environ.get("PATH", ""),
                       python=os.path.join(cls.bin, "python"))

    def setUp(self):
        if self.skip:
            self.skipTest(self.skip)

    def needs(self, *modules):
        for m in modules:
            if not self.found.get(m):
                self.skipTest("%s lacks %s, which the recipe imports" % (PYTHON, m))

    def recipe(self, relpath, name, prelude=None, substitute=None):
        """Runs recipe NAME of RELPATH in a scratch folder and checks every
        output it shows; returns (the session, for the caller's checks, and
        {block where: (stdout, stderr)} of its blocks). PRELUDE: test code
        the session runs first; SUBSTITUTE(code) may change a Python block's
        code (the decoder's tokenizer line)."""
        blocks = [b for b in marked_blocks(relpath) if b.name == name]
        kinds = {b.kind for b in blocks}
        self.assertTrue({"python", "sh", "output"} <= kinds,
                        "%s: recipe %r has blocks %s; the markers are missing"
                        % (relpath, name, sorted(kinds)))
        cwd = os.path.join(self.tmp, name)
        os.mkdir(cwd)
        session = Session(cwd, self.env)
        self.addCleanup(session.close)
        if prelude:
            _, err, error = session.run(prelude, "test: prelude")
            self.assertIsNone(error, "%s\n%s" % (error, err))
        printed, ran, took = [], {}, []
        for block in blocks:
            start = time.monotonic()
            if block.kind == "python":
                code = substitute(block.text) if substitute else block.text
                out, err, error = session.run(code, block.where)
                self.assertIsNone(error, "%s raised:\n%s\n%s" % (block.where, error, err))
                self.check_print_comments(block, out)
                ran[block.where] = (out, err)
            elif block.kind == "sh":
                r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=cwd,
                                   env=self.env, capture_output=True, text=True, timeout=600)
                self.assertEqual(r.returncode, 0, "%s exited %d:\n%s\n%s"
                                 % (block.where, r.returncode, r.stdout, r.stderr))
                printed += (r.stdout + r.stderr).splitlines()
                ran[block.where] = (r.stdout, r.stderr)
            else:
                self.check_output(block, printed)
                printed = []
            if block.kind != "output":
                took.append("%s %.1f s" % (block.where.split(":")[1], time.monotonic() - start))
        # CI's time limit is close: what each block took, by its line.
        print("%s %s: %s" % (relpath, name, ", ".join(took)), file=sys.stderr)
        return session, ran

    def check_print_comments(self, block, out):
        """`print(...)  # SHOWN` lines against what the block printed."""
        shown = [m.group(1) for m in re.finditer(r"^\s*print\(.*\)\s+# (.+)$", block.text, re.M)]
        if not shown:
            return
        got = out.splitlines()
        self.assertEqual(len(got), len(shown), "%s printed:\n%s" % (block.where, out))
        for want, line in zip(shown, got):
            self.assertRegex(line, "^" + as_regex(want).pattern + "$",
                             "%s shows `%s`" % (block.where, want))

    def check_output(self, block, printed):
        shown = block.text.splitlines()
        elided = "..." in (line.strip() for line in shown)
        want = normalized([line for line in shown if line.strip() != "..."], block.cuts_vary)
        got = normalized(printed, block.cuts_vary)
        unused = list(got)
        missing = []
        for line in want:
            pattern = as_regex(line)
            hit = next((g for g in unused if pattern.fullmatch(g)), None)
            if hit is None:
                missing.append(line)
            else:
                unused.remove(hit)
        report = "\n%s shows (normalized):\n  %s\nthe commands printed:\n  %s" % (
            block.where, "\n  ".join(want), "\n  ".join(printed))
        self.assertEqual(missing, [], "lines shown but not printed" + report)
        if not elided:
            self.assertEqual(unused, [], "lines printed but not shown" + report)

    def test_readme_tutorial(self):
        self.needs("torchvision")
        session, _ = self.recipe("README.md", "readme")
        # "y.pt is what the exported program computes" (README).
        out, err, error = session.run(
            "import torch\n"
            "x = torch.load('x.pt')\n"
            "want = torch.export.load('resnet18.pt2').module()(x)\n"
            "print((torch.load('y.pt') - want).abs().max().item())\n", "test: y.pt")
        self.assertIsNone(error, error)
        self.assertLessEqual(float(out), RTOL)
        self.assertTrue(os.path.getsize(os.path.join(self.tmp, "readme", "timeline.svg")) > 0)

    def test_export_causal_lm(self):
        self.needs("transformers")
        _, ran = self.recipe("docs/export.md", "causal_lm")
        (python_out, _), (sh_out, sh_err) = ran.values()
        # "step 1's loss is model(input_ids, labels=labels).loss to float rounding"
        want = float(re.search(r"tensor\(([\d.]+)", python_out).group(1))
        got = float(re.search(r"\[rank 1\] step 1 loss (\S+)", sh_out + sh_err).group(1))
        self.assertAlmostEqual(got, want, places=4)

    def test_export_bert(self):
        self.needs("transformers")
        self.recipe("docs/export.md", "bert")  # prints True: ppc's output is the model's

    def test_export_timm(self):
        self.needs("timm")
        self.recipe("docs/export.md", "timm")  # prints True: ppc's output is the model's

    def test_generate_decoder(self):
        self.needs("transformers", "tokenizers")

        blocks = [b.text for b in marked_blocks("docs/generate.md") if b.name == "decoder"]
        self.assertEqual(sum(len(HUB_TOKENIZER.findall(t)) for t in blocks), 1,
                         "docs/generate.md: the tokenizer line to replace")
        session, ran = self.recipe("docs/generate.md", "decoder", OFFLINE_TOKENIZER_DEF,
                                   lambda code: HUB_TOKENIZER.sub(OFFLINE_TOKENIZER, code))
        # tokens.pt back to text: the last block printed each prompt's first row.
        decoded = list(ran.values())[-1][0]
        out, err, error = session.run(
            "import json\n"
            "got = torch.load('tokens.pt')\n"
            "want = [model.generate(p, max_new_tokens=32, do_sample=False)[:, p.shape[1]:]\n"
            "        for p in prompts]\n"
            "print(json.dumps([len(got), [torch.equal(g, w) for g, w in zip(got, want)],\n"
            "                  ''.join(tok.decode(t[0], skip_special_tokens=True) + '\\n'\n"
            "                          for t in got)]))\n", "test: tokens")
        self.assertIsNone(error, error)
        count, equal, text = json.loads(out)
        # "The tokens are those of transformers' own greedy generate()".
        self.assertEqual((count, equal), (2, [True, True]))
        self.assertEqual(decoded, text)


if __name__ == "__main__":
    main()
