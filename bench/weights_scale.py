#!/usr/bin/env python3
"""Memory at scale (issue #41): programs exported without weights, weights from
safetensors shards, no process holding the whole model.

Usage (the PyTorch 2.x build's Python, with transformers and accelerate;
`scripts/python.sh build` prints it; ppc built against that torch):
  PYTHON bench/weights_scale.py [--ppc build/bin/ppc] [--work DIR] [--skip-7b]
      [--json OUT.json]

Two parts, each process's peak resident memory as /usr/bin/time -v measures it
(ru_maxrss; for ranks, the peak_rss_mb of their --stats lines, the same
getrusage figure):

1. 16 x Linear(4096) fp32 (1 GiB of weights), 4 stages on 4 ranks:
   - `ppc split` of the program exported with its weights (the archive
     mapped, each weight viewed in place and paged out once its stage file
     has it), of the program exported on the meta device (a few kilobytes),
     and of a 4 x Linear(4) program (LibTorch's own baseline);
   - `ppc run` of the meta program's stages with --weights (a .safetensors
     file of the real weights) on 4 ranks: each rank's peak and the bytes it
     read, against a rank of a tiny model (LibTorch's own baseline); and of
     the weight-carrying split's stages, each rank mapping its stage file.
2. A LLaMA-7B-shaped decoder (hidden 4096, 32 layers, MLP 11008, vocabulary
   32000, 6.7B parameters) in bf16: random weights written shard by shard
   (2 GB shards, one shard in memory at a time, as save_pretrained names
   them), the model built under init_empty_weights and exported by
   docs/generate.md's recipe (b = 1, cache 64), split into 4 stages, and
   8 new tokens decoded for a batch of 1 on 4 ranks with --weights: each
   rank's peak, their sum, and tokens/s.
Each thread pool is bounded to one thread per rank (--threads 1,
OMP/OPENBLAS/MKL_NUM_THREADS=1).
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
STATS = re.compile(r"stats: rank=(\d+) .*")
GIB = 1 << 30


def peak_of(cmd):
    """(wall seconds, peak RSS bytes, output) of one process, the peak as
    /usr/bin/time measures it (its own fork's rusage from wait4 would count the
    pages of this Python process, which the child shares until it execs)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as peak:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", peak.name, *cmd],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV,
                              text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd),
                                               proc.stdout[-3000:]))
        return wall, int(peak.read().split()[-1]) * 1024, proc.stdout


def rank_stats(out):
    """{rank: {key: value}} of the --stats lines."""
    ranks = {}
    for m in STATS.finditer(out):
        fields = dict(kv.split("=", 1) for kv in m.group(0).split()[1:] if "=" in kv)
        ranks[int(m.group(1))] = fields
    return ranks


def launch(ppc, nproc, *args):
    return [ppc, "launch", "--nproc-per-node", str(nproc), "--master-port", "0", "--",
            ppc, *map(str, args)]


class Wide(torch.nn.Module):
    def __init__(self, layers=16, width=4096):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width, bias=False)
                                          for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def part_wide(ppc, work):
    from safetensors.torch import save_file
    torch.manual_seed(0)
    x = torch.randn(8, 4096)
    batch = torch.export.Dim("batch", min=1)
    full = Wide()
    torch.export.save(torch.export.export(full, (x,), dynamic_shapes=({0: batch},)),
                      os.path.join(work, "wide.pt2"))
    save_file({k: v.contiguous() for k, v in full.state_dict().items()},
              os.path.join(work, "wide.safetensors"))
    torch.save(x, os.path.join(work, "x.pt"))
    del full
    with torch.device("meta"):
        empty = Wide()
    torch.export.save(torch.export.export(empty, (x.to("meta"),), dynamic_shapes=({0: batch},)),
                      os.path.join(work, "wide_meta.pt2"))
    tiny = Wide(layers=4, width=4)
    torch.export.save(torch.export.export(tiny, (torch.randn(8, 4),),
                                          dynamic_shapes=({0: batch},)),
                      os.path.join(work, "tiny.pt2"))
    torch.save(torch.randn(8, 4), os.path.join(work, "tiny_x.pt"))

    rows = {}
    for name in ("wide", "wide_meta"):
        out = os.path.join(work, name + ".split")
        shutil.rmtree(out, ignore_errors=True)
        wall, peak, _ = peak_of([ppc, "split", os.path.join(work, name + ".pt2"), "-o", out,
                                 "--stages", "4"])
        rows["split " + name] = {"seconds": wall, "peak_bytes": peak}
    shutil.rmtree(os.path.join(work, "tiny.split"), ignore_errors=True)
    wall, peak, _ = peak_of([ppc, "split", os.path.join(work, "tiny.pt2"), "-o",
                             os.path.join(work, "tiny.split"), "--stages", "4"])
    rows["split tiny (LibTorch's baseline)"] = {"seconds": wall, "peak_bytes": peak}
    _, _, out = peak_of(launch(ppc, 4, "run", os.path.join(work, "tiny.split", "manifest.json"),
                               "--input", os.path.join(work, "tiny_x.pt"), "--output",
                               os.path.join(work, "tiny.out.pt"), "--stats", "--threads", 1))
    baseline = {r: float(s["peak_rss_mb"]) for r, s in rank_stats(out).items()}
    _, _, out = peak_of(launch(ppc, 4, "run",
                               os.path.join(work, "wide_meta.split", "manifest.json"),
                               "--input", os.path.join(work, "x.pt"), "--output",
                               os.path.join(work, "wide.out.pt"), "--stats", "--threads", 1,
                               "--weights", os.path.join(work, "wide.safetensors")))
    ranks = {r: {"peak_mb": float(s["peak_rss_mb"]), "weight_bytes": int(s["weight_bytes"]),
                 "baseline_mb": baseline[r]} for r, s in rank_stats(out).items()}
    rows["run wide_meta --weights, 4 ranks"] = ranks
    # The stages of the program exported with its weights carry them: each
    # rank maps its stage file and views the weights in place.
    _, _, out = peak_of(launch(ppc, 4, "run", os.path.join(work, "wide.split", "manifest.json"),
                               "--input", os.path.join(work, "x.pt"), "--output",
                               os.path.join(work, "wide.stages.out.pt"), "--stats",
                               "--threads", 1))
    rows["run wide (stage files with weights), 4 ranks"] = {
        r: {"peak_mb": float(s["peak_rss_mb"]), "baseline_mb": baseline[r]}
        for r, s in rank_stats(out).items()}
    got, want = torch.load(os.path.join(work, "wide.out.pt")), None
    full = torch.export.load(os.path.join(work, "wide.pt2")).module()
    with torch.no_grad():
        want = full(x)
    rows["run matches the program"] = bool(torch.allclose(got, want, rtol=1e-4, atol=1e-5))
    got = torch.load(os.path.join(work, "wide.stages.out.pt"))
    rows["run of the weight-carrying stages matches"] = bool(
        torch.allclose(got, want, rtol=1e-4, atol=1e-5))
    return rows


LLAMA_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                max_position_embeddings=2048, tie_word_embeddings=False)


def write_shards(config, out, shard_bytes=2_000_000_000):
    """Random bf16 weights for every parameter of the model built from
    `config`, shard by shard, with model.safetensors.index.json; the model
    itself is never built with data."""
    from accelerate import init_empty_weights
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM
    with init_empty_weights():
        shapes = [(n, tuple(p.shape)) for n, p in LlamaForCausalLM(config).named_parameters()]
    os.makedirs(out, exist_ok=True)
    groups, current, size = [], [], 0
    for name, shape in shapes:
        n = 2
        for d in shape:
            n *= d
        if current and size + n > shard_bytes:
            groups.append(current)
            current, size = [], 0
        current.append((name, shape))
        size += n
    groups.append(current)
    weight_map, total = {}, 0
    gen = torch.Generator().manual_seed(0)
    for i, group in enumerate(groups):
        file = "model-%05d-of-%05d.safetensors" % (i + 1, len(groups))
        tensors = {}
        for name, shape in group:
            t = torch.empty(shape, dtype=torch.bfloat16)
            if name.endswith("norm.weight"):
                t.fill_(1)
            else:
                t.normal_(0, 0.02, generator=gen)
            tensors[name] = t
            weight_map[name] = file
            total += t.numel() * 2
        save_file(tensors, os.path.join(out, file), metadata={"format": "pt"})
        del tensors
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config.save_pretrained(out)
    return total


def export_meta(config, path, cache=64):
    from accelerate import init_empty_weights
    from transformers import GenerationConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
    with init_empty_weights():
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": 1, "max_cache_len": cache})
    program = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=cache).export(
        input_ids=torch.zeros(1, 1, dtype=torch.long), cache_position=torch.tensor([0]))
    torch.export.save(program, path)


def part_7b(ppc, work):
    from transformers import LlamaConfig
    config = LlamaConfig(**LLAMA_7B)
    shards = os.path.join(work, "llama7b")
    rows = {}
    start = time.perf_counter()
    if not os.path.exists(os.path.join(shards, "model.safetensors.index.json")):
        usage0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        total = write_shards(config, shards)
        rows["shards written"] = {"bytes": total, "seconds": time.perf_counter() - start,
                                  "writer_peak_bytes": max(
                                      usage0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
                                  * 1024}
    program = os.path.join(work, "llama7b.pt2")
    code = ("import sys; sys.path.insert(0, %r); import weights_scale as w; "
            "from transformers import LlamaConfig; "
            "w.export_meta(LlamaConfig(**w.LLAMA_7B), %r)" % (os.path.dirname(__file__), program))
    wall, peak, _ = peak_of([sys.executable, "-W", "ignore", "-c", code])
    rows["export on meta"] = {"seconds": wall, "peak_bytes": peak,
                              "file_bytes": os.path.getsize(program)}
    out = os.path.join(work, "llama7b.split")
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, _ = peak_of([ppc, "split", program, "-o", out, "--stages", "4"])
    rows["split 4 stages"] = {"seconds": wall, "peak_bytes": peak}
    prompt = os.path.join(work, "llama7b.prompt.pt")
    torch.save(torch.randint(2, 32000, (1, 8), generator=torch.Generator().manual_seed(1)),
               prompt)
    wall, peak, text = peak_of(launch(ppc, 4, "generate", os.path.join(out, "manifest.json"),
                                      "--prompt", prompt, "--max-new-tokens", 8, "--output",
                                      os.path.join(work, "llama7b.tokens.pt"), "--stats",
                                      "--threads", 1, "--timeout", 1800, "--weights", shards))
    ranks = {r: {"peak_mb": float(s["peak_rss_mb"]), "weight_bytes": int(s["weight_bytes"]),
                 "tokens_per_s": float(s["tokens_per_s"]), "total_ms": float(s["total_ms"])}
             for r, s in rank_stats(text).items()}
    rows["generate 8 tokens, batch 1, 4 ranks"] = {
        "seconds": wall, "launcher_peak_bytes": peak, "ranks": ranks,
        "sum_of_rank_peaks_mb": sum(r["peak_mb"] for r in ranks.values()),
        "max_rank_peak_mb": max(r["peak_mb"] for r in ranks.values())}
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ppc", default=os.path.join(ROOT, "build", "bin", "ppc"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--skip-7b", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="ppc-weights-")
    os.makedirs(work, exist_ok=True)
    results = {"load_average": os.getloadavg(), "wide": part_wide(args.ppc, work)}
    print(json.dumps(results, indent=1), flush=True)
    if not args.skip_7b:
        results["llama7b"] = part_7b(args.ppc, work)
        results["load_average_after"] = os.getloadavg()
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
