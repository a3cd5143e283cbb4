#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora from real files: a manifest from `ppc split` of the
test models, meta cache files written by a two-rank `ppc run`, user metadata made from those
caches, input files written by torch.save (the test models' inputs and the shapes the docs
allow: a tensor, a tuple, a list, plus things loadTensors must refuse), the schedule CSV
fixtures of the unit tests (PyTorch's own, both layouts), and traces: the one that two-rank
run writes (--trace), the unit tests' trace fixtures and a few small ones in the forms the
reader accepts; a checkpoint.json and optimizer and generator state files in the forms ppc
train writes them. Header seeds come from make_header_seeds (encodeHeader itself).

usage: make_seeds.py PPC MODELS_DIR OUT_DIR   (OUT_DIR/<target>/ gets the files)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

# fuzz_meta_cache.cpp's fixed key: seeds get it so that mutations reach the entries.
FUZZ_KEY = {"manifest_sha256": "a" * 64,
            "stages": [{"stage": 0, "sha256": "b" * 64}, {"stage": 1, "sha256": "c" * 64}],
            "layout": "0:0 1:1"}


def run(*cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit("make_seeds: %s failed (exit %d):\n%s%s" % (" ".join(cmd), done.returncode, done.stdout, done.stderr))


def main():
    ppc, models, out = sys.argv[1:4]
    dirs = {t: os.path.join(out, t)
            for t in ("manifest", "meta_cache", "user_meta", "tensor_file", "schedule_csv", "trace")}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model, stages in (("mlp", 2), ("two_io", 2), ("decoder", 3)):
            split = os.path.join(tmp, model)
            run(ppc, "split", os.path.join(models, model + ".pt"), "-o", split, "--stages", str(stages))
            shutil.copy(os.path.join(split, "manifest.json"), os.path.join(dirs["manifest"], model + ".json"))
            if model != "mlp":
                continue
            run(ppc, "launch", "--nproc-per-node", "2", "--master-port", "0", "--timeout", "120", "--",
                ppc, "run", os.path.join(split, "manifest.json"), "--input",
                os.path.join(models, model + ".input.pt"), "--output", os.path.join(tmp, "out.pt"),
                "--microbatches", "2", "--trace", os.path.join(dirs["trace"], "run.json"))
            user = {"stages": []}
            for rank in (0, 1):
                name = "meta_cache.rank%dof2.json" % rank
                with open(os.path.join(split, name)) as f:
                    cache = json.load(f)
                cache["key"] = FUZZ_KEY
                with open(os.path.join(dirs["meta_cache"], name), "w") as f:
                    json.dump(cache, f, indent=2)
                for entry in cache["entries"]:
                    for v in entry["values"]:
                        while len(user["stages"]) <= v["stage"]:
                            user["stages"].append({"outputs": []})
                        outs = user["stages"][v["stage"]]["outputs"]
                        while len(outs) <= v["output"]:
                            outs.append(None)
                        meta = dict(v["meta"])
                        outs[v["output"]] = meta
            with open(os.path.join(dirs["user_meta"], "mlp.json"), "w") as f:
                json.dump(user, f, indent=2)
    # User metadata in the documented forms: an open batch dimension, no strides, every kind.
    every_kind = {"stages": [{"outputs": [
        {"kind": "Tensor", "tensors": [{"dtype": "float32", "sizes": [-1, 64]}]},
        {"kind": "Tuple[Tensor]", "tensors": [{"dtype": "int64", "sizes": [-1]},
                                              {"dtype": "bool", "sizes": [2, 3], "strides": [3, 1]}]},
        {"kind": "Tensor[]", "tensors": [{"dtype": "float64", "sizes": [0, 4], "requires_grad": True}]},
        {"kind": "int"}, {"kind": "float"}, {"kind": "bool"}, {"kind": "int[]", "length": 3}]}]}
    with open(os.path.join(dirs["user_meta"], "every_kind.json"), "w") as f:
        json.dump(every_kind, f, indent=2)

    # Schedule CSVs, both layouts (tests/unit/fixtures/schedule/), each behind the two bytes
    # fuzz_schedule_csv.cpp reads its job from: stages, ranks, microbatches.
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit",
                            "fixtures", "schedule")
    jobs = {"pytorch_2stages_4mb.csv": (2, 2, 4), "deadlock.csv": (2, 2, 2),
            "missing.csv": (2, 2, 2)}
    for name in sorted(os.listdir(fixtures)):
        m = re.match(r"pytorch_.*_(\d+)s_(\d+)r_(\d+)mb\.", name)
        if m:
            jobs[name] = tuple(map(int, m.groups()))
    for name, (stages, ranks, micro) in jobs.items():
        if stages > 8 or micro > 8:
            continue
        divisors = [r for r in range(1, stages + 1) if stages % r == 0]
        head = bytes([(stages - 1) + 8 * divisors.index(ranks), micro - 1])
        with open(os.path.join(fixtures, name), "rb") as f:
            body = f.read()
        with open(os.path.join(dirs["schedule_csv"], name), "wb") as f:
            f.write(head + body)

    # Traces: the unit tests' fixtures, and small ones in each accepted form (bare array,
    # flows with string and number ids, metadata, phases the reader ignores).
    trace_fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                  "unit", "fixtures", "trace")
    for name in sorted(os.listdir(trace_fixtures)):
        shutil.copy(os.path.join(trace_fixtures, name), os.path.join(dirs["trace"], name))
    small = {
        "bare_array.json": [
            {"ph": "X", "name": "F", "cat": "compute", "pid": 0, "tid": 0, "ts": 0, "dur": 5,
             "args": {"stage": 0, "microbatch": 1}},
            {"ph": "X", "name": "B", "cat": "compute", "pid": 1, "tid": 0, "ts": 5.5, "dur": 2}],
        "flows.json": {"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}},
            {"ph": "X", "name": "SEND_F", "cat": "send", "pid": 0, "tid": 0, "ts": 1, "dur": 1},
            {"ph": "s", "name": "message", "cat": "flow", "id": 7, "pid": 0, "tid": 0, "ts": 1},
            {"ph": "X", "name": "RECV_F", "cat": "recv", "pid": 1, "tid": 0, "ts": 1, "dur": 3},
            {"ph": "f", "bp": "e", "name": "message", "cat": "flow", "id": "7", "pid": 1,
             "tid": 0, "ts": 1},
            {"ph": "X", "name": "wait", "cat": "wait", "pid": 1, "tid": 0, "ts": 0, "dur": 1},
            {"ph": "i", "name": "mark", "pid": 0, "ts": 2},
            {"ph": "C", "name": "mem", "pid": 0, "ts": 2, "args": {"v": 1}}],
            "displayTimeUnit": "ms", "otherData": {"generator": "ppc", "ranks": [0, 1]}},
    }
    for name, trace in small.items():
        with open(os.path.join(dirs["trace"], name), "w") as f:
            json.dump(trace, f)

    t = dirs["tensor_file"]
    for model in ("mlp", "two_io"):
        shutil.copy(os.path.join(models, model + ".input.pt"), os.path.join(t, model + ".input.pt"))
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    samples = {
        "tensor": x, "tuple": (x, torch.tensor([1, 2], dtype=torch.int64)), "list": [x],
        "view": x[1:, 1:3], "transposed": x.t(), "bool": torch.tensor([True, False]),
        "empty": torch.zeros(0, 3), "scalar": torch.tensor(2.5, dtype=torch.float64),
        "dict": {"x": x}, "int": 3,
    }
    for name, value in samples.items():
        torch.save(value, os.path.join(t, name + ".pt"))
    checkpoint_seeds(os.path.join(out, "checkpoint"))


def checkpoint_seeds(out):
    """fuzz_checkpoint.cpp's seeds: byte 0 then a checkpoint.json, byte 1
    then an optimizer or generator state file (torch.save of a dict), in the
    forms ppc train writes them for a stage of fc.weight [3, 4] and fc.bias [3]."""
    os.makedirs(out, exist_ok=True)
    files = {name: "%064x" % i for i, name in enumerate(
        ("manifest.json", "stage_0.pt", "optim.stage0.pt", "rng.rank0.pt"))}
    info = {"format": "ppc-checkpoint", "version": 1, "step": 4, "batches_done": 4,
            "stages": 1, "world_size": 1,
            "optimizer": {"kind": "adam", "lr": 0.01, "momentum": 0, "weight_decay": 0},
            "files": files}
    with open(os.path.join(out, "checkpoint.json"), "wb") as f:
        f.write(b"\0" + json.dumps(info, indent=2).encode())
    shapes = {"fc.weight": (3, 4), "fc.bias": (3,)}
    adam, sgd = {}, {}
    for path, shape in shapes.items():
        adam[path + "#step"] = torch.tensor(4, dtype=torch.int64)
        adam[path + "#exp_avg"] = torch.randn(shape)
        adam[path + "#exp_avg_sq"] = torch.rand(shape)
        sgd[path + "#momentum_buffer"] = torch.randn(shape)
    for name, state in (("adam", adam), ("sgd", sgd), ("rng", {"cpu": torch.get_rng_state()})):
        path = os.path.join(out, name + ".pt")
        torch.save(state, path)
        with open(path, "rb") as f:
            body = f.read()
        with open(path, "wb") as f:
            f.write(b"\1" + body)


if __name__ == "__main__":
    main()
