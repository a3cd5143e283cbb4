#!/usr/bin/python3
"""Tests `ppc generate`: pipelined decoding of exported decoders.

The models come from tests/models/make_decoder_models.py, run with the
PyTorch 2.x configuration's Python (torch 2.x and transformers:
common.pytorch2_python(), scripts/python.sh's choice) and cached in
PPC_BUILD_DIR/decoder-models: LLaMA, GPT-2 and Qwen2 decoders exported the
ExecuTorch way (static batch b = 2, cache length 32, 4 layers), with
reference tokens from the unsplit program run in Python (tests/cli/
decoders.py). Every test skips with the reason where ppc is built against
LibTorch 1.x (no .pt2) or no Python with transformers is found.

A ppc built against LibTorch 2.x must:
  - decode each decoder split into 2 stages on 2 ranks and 4 stages on 4,
    with M = 1, 2 and 4 groups (B = M * b prompt rows), giving the greedy
    reference token for token (GREEDY_RUNS); one run fills the cache to
    its last position (P + N = L) and one leaves --microbatches to its
    default (B / b); with fewer groups than stages it suggests enough in
    one note;
  - take the prompt in chunks (--prefill-chunk C) on the decoders exported
    with a dynamic sequence dimension (LLaMA and Qwen2), split into 2 and 4
    stages: C = 1, 3 (chunks of 3 and 2) and the default (the whole prompt)
    give the tokens of token-by-token feeding and of transformers' own
    greedy generate() (CHUNK_RUNS), and every rank's --stats says its time in
    prefill and in decode forwards and its bubble; a chunk the program
    cannot take is refused (ERR_CHUNK_*);
  - decode 10 prompts of different lengths and --max-new-tokens through 2
    slots (--slots 2, continuous batching), each giving the tokens it gives
    decoded alone by the unsplit program; the trace shows each later
    group's prefill starting while another group still decodes (no drain);
  - stop taking steps for a group whose rows all picked --eos-id: its
    later steps are SKIP, not F, in the trace on every stage (4 stages on 4
    ranks too, where the middle ranks neither read nor pick tokens), every
    rank counts them in skipped_forwards=, and the tokens are the greedy
    ones with eos after each row's first; --stream's lines stop at a row's
    first eos, marked "stop";
  - stream (--stream) each token as one JSON line as soon as it is picked,
    through a pipe while the job still runs, each row's lines in order,
    the tokens of --output;
  - sample (SAMPLING) the same tokens for a seed whatever M and the
    placement (4 stages on 2 ranks too), row by row, tokens that differ
    from the greedy ones and from another seed's;
  - take its boundary metadata from the meta cache on a second run
    (`meta=cache` in every rank's --stats line);
  - name a rank killed mid-decode (SIGKILL) within --timeout, as `ppc run`;
  - refuse each bad input with its one `error:` line (the launcher's
    summary names it) and write no output (the ERR_ constants).

Env: PPC, PPC_BUILD_DIR, PPC_TORCH_PYTHON (the PyTorch 2.x build).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, PPC, class_tmpdir, finish, free_port, launch,  # noqa: E402
                    libtorch_major, main, model_meta, pytorch2_python, rank_env, split, tmpdir)
import decoders  # noqa: E402
from trace_format import assert_valid_trace  # noqa: E402

# The exact one-line errors (without "error: "), as the launcher's summary
# "error: rank R exited with status 2: MESSAGE" repeats them.
# A float32 [2, 5] prompt.
ERR_PROMPT_DTYPE = "--prompt: expected int64 token ids, got float32"
# An int64 [5] prompt.
ERR_PROMPT_RANK = "--prompt: expected a [batch, length] tensor, got int64[5]"
# 3 rows for a program of batch 2, --microbatches not given.
ERR_PROMPT_ROWS = "--prompt: 3 rows are not a multiple of the program's batch size 2"
# --max-new-tokens 0.
ERR_NEW_TOKENS = "--max-new-tokens: 0 is not an integer in 1..65536 (see ppc generate --help)"
# P = 5 and N = 28 on a cache of 32 positions (P + N = L works: GREEDY_RUNS).
ERR_CACHE = ("the prompt's 5 tokens and 28 new ones need 33 positions; the program's "
             "cache holds 32")
# dec_stateless: the keyword inputs and logits, but no buffer written.
ERR_NO_STATE = ("the program has no state (no buffer it writes in place): ppc generate "
                "needs a program that keeps its cache, exported as docs/generate.md shows")
# --token-input tokens on dec_llama.
ERR_NO_INPUT = ("the program has no input named 'tokens' (--token-input) (its inputs: "
                "input_ids, cache_position)")
# --token-input a --position-input b on dec_llama: both at once, not one
# missing input a run.
ERR_INPUTS = ("the program has no input named 'a' (--token-input) or 'b' "
              "(--position-input) (its inputs: input_ids, cache_position)")
# Token id 128 (the vocabulary is 0..127) at row 1, position 3 of 8 rows.
ERR_VOCAB = ("--prompt: token id 128 at row 1, position 3 is outside the vocabulary "
             "(0..127)")

# --max-new-tokens 3,4 with one prompt.
ERR_COUNTS = "--max-new-tokens: 2 values for 1 prompt; give one, or one per prompt"
# --prefill-chunk 3 on dec_llama, exported for one token a step.
ERR_CHUNK_STATIC = ("a prefill chunk of 3 tokens needs a program whose 'input_ids' and "
                    "'cache_position' have a dynamic sequence dimension; this one takes "
                    "[2, 1] and [1], one token a step (export it with dynamic_shapes, "
                    "docs/generate.md)")
# --prefill-chunk 33 on dec_llama_chunked (S in 1..32).
ERR_CHUNK_LIMIT = "a prefill chunk of 33 tokens is more than the program takes in one step (32)"

# A Python with torch 2.x and transformers to export the decoders.
PT2_PYTHON = pytorch2_python()
DECODER_MODELS = os.path.join(BUILD, "decoder-models")
TIMEOUT = 60  # each rank's --timeout

# Greedy runs: (model, stages, ranks, groups M, new tokens N). N = 27 fills
# the cache (P + N = 32); its first 6 tokens are the reference's. The run
# marked DEFAULT_M leaves --microbatches out (B / b = M).
GREEDY_RUNS = [(name, stages, stages, m, n)
               for name in ("dec_llama", "dec_gpt2")
               for stages, m, n in ((2, 1, 6), (2, 2, 6), (2, 4, 6), (4, 4, 6))] + [
    ("dec_qwen2", 2, 2, 2, 27), ("dec_qwen2", 4, 4, 4, 6)]
# Chunked prefill: (model, stages, --prefill-chunk or None for the default),
# each on 2 ranks with M = 2 groups; P = 5, so C = 3 feeds chunks of 3 and 2.
CHUNK_RUNS = [(name, stages, chunk)
              for name in ("dec_llama_chunked", "dec_qwen2_chunked")
              for stages in (2, 4) for chunk in (1, 3, None)]
DEFAULT_M = ("dec_gpt2", 4, 4, 4, 6)
SAMPLING = ("--temperature", "0.8", "--top-k", "20", "--top-p", "0.9")
# Sampling runs of dec_llama: (stages, ranks, M); the 4 stages on 2 ranks
# run two each (a looped placement).
SAMPLING_RUNS = [(2, 2, 4), (2, 2, 1), (4, 4, 2), (4, 2, 4)]
STATS = re.compile(r"stats: rank=(\d+) meta=(\w+) ")
TIMES = re.compile(r" first_token_ms=([\d.]+) step_ms=([\d.]+) ")
SHARES = re.compile(r" total_ms=([\d.]+) .* prefill_ms=([\d.]+) decode_ms=([\d.]+) "
                    r"bubble=([\d.]+) ")
CAUSE = re.compile(r"^error: rank (\d+) exited with status 2: (.*)$", re.M)


def stream_lines(test, stdout, prefix):
    """The --stream lines of STDOUT (after PREFIX, the launcher's), each a
    JSON object of exactly its documented keys."""
    lines = []
    for line in stdout.splitlines():
        if line.startswith(prefix + "{"):
            t = json.loads(line[len(prefix):])
            keys = {"request", "row", "index", "token"}
            test.assertIn(set(t), (keys, keys | {"finish_reason"}), line)
            lines.append(t)
    return lines


class GenerateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.splits = {}
        cls.models = None

    def setUp(self):
        self.tmp = tmpdir(self)
        major = libtorch_major()
        if major < 2:
            self.skipTest("needs a ppc built against LibTorch 2.x (decoders are .pt2 "
                          "programs); this one has LibTorch %d" % major)
        if not os.access(PT2_PYTHON, os.X_OK):
            self.skipTest("no PyTorch 2.x to export the decoders: %s is missing "
                          "(scripts/python.sh build makes it)" % PT2_PYTHON)
        if not decoders.has_transformers(PT2_PYTHON):
            self.skipTest("%s has no transformers to export the decoders (the venv of "
                          "scripts/python.sh has it)" % PT2_PYTHON)
        if type(self).models is None:
            r = decoders.make_decoder_models(DECODER_MODELS, PT2_PYTHON)
            self.assertEqual(r.returncode, 0, "make_decoder_models.py:\n" + r.stdout + r.stderr)
            type(self).models = DECODER_MODELS

    # -- helpers ---------------------------------------------------------

    def decoder_split(self, name, stages):
        """The manifest of NAME split into STAGES stages, split once per
        test class."""
        key = (name, stages)
        if key not in self.splits:
            out = os.path.join(class_tmpdir(type(self)), "%s_%d" % key)
            self.splits[key] = split(decoders.model_file(self.models, name), out, "--stages",
                                     stages).manifest
        return self.splits[key]

    def prompt_file(self, name, rows):
        """A prompt file of the first ROWS rows of NAME.prompt.pt."""
        path = os.path.join(self.tmp, "%s.%d.prompt.pt" % (name, rows))
        if not os.path.exists(path):
            decoders.write_prompt(path, self.models, name, rows)
        return path

    def run_generate(self, manifest, ranks, prompt, new_tokens, *extra):
        """`ppc generate MANIFEST --prompt PROMPT --max-new-tokens N --stats`
        on RANKS ranks; checks it succeeded and every rank printed its
        stats. Returns (tokens, {rank: meta source}, process)."""
        out = os.path.join(self.tmp, "tokens.pt")
        if os.path.exists(out):
            os.remove(out)
        r = launch(ranks, "generate", manifest, "--prompt", prompt, "--max-new-tokens",
                   new_tokens, "--output", out, "--stats", "--timeout", TIMEOUT, *extra,
                   timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        sources = {int(m.group(1)): m.group(2) for m in STATS.finditer(r.stdout)}
        self.assertEqual(sorted(sources), list(range(ranks)), r.stdout)
        # Every rank times the first new token reaching it, and its steps
        # when there is more than one (docs/generate.md).
        for line in r.stdout.splitlines():
            m = TIMES.search(line)
            if m:
                self.assertGreater(float(m.group(1)), 0, line)
                if new_tokens > 2:
                    self.assertGreater(float(m.group(2)), 0, line)
        tokens = torch.load(out)
        rows = torch.load(prompt).shape[0]
        self.assertEqual((tokens.dtype, tuple(tokens.shape)), (torch.int64, (rows, new_tokens)))
        return tokens, sources, r

    def assert_tokens(self, want, got, what):
        self.assertTrue(torch.equal(want, got), "%s:\nwant %s\ngot  %s" % (what, want, got))

    def mtimes(self, *dirs):
        return {d: sorted((f, os.stat(os.path.join(d, f)).st_mtime_ns) for f in os.listdir(d))
                for d in dirs}

    def expect_generate_error(self, manifest, prompt, message, *extra, new_tokens=6):
        """A 2-rank `ppc generate` that fails with exit status 2: the
        launcher names one rank's error, MESSAGE; every rank's error line is
        MESSAGE or a consequence of another rank's; nothing is written (no
        output, no file beside the manifest or the prompt)."""
        out = os.path.join(self.tmp, "bad-tokens.pt")
        dirs = (os.path.dirname(manifest), self.tmp)
        before = self.mtimes(*dirs)
        r = launch(2, "generate", manifest, "--prompt", prompt, "--max-new-tokens", new_tokens,
                   "--output", out, "--timeout", TIMEOUT, *extra, timeout=120)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual([m.group(2) for m in CAUSE.finditer(r.stderr)], [message], r.stderr)
        for line in r.stderr.splitlines():
            m = re.match(r"^\[rank \d+\] error: (.*)$", line)
            if m and m.group(1) != message:
                self.assertRegex(m.group(1), r"^lost rank \d+ \(", r.stderr)
        self.assertNotIn("stats:", r.stdout)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(self.mtimes(*dirs), before)

    # -- greedy --------------------------------------------------------------

    def test_greedy_matches_python(self):
        for run in GREEDY_RUNS:
            name, stages, ranks, m, n = run
            with self.subTest(model=name, stages=stages, ranks=ranks, microbatches=m, tokens=n):
                meta = model_meta(name, self.models)
                rows = m * meta["batch"]
                extra = () if run == DEFAULT_M else ("--microbatches", m)
                tokens, _, r = self.run_generate(self.decoder_split(name, stages), ranks,
                                                 self.prompt_file(name, rows), n, *extra)
                # Fewer groups than stages: the output rank suggests more.
                note = ("note: %d group%s of sequences in flight on %d stages: each stage "
                        "idles while the others work; at least %d groups (%d prompt rows of "
                        "the program's batch %d) keep every stage busy" % (
                            m, "" if m == 1 else "s", stages, stages, stages * meta["batch"],
                            meta["batch"]))
                self.assertEqual(note in r.stderr, m < stages, r.stderr)
                self.assertLessEqual(meta["new_tokens"], n)
                self.assert_tokens(decoders.greedy(self.models, name, rows),
                                   tokens[:, :meta["new_tokens"]], "greedy tokens")
                # The state matters: the tokens of a decoder that loses its
                # cache every step differ.
                self.assertFalse(torch.equal(decoders.reset_state_tokens(self.models, name, rows),
                                             tokens[:, :meta["new_tokens"]]))

    def test_chunked_prefill_matches_token_by_token_and_transformers(self):
        for name, stages, chunk in CHUNK_RUNS:
            with self.subTest(model=name, stages=stages, chunk=chunk):
                extra = () if chunk is None else ("--prefill-chunk", chunk)
                tokens, _, r = self.run_generate(self.decoder_split(name, stages), 2,
                                                 self.prompt_file(name, 4), 6, "--microbatches", 2,
                                                 *extra)
                self.assert_tokens(decoders.greedy(self.models, name, 4), tokens,
                                   "tokens of token-by-token feeding")
                self.assert_tokens(decoders.transformers_greedy_tokens(self.models, name, 4),
                                   tokens,
                                   "tokens of transformers' generate()")
                # The default takes the whole prompt (P = 5) in one step.
                self.assertIn(" prompt_tokens=5 prefill_chunk=%d " % (chunk or 5), r.stdout)
                # Every rank runs prompt chunks and decode steps, and says
                # how much of the run was neither (the bubble).
                shares = [tuple(map(float, m.groups())) for m in SHARES.finditer(r.stdout)]
                self.assertEqual(len(shares), 2, r.stdout)
                for total, prefill, decode, bubble in shares:
                    self.assertGreater(prefill, 0, r.stdout)
                    self.assertGreater(decode, 0, r.stdout)
                    self.assertLess(prefill + decode, total, r.stdout)
                    self.assertTrue(0 <= bubble < 1, r.stdout)

    def test_slots_decode_each_prompt_as_alone_without_draining(self):
        name = "dec_llama_chunked"
        lengths, counts = [1, 3, 5, 7, 2, 9, 4, 6, 8, 5], [6, 3, 8, 2, 5, 4, 7, 1, 3, 6]
        g = torch.Generator().manual_seed(3)
        prompts = [torch.randint(0, 128, (2, p), generator=g) for p in lengths]
        path = os.path.join(self.tmp, "ten-prompts.pt")
        torch.save(prompts, path)
        out, trace = (os.path.join(self.tmp, f) for f in ("tokens.pt", "trace.json"))
        r = launch(2, "generate", self.decoder_split(name, 2), "--prompt", path, "--max-new-tokens",
                   ",".join(map(str, counts)), "--slots", 2, "--prefill-chunk", 3,
                   "--output", out, "--trace", trace, "--stats", "--timeout", TIMEOUT,
                   timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(" groups=10 slots=2 ", r.stdout)
        tokens = torch.load(out)
        with warnings.catch_warnings():  # unlifting's notes on the cache's constants
            warnings.simplefilter("ignore")
            program = torch.export.load(decoders.model_file(self.models, name)).module()
        initial = {k: v.clone() for k, v in program.named_buffers()}
        for i, (prompt, n) in enumerate(zip(prompts, counts)):
            with torch.no_grad():
                for k, v in program.named_buffers():
                    v.copy_(initial[k])
                want, ids, at = [], prompt, 0
                for _ in range(n):
                    logits = program(input_ids=ids, cache_position=torch.arange(
                        at, at + ids.shape[1]))[:, -1]
                    at += ids.shape[1]
                    ids = logits.argmax(-1, keepdim=True)
                    want.append(ids)
            self.assert_tokens(torch.cat(want, 1), tokens[i], "prompt %d alone" % i)
        # No drain: every group after the first two starts its prefill on
        # stage 0 while another group's forwards are still running.
        events = assert_valid_trace(self, trace)
        events = events["traceEvents"] if isinstance(events, dict) else events
        spans = {}
        for e in events:
            if e.get("name") == "F":
                group = e["args"]["group"]
                first, last = spans.get(group, (e["ts"], e["ts"]))
                spans[group] = (min(first, e["ts"]), max(last, e["ts"]))
        self.assertEqual(sorted(spans), list(range(10)))
        for j in range(2, 10):
            start = spans[j][0]
            self.assertTrue(any(spans[k][0] < start < spans[k][1] for k in spans if k != j),
                            "group %d started after every other group stopped: %s" % (j, spans))

    def test_groups_that_picked_eos_stop_taking_steps(self):
        # dec_gpt2's greedy tokens of 8 rows (4 groups of 2) with --eos-id 21:
        # group 2's rows both pick 21 first, group 0's by its 4th token;
        # groups 1 and 3 always have a row that has not. On 2 stages on 2
        # ranks, and on 4 stages on 4 ranks, where ranks 1 and 2 neither read
        # the tokens nor pick them: every rank skips an ended group's steps.
        name, eos, n = "dec_gpt2", 21, 6
        greedy = decoders.greedy(self.models, name, 8)
        prompt = self.prompt_file(name, 8)
        steps = torch.load(prompt).shape[1]  # one prompt token a step
        # A row's tokens after its first eos are eos.
        seen = torch.cumsum((greedy == eos).int(), 1) > 0
        want = torch.where(seen, torch.full_like(greedy, eos), greedy)
        # Per group, the step from which it is skipped: after the pick of
        # its last row's first eos (token i is picked at step P - 1 + i).
        ended = {}
        for j in range(4):
            rows = seen[2 * j:2 * j + 2]
            if bool(rows[:, -2].all()):
                ended[j] = steps + max(int(row.nonzero()[0]) for row in rows)
        self.assertEqual(ended, {0: steps + 3, 2: steps})
        skipped = sum(steps + n - 1 - s for s in ended.values())
        for stages in (2, 4):
            with self.subTest(stages=stages):
                trace = os.path.join(self.tmp, "trace-%d.json" % stages)
                tokens, _, r = self.run_generate(self.decoder_split(name, stages), stages, prompt,
                                                 n,
                                             "--microbatches", 4, "--eos-id", eos,
                                             "--trace", trace, "--stream")
                self.assert_tokens(want, tokens, "tokens with --eos-id %d" % eos)
                # --stream: each row's tokens up to its first eos, that one
                # marked "stop", a row without eos "length" at its last.
                lines = stream_lines(self, r.stdout, "[rank %d] " % (stages - 1))
                for row in range(8):
                    got = [t for t in lines if t["row"] == row]
                    first = seen[row].nonzero()
                    count = int(first[0]) + 1 if len(first) else n
                    self.assertEqual([t["index"] for t in got], list(range(count)), got)
                    self.assertEqual([t["token"] for t in got], want[row, :count].tolist())
                    self.assertEqual([t.get("finish_reason") for t in got],
                                     [None] * (count - 1) +
                                     ["stop" if len(first) else "length"], got)
                self.assertEqual(re.findall(r" skipped_forwards=(\d+) ", r.stdout),
                                 [str(skipped)] * stages, r.stdout)
                events = assert_valid_trace(self, trace)
                events = events["traceEvents"] if isinstance(events, dict) else events
                ran, skips = {}, {}
                for e in events:
                    if e.get("name") in ("F", "SKIP"):
                        a = e["args"]
                        runs = ran if e["name"] == "F" else skips
                        runs.setdefault((a["stage"], a["group"]), []).append(a["step"])
                for stage in range(stages):
                    for j in range(4):
                        last = ended.get(j, steps + n - 1)
                        self.assertEqual(ran[(stage, j)], list(range(last)), (stage, j))
                        self.assertEqual(skips.get((stage, j), []),
                                         list(range(last, steps + n - 1)), (stage, j))

    def test_stream_prints_each_token_as_it_is_picked(self):
        # A decode of 2 prompts (2 groups of 2 rows each) for 120 tokens on 2
        # ranks: the last stage's rank prints each token's JSON line at once
        # (the first arrives through the pipe while the job still runs),
        # every row's lines in order, and they are --output's tokens.
        name, n = "dec_llama_long", 120
        prompt = torch.load(self.prompt_file(name, 8))
        both = os.path.join(self.tmp, "two-prompts.pt")
        torch.save([prompt[:4].clone(), prompt[4:].clone()], both)
        out = os.path.join(self.tmp, "tokens.pt")
        args = ["generate", self.decoder_split(name, 2), "--prompt", both, "--max-new-tokens", n,
                "--output", out, "--stream", "--quiet", "--timeout", TIMEOUT]
        port = free_port()
        procs = [subprocess.Popen([PPC, *map(str, args)], env=rank_env(rank, 2, port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for rank in range(2)]
        self.addCleanup(lambda: [p.kill() for p in procs if p.poll() is None])
        first = procs[1].stdout.readline()
        running = procs[1].poll() is None and not os.path.exists(out)
        rest = procs[1].stdout.read()
        results = finish(procs, timeout=120)
        for code, _, err in results:
            self.assertEqual(code, 0, err)
        self.assertTrue(first.startswith("{"), first + rest)
        self.assertTrue(running, "the first token's line came after the decode ended")
        self.assertEqual(results[0][1], "", "rank 0 prints no tokens")
        lines = stream_lines(self, first + rest, "")
        tokens = torch.load(out)
        for request in range(2):
            for row in range(4):
                got = [t for t in lines if (t["request"], t["row"]) == (request, row)]
                self.assertEqual([t["index"] for t in got], list(range(n)))
                self.assertEqual([t["token"] for t in got], tokens[request][row].tolist())
                self.assertEqual(got[-1].get("finish_reason"), "length")

    # -- sampling ------------------------------------------------------------

    def sample(self, stages, ranks, m, seed=7):
        name = "dec_llama"
        rows = m * model_meta(name, self.models)["batch"]
        tokens, _, _ = self.run_generate(self.decoder_split(name, stages), ranks,
                                         self.prompt_file(name, rows), 6,
                                     "--microbatches", m, *SAMPLING, "--seed", seed)
        self.assertTrue(bool(((tokens >= 0) & (tokens < 128)).all()), tokens)
        return tokens

    def test_sampling_is_the_same_for_every_placement(self):
        runs = {run: self.sample(*run) for run in SAMPLING_RUNS}
        full = runs[SAMPLING_RUNS[0]]  # all 8 rows
        for run, tokens in runs.items():
            # Row r's tokens depend only on the seed, r and its logits.
            self.assert_tokens(full[:tokens.shape[0]], tokens,
                               "sampled tokens, (stages, ranks, M) = %s" % (run,))
        self.assertFalse(torch.equal(full, decoders.greedy(self.models, "dec_llama", 8)),
                         "sampling gave the greedy tokens")
        self.assertFalse(torch.equal(full, self.sample(2, 2, 4, seed=8)),
                         "seeds 7 and 8 gave the same tokens")

    # -- meta cache ----------------------------------------------------------

    def test_second_run_uses_meta_cache(self):
        name = "dec_gpt2"
        manifest = split(decoders.model_file(self.models, name), os.path.join(self.tmp, "split"),
                         "--stages", 2).manifest
        prompt = self.prompt_file(name, 4)
        want = decoders.greedy(self.models, name, 4)
        first, sources, _ = self.run_generate(manifest, 2, prompt, 6, "--microbatches", 2)
        self.assertEqual(set(sources.values()), {"inferred"})
        trace = os.path.join(self.tmp, "trace.json")
        second, sources, r = self.run_generate(manifest, 2, prompt, 6, "--microbatches", 2,
                                               "--trace", trace)
        self.assertEqual(set(sources.values()), {"cache"}, r.stdout)
        self.assert_decode_trace(assert_valid_trace(self, trace), groups=2, steps=5 + 6 - 1)
        self.assertNotIn("warning", r.stderr)
        self.assert_tokens(want, first, "first run")
        self.assert_tokens(want, second, "second run")

    def assert_decode_trace(self, trace, groups, steps):
        """Each group's steps run on each stage in order, and every step after
        the prompt's last reads tokens the last stage's rank returned."""
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        forwards = {}
        for e in events:
            if e.get("name") == "F":
                a = e["args"]
                self.assertEqual(a["microbatch"], a["step"] * groups + a["group"], a)
                forwards.setdefault((e["pid"], a["stage"], a["group"]), []).append(a["step"])
        self.assertEqual(len(forwards), 2 * groups)
        for key, order in forwards.items():
            self.assertEqual(order, list(range(steps)), key)
        # Steps P-1 .. S-2 return their tokens: (N - 1) per group.
        returned = [e for e in events if e.get("name") == "RECV_TOK"]
        self.assertEqual(len(returned), groups * 5)
        self.assertTrue(all(e["pid"] == 0 for e in returned))

    def test_list_of_prompts_decodes_together(self):
        # Two prompts in one file are submitted together and flushed as one
        # decode of all their groups; --output is the list of their tokens.
        name = "dec_llama"
        prompt = torch.load(self.prompt_file(name, 8))
        both = os.path.join(self.tmp, "two-prompts.pt")
        torch.save([prompt[:4].clone(), prompt[4:].clone()], both)
        out = os.path.join(self.tmp, "tokens.pt")
        r = launch(2, "generate", self.decoder_split(name, 2), "--prompt", both,
                   "--max-new-tokens", 6,
                   "--output", out, "--stats", "--timeout", TIMEOUT, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("groups=4 ", r.stdout)
        tokens = torch.load(out)
        want = decoders.greedy(self.models, name, 8)
        self.assertEqual(len(tokens), 2)
        self.assert_tokens(want[:4], tokens[0], "first prompt")
        self.assert_tokens(want[4:], tokens[1], "second prompt")

    def test_generate_example_prints_the_greedy_tokens(self):
        # examples/generate.cpp on the public API prints each token as it is
        # picked and then each row's tokens on the last stage's rank: the
        # greedy reference. Its tokens come from GenerateOptions::onToken
        # with generate(), and from the request's own callback with submit().
        program = os.path.join(BUILD, "bin", "generate")
        if not os.access(program, os.X_OK):
            self.skipTest("examples are not built here (%s)" % program)
        name = "dec_llama"
        want = decoders.greedy(self.models, name, 4)
        for mode in ((), ("submit",)):
            with self.subTest(mode=mode):
                r = launch(2, self.decoder_split(name, 2), self.prompt_file(name, 4), 6, *mode,
                           program=program, timeout=300)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                lines = [l for l in r.stdout.splitlines()
                         if " row " in l or l.startswith("row ")]
                self.assertEqual(lines, ["[rank 1] row %d: %s" % (
                    i, " ".join(map(str, row.tolist()))) for i, row in enumerate(want)],
                    r.stdout)
                # Every token was heard as it was picked, before the rows
                # were printed, each row's in order.
                picked = [tuple(map(int, l.split()[3:])) for l in r.stdout.splitlines()
                          if l.startswith("[rank 1] picked ")]
                self.assertLess(r.stdout.rindex("] picked "), r.stdout.index("] row 0:"))
                for row in range(4):
                    self.assertEqual([(i, t) for ro, i, t in picked if ro == row],
                                     list(enumerate(want[row].tolist())), r.stdout)

    # -- failures ------------------------------------------------------------

    def test_killed_rank_is_named(self):
        # A long decode (500 tokens of 4 groups on a cache of 512) with
        # rank 1, the last stage's, killed once it has picked the first
        # tokens: rank 0 names it within --timeout.
        manifest = self.decoder_split("dec_llama_long", 2)
        out = os.path.join(self.tmp, "tokens.pt")
        args = ["generate", manifest, "--prompt", self.prompt_file("dec_llama_long", 8),
                "--max-new-tokens", 500, "--output", out, "--microbatches", 4, "--progress",
                "--no-meta-cache", "--timeout", 20]
        port = free_port()
        procs = [subprocess.Popen([PPC, *map(str, args)], env=rank_env(rank, 2, port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for rank in range(2)]
        self.addCleanup(lambda: [p.kill() for p in procs if p.poll() is None])
        seen = []
        for line in procs[1].stderr:  # rank 1 reports progress from its first pick
            seen.append(line)
            if line.startswith("progress: "):
                break
        self.assertTrue(seen and seen[-1].startswith("progress: "), "".join(seen))
        procs[1].send_signal(signal.SIGKILL)
        start = time.monotonic()
        code, _, err = finish(procs[:1], timeout=30)[0]
        finish(procs[1:])
        self.assertNotEqual(code, 0, err)
        self.assertLess(time.monotonic() - start, 25)
        errors = [l for l in err.splitlines() if l.startswith("error: ")]
        self.assertEqual(len(errors), 1, err)
        self.assertTrue(errors[0].startswith("error: lost rank 1 ("), err)
        self.assertFalse(os.path.exists(out))

    def test_bad_prompts_are_refused_with_one_error(self):
        manifest = self.decoder_split("dec_llama", 2)
        good = self.prompt_file("dec_llama", 8)
        prompts = {}
        for what, tensor in (("dtype", torch.zeros(2, 5)),
                             ("rank", torch.zeros(5, dtype=torch.int64)),
                             ("rows", torch.load(good)[:3].clone())):
            prompts[what] = os.path.join(self.tmp, "bad-%s.pt" % what)
            torch.save(tensor, prompts[what])
        vocab = torch.load(good)
        vocab[1, 3] = 128
        prompts["vocab"] = os.path.join(self.tmp, "bad-vocab.pt")
        torch.save(vocab, prompts["vocab"])
        cases = [
            ("dtype", manifest, prompts["dtype"], ERR_PROMPT_DTYPE, ()),
            ("rank", manifest, prompts["rank"], ERR_PROMPT_RANK, ()),
            ("rows", manifest, prompts["rows"], ERR_PROMPT_ROWS, ()),
            ("new tokens", manifest, good, ERR_NEW_TOKENS, (), 0),
            ("cache", manifest, good, ERR_CACHE, (), 28),
            ("no state", self.decoder_split("dec_stateless", 2), self.prompt_file("dec_stateless",
                                                                                  8),
             ERR_NO_STATE, ()),
            ("no input", manifest, good, ERR_NO_INPUT, ("--token-input", "tokens")),
            ("no inputs", manifest, good, ERR_INPUTS,
             ("--token-input", "a", "--position-input", "b")),
            # The real reason first: a program without a cache is no decoder.
            ("no state, no input", self.decoder_split("dec_stateless", 2),
             self.prompt_file("dec_stateless", 8), ERR_NO_STATE, ("--token-input", "tokens")),
            ("vocabulary", manifest, prompts["vocab"], ERR_VOCAB, ()),
            ("counts", manifest, good, ERR_COUNTS, (), "3,4"),
            ("chunk, static", manifest, good, ERR_CHUNK_STATIC, ("--prefill-chunk", 3)),
            ("chunk, limit", self.decoder_split("dec_llama_chunked", 2),
             self.prompt_file("dec_llama_chunked", 8), ERR_CHUNK_LIMIT, ("--prefill-chunk", 33)),
        ]
        for what, m, prompt, message, extra, *n in cases:
            with self.subTest(what):
                self.expect_generate_error(m, prompt, message, *extra, new_tokens=n[0] if n else 6)

    def test_a_manifest_that_hides_state_is_refused(self):
        # Issue #45, class 4: without the check, a manifest without a stage's
        # state (or half of it) decoded with every group sharing one cache,
        # exit 0 and wrong tokens.
        manifest = self.decoder_split("dec_llama", 2)
        with open(manifest) as f:
            whole = json.load(f)
        listed = [t["name"] for t in whole["stages"][1]["state"]]
        quoted = ", ".join("'%s'" % n for n in sorted(listed))
        for what, keep in (("all of it", []), ("half of it", whole["stages"][1]["state"][::2])):
            with self.subTest(what):
                edited = json.loads(json.dumps(whole))
                edited["stages"][1]["state"] = keep
                if not keep:
                    del edited["stages"][1]["state"]
                folder = os.path.join(self.tmp, "hidden")
                shutil.rmtree(folder, ignore_errors=True)
                shutil.copytree(os.path.dirname(manifest), folder)
                path = os.path.join(folder, "manifest.json")
                with open(path, "w") as f:
                    json.dump(edited, f)
                shown = ", ".join("'%s'" % t["name"] for t in
                                  sorted(keep, key=lambda t: t["name"])) or "none"
                message = ("stage 1's program writes %s in place, but the manifest lists its "
                           "state as %s: the manifest does not describe this stage (split "
                           "again)" % (quoted, shown))
                self.expect_generate_error(path, self.prompt_file("dec_llama", 4), message,
                                           "--no-meta-cache")


if __name__ == "__main__":
    main()
