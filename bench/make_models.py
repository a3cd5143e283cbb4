#!/usr/bin/python3
"""Generate the benchmark models and inputs into OUTDIR (default build-system/bench-models).

Usage: /usr/bin/python3 bench/make_models.py OUTDIR

Writes, each only when missing or made by another version of this script
(a NAME.stamp holds this script's hash, written last):
  wide.pt, wide.input.pt    16 x (Linear(1024, 1024) + ReLU), input [4096, 1024]
                            (benchmarks 1, 3, 7 and 8)
  tiny.pt, tiny.input.pt    4 x (Linear(16, 16) + ReLU), input [2048, 16]
                            (benchmark 2: 2048 microbatches of one row)
  resnet18.train.pt         (input [32, 3, 32, 32], target [32] class indices)
                            for the resnet18 of tests/models/make_models.py
                            (benchmark 6)
The MLP class is the test models' (tests/models/make_models.py), scripted the
same way: torch.jit.script(model.eval()), seeds 0 (weights) and 1 (inputs).
"""
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def stamp() -> str:
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


FILES = {"wide": [".pt", ".input.pt"], "tiny": [".pt", ".input.pt"], "resnet18.train": [".pt"]}


def up_to_date(outdir: str, name: str) -> bool:
    path = os.path.join(outdir, name + ".stamp")
    if not all(os.path.exists(os.path.join(outdir, name + s)) for s in FILES[name] + [".stamp"]):
        return False
    with open(path) as f:
        return f.read().strip() == stamp()


def main() -> int:
    outdir = sys.argv[1] if len(sys.argv) > 1 else "build-system/bench-models"
    os.makedirs(outdir, exist_ok=True)
    todo = [n for n in FILES if not up_to_date(outdir, n)]
    if not todo:
        return 0
    import torch  # only when something is to be written
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
    from make_models import MLP, atomic, write_text
    torch.set_num_threads(1)

    def save_mlp(name, width, depth, rows):
        torch.manual_seed(0)
        model = torch.jit.script(MLP(width, depth).eval())
        torch.manual_seed(1)
        x = torch.randn(rows, width)
        base = os.path.join(outdir, name)
        atomic(base + ".pt", lambda p: torch.jit.save(model, p))
        atomic(base + ".input.pt", lambda p: torch.save(x, p))

    for name in todo:
        if name == "wide":
            save_mlp("wide", 1024, 16, 4096)
        elif name == "tiny":
            save_mlp("tiny", 16, 4, 2048)
        else:
            torch.manual_seed(1)
            data = (torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)))
            atomic(os.path.join(outdir, name + ".pt"), lambda p: torch.save(data, p))
        write_text(os.path.join(outdir, name + ".stamp"), stamp() + "\n")
        print("bench models: wrote %s" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
