"""The peer side of bench/race.py: torch.distributed.pipelining (PyTorch
2.x's, run by its Python, run.pytorch2_venv()), on the same model, batch,
microbatches and schedule as ppc.

Under torchrun (2 ranks, Gloo, CPU):
  race_peer.py --model M.pt --input X.pt --split-at K --microbatches N
               --schedule gpipe|1f1b --shapes static|inferred --repeat R
               [--train TARGET.pt --lr LR] [--output OUT.pt]
Alone (no torchrun), the unsplit baseline: race_peer.py --unsplit ...

The model is an MLP (`layers`: Linear+ReLU blocks, as tests/models/
make_models.py builds them); its weights come from the TorchScript file ppc
splits, so both sides compute the same function. Rank r holds layers [0, K)
(r = 0) or [K, depth) (r = 1) in a PipelineStage, with example microbatch
tensors (static shapes) or without (the stage infers them on the first step).

Each rank prints one line `race: {json}`: first_step_ms (the first step,
which infers shapes when they are not static), first_wall_ms (from the
start of this script, before importing torch, to the end of that step),
batch_ms (mean of R steps after it, between barriers), rss_kb (peak
resident memory) and blas: the BLAS this torch computes with ("mkl 2024.2",
or "openblas:CORE" for a torch on OpenBLAS) and its CPU capability (the
instruction set LibTorch's own kernels use, and the highest MKL may use,
which MKL_ENABLE_INSTRUCTIONS caps), so that bench/race.py can state which
kernel class each side runs. Steps of inference run under torch.no_grad() with no
loss; training steps run forward, backward (MSE loss) and an SGD step.
"""
import time

T0 = time.monotonic()

import argparse  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402


class MLP(nn.Module):
    """The test models' MLP without a head."""

    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def load_mlp(path):
    """The MLP whose weights are those of the TorchScript file at `path`."""
    state = torch.jit.load(path).state_dict()
    depth = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    width = state["layers.0.0.weight"].shape[1]
    model = MLP(width, depth)
    model.load_state_dict({k: v for k, v in state.items() if k.startswith("layers.")})
    return model, width


def blas():
    """"mkl VERSION" or "openblas:CORE", with the CPU capability: what this
    torch's matrix products run on."""
    config = torch.__config__.show()
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "?")()
    if torch.backends.mkl.is_available():
        m = re.search(r"Math Kernel Library Version ([\w.]+)", config)
        name = "mkl" + (" " + m.group(1) if m else "")
    else:
        try:
            lib = ctypes.CDLL("libopenblas.so.0")
            lib.openblas_get_corename.restype = ctypes.c_char_p
            name = "openblas:" + lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            name = "unknown"
    return "%s (cpu capability %s)" % (name, capability)


def report(**fields):
    fields["rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fields["blas"] = blas()
    print("race: " + json.dumps(fields), flush=True)


def unsplit(args):
    model, _ = load_mlp(args.model)
    x = torch.load(args.input)
    chunks = torch.tensor_split(x, args.microbatches)

    def batch():
        with torch.no_grad():
            return torch.cat([model(c) for c in chunks])

    start = time.monotonic()
    batch()
    first = time.monotonic()
    for _ in range(args.repeat):
        batch()
    end = time.monotonic()
    report(rank=0, first_step_ms=(first - start) * 1e3, first_wall_ms=(first - T0) * 1e3,
           batch_ms=(end - first) * 1e3 / args.repeat)


def pipelined(args):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert world == 2, "the race runs 2 ranks"
    dist.init_process_group("gloo")
    model, width = load_mlp(args.model)
    layers = model.layers[:args.split_at] if rank == 0 else model.layers[args.split_at:]
    sub = nn.Sequential(*layers)
    x = torch.load(args.input)
    rows = x.shape[0] // args.microbatches
    assert rows * args.microbatches == x.shape[0], "the batch must divide into microbatches"
    example = {}
    if args.shapes == "static":
        example = {"input_args": torch.empty(rows, width), "output_args": torch.empty(rows, width)}
    stage = PipelineStage(sub, rank, world, torch.device("cpu"), **example)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[args.schedule]
    target = torch.load(args.train) if args.train else None
    loss_fn = nn.MSELoss() if args.train else None
    schedule = cls(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    opt = torch.optim.SGD(sub.parameters(), lr=args.lr) if args.train else None

    def step():
        feed = (x,) if rank == 0 else ()
        if args.train:
            opt.zero_grad()
            out = schedule.step(*feed, target=target if rank == world - 1 else None)
            opt.step()
            return out
        with torch.no_grad():
            return schedule.step(*feed)

    start = time.monotonic()
    out = step()
    first = time.monotonic()
    dist.barrier()
    t0 = time.monotonic()
    for _ in range(args.repeat):
        step()
    dist.barrier()
    t1 = time.monotonic()
    if args.output and rank == world - 1 and not args.train:
        torch.save(out, args.output)
    report(rank=rank, first_step_ms=(first - start) * 1e3, first_wall_ms=(first - T0) * 1e3,
           batch_ms=(t1 - t0) * 1e3 / args.repeat)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--split-at", type=int, default=0)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--schedule", choices=["gpipe", "1f1b"], default="gpipe")
    ap.add_argument("--shapes", choices=["static", "inferred"], default="inferred")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--train", help="targets (torch.save'd tensor): train with MSE loss")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--output", help="the last stage writes its first step's output here")
    ap.add_argument("--unsplit", action="store_true", help="one process, the whole model")
    args = ap.parse_args()
    torch.set_num_threads(1)
    (unsplit if args.unsplit else pipelined)(args)


if __name__ == "__main__":
    main()
