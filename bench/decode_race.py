"""Benchmark 42 of bench/run.py: `ppc generate` against transformers' own generate().

Issue #42's race: the decode benchmark's LLaMA (8 layers, hidden 512, 26.7M
parameters, randomly initialised with torch.manual_seed(0), bench/
make_decoder.py's CONFIG) exported as transformers exports a prefill program
(TorchExportableModuleForDecoderOnlyLM, static cache of L = 320 positions,
input_ids [b, S] and cache_position [S] with S dynamic in 1..L), for a static
batch b of 4 and of 8. 16 prompts, two shapes: P = 64 with N = 64 new tokens,
and P = 256 with N = 32.

The peer is transformers' generate() on the same model (the same seed and
config, eager), greedy, with a static cache, in one process using both cores
(torch.set_num_threads(2)), as batch 16 in one call and as groups of 8 and of
4 (one call each, one after another); its model load and a warm-up call are
not timed, and its first token is the time of a call with max_new_tokens=1.
ppc runs 2 stages on 2 ranks (b = 8, M = 2 and b = 4, M = 4) and 1 stage on 1
rank (b = 8, M = 2, two threads), timed by its own total_ms (start-up, the
launch to the first step, is reported beside it), with the whole prompt in
one step (the default chunk) and, for the before/after figure, one token a
step (--prefill-chunk 1, what ppc did before chunked prefill). All in
interleaved rounds; tokens/s = 16 N over the call's time; every ppc run's
tokens are checked equal to each other's (the peer's eager attention rounds
differently from the exported program's, so its tokens are not compared
here; tests/cli/test_generate.py compares them on the test decoders).
"""
import json
import os
import statistics

# bench/run.py's module (its helpers and the globals its main() set); run.py
# assigns it before calling bench_decode_race().
R = None

CACHE = 320
PROMPTS = 16
SHAPES = ((64, 64), (256, 32))  # (P, N)
BATCHES = (4, 8)

# Writes the two programs (b = 4 and 8) and the prompts into OUTDIR, unless a
# stamp of this script says they are there.
MAKE = r"""
import hashlib, importlib.metadata, json, os, sys, torch
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import make_decoder
out, cache, batches, shapes, prompts = sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), \
    json.loads(sys.argv[5]), int(sys.argv[6])
tag = "%s-%s-%s" % (hashlib.sha256(sys.argv[7].encode()).hexdigest()[:16], torch.__version__,
                   importlib.metadata.version("transformers"))
stamp = os.path.join(out, "prefill.stamp")
if os.path.exists(stamp) and open(stamp).read() == tag:
    sys.exit(0)
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
torch.set_num_threads(2)
for b in batches:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**make_decoder.CONFIG)).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
        cache_config={"batch_size": b, "max_cache_len": cache})
    seq = torch.export.Dim("seq", min=1, max=cache)
    ep = TorchExportableModuleForDecoderOnlyLM(model, batch_size=b, max_cache_len=cache).export(
        input_ids=torch.zeros(b, 4, dtype=torch.long), cache_position=torch.arange(4),
        dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}}, strict=False)
    make_decoder.atomic(os.path.join(out, "prefill.b%d.pt2" % b), lambda p: torch.export.save(ep, p))
for p, n in shapes:
    ids = torch.randint(2, make_decoder.VOCAB, (prompts, p), generator=torch.Generator().manual_seed(1))
    make_decoder.atomic(os.path.join(out, "prefill.P%d.pt" % p), lambda f: torch.save(ids, f))
make_decoder.write_text(stamp, tag)
"""

# The peer: transformers' generate() on the eager model, per shape: batch 16,
# groups of 8 and of 4; prints {"P,N": {"16": s, "8": s, "4": s, "first16": s}}.
PEER = r"""
import json, os, sys, time, torch
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import make_decoder
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
out, cache, shapes = sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
torch.set_num_threads(2)
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(**make_decoder.CONFIG)).eval()

def generate(ids, n):
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
        cache_config={"batch_size": ids.shape[0], "max_cache_len": cache})
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                              min_new_tokens=n, do_sample=False, pad_token_id=0)

result = {}
for p, n in shapes:
    ids = torch.load(os.path.join(out, "prefill.P%d.pt" % p))
    generate(ids[:4], 2)  # warm-up
    times = {}
    for g in (16, 8, 4):
        start = time.perf_counter()
        for r in range(0, ids.shape[0], g):
            generate(ids[r:r + g], n)
        times[str(g)] = time.perf_counter() - start
    start = time.perf_counter()
    generate(ids, 1)
    times["first16"] = time.perf_counter() - start
    result["%d,%d" % (p, n)] = times
print("peer: " + json.dumps(result))
"""


def make_programs(cfg, batches=BATCHES, shapes=SHAPES):
    """Writes the prefill programs for `batches` and the prompts of `shapes`
    into R.MODELS (MAKE; kept while this file is unchanged); returns the
    PyTorch 2.x Python."""
    python = os.path.join(R.pytorch2_venv(cfg), "bin", "python")
    with open(os.path.abspath(__file__)) as f:
        source = f.read()
    R.sh([python, "-c", MAKE, R.ROOT, R.MODELS, CACHE, json.dumps(batches),
          json.dumps(shapes), PROMPTS, source], timeout=1200)
    return python


def bench_decode_race(cfg):
    python = make_programs(cfg)
    manifests = {}
    for b in BATCHES:
        for stages in (1, 2):
            manifests[(b, stages)] = R.split(os.path.join(R.MODELS, "prefill.b%d.pt2" % b),
                                             os.path.join(R.WORK, "prefill.b%d.%d" % (b, stages)),
                                             "--stages", stages)

    def ppc(b, stages, p, n, chunk):
        tag = "b%d.s%d.P%d.c%s" % (b, stages, p, chunk or "all")
        out, js = (os.path.join(R.WORK, "prefill.%s.%s" % (tag, x)) for x in ("out.pt", "json"))
        if os.path.exists(js):
            os.remove(js)
        extra = ["--prefill-chunk", chunk] if chunk else []
        threads = 2 if stages == 1 else 1
        s = R.sh(R.launch(stages, "generate", manifests[(b, stages)], "--prompt",
                          os.path.join(R.MODELS, "prefill.P%d.pt" % p), "--max-new-tokens", n,
                          "--output", out, "--threads", threads, "--stats-json", js, *extra),
                 timeout=1200)
        with open(js) as f:
            st = json.load(f)
        return {"tps": st["tokens_per_second"], "total_ms": st["total_ms"],
                "first_token_ms": st["first_token_ms"], "step_ms": st["step_ms"],
                "startup_s": s.wall_s - st["total_ms"] / 1000, "out": out}

    def peer():
        s = R.sh([python, "-c", PEER, R.ROOT, R.MODELS, CACHE, json.dumps(SHAPES)],
                 timeout=1200, env=dict(R.ENV, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2"))
        return json.loads(s.out.split("peer: ", 1)[1].splitlines()[0])

    configs = {"peer": peer}
    ppc_configs = [(8, 2, None), (4, 2, None), (8, 1, None), (8, 2, 1)]
    for p, n in SHAPES:
        for b, stages, chunk in ppc_configs:
            configs[(b, stages, p, chunk)] = (lambda b=b, s=stages, p=p, n=n, c=chunk:
                                              ppc(b, s, p, n, c))
    runs = R.rounds(configs, cfg.get("decode_race_reps", 3))
    rows = []
    for p, n in SHAPES:
        key = "%d,%d" % (p, n)
        peer_tps = {g: [PROMPTS * n / r[key][g] for r in runs["peer"]] for g in ("16", "8", "4")}
        best = max(peer_tps, key=lambda g: statistics.median(peer_tps[g]))
        peer_first = [r[key]["first16"] for r in runs["peer"]]
        outs = [x["out"] for c in ppc_configs for x in runs[(c[0], c[1], p, c[2])]]
        same = json.loads(R.sh([python, "-c", R.SAME_SCRIPT] +
                               [x for o in outs[1:] for x in (outs[0], o)]).out
                          .split("same: ", 1)[1].splitlines()[0])
        peer_note = "peer tokens/s: batch 16 %s, groups of 8 %s, of 4 %s" % tuple(
            R.fmt(statistics.median(peer_tps[g])) for g in ("16", "8", "4"))
        for b, stages, chunk in ppc_configs:
            mine = runs[(b, stages, p, chunk)]
            tps = R.stats([x["tps"] for x in mine])
            theirs = R.stats(peer_tps["16" if stages == 1 else best])
            ratio = tps["median"] / theirs["median"]
            first = statistics.median(x["first_token_ms"] for x in mine) / 1000
            target = (">= 1.0x" if stages == 1 else ">= 1.5x") if chunk is None else None
            met = (ratio >= (1.0 if stages == 1 else 1.5)) if chunk is None else None
            rows.append(R.row(
                "42 decode race", "LLaMA 8×512, 16 prompts, P=%d, N=%d: ppc %d stage%s / %d "
                "rank%s, b=%d, M=%d, prefill chunk %s" % (
                    p, n, stages, "s" if stages > 1 else "", stages, "s" if stages > 1 else "",
                    b, PROMPTS // b, chunk or "whole prompt"),
                tps, "tokens/s", "transformers generate(), static cache, %s" % (
                    "batch 16" if stages == 1 else "best of batch 16 / groups of 8 / of 4 (%s)"
                    % best), theirs, ratio, target, met,
                "first token %.3f s vs the peer's %.3f s (batch 16; %.2fx); ppc start-up %.2f s; "
                "%s; tokens of every ppc run %s" % (
                    first, statistics.median(peer_first),
                    first / statistics.median(peer_first),
                    statistics.median(x["startup_s"] for x in mine), peer_note,
                    "identical" if all(same) else "DIFFER"),
                runs={"ppc": mine}))
    return rows
