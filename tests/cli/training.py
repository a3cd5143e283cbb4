"""Helpers for the `ppc train` tests: data files, the reference trainer and
comparisons.

The reference is the unsplit model trained in one process, as a Python user
would: torch.jit.load, train mode, torch.optim (Adam as LibTorch's C++ Adam
rounds it: LibTorchAdam), and gradient accumulation over
the same microbatches (torch.tensor_split along dim 0, each microbatch's loss
weighted by its rows over the batch's, so one step equals one step on the
whole batch with the loss averaged over it).
"""
import functools
import math
import os
import re
import zipfile

import torch

# The reference computes on one thread, as each rank of these tests does (2
# ranks on 2 cores): LibTorch 2.x's oneDNN convolution backward sums in another
# order on 2 threads (resnet18's conv1 gradient moves by 2.5e-4 relative).
torch.set_num_threads(1)

import common
from common import launch, model_path

# `ppc train` prints "step N loss X" on the loss rank.
STEP = re.compile(r"step (\d+) loss (\S+)")
# `ppc train --stats` lines.
STATS = re.compile(r"stats: rank=(\d+) step=(\d+) meta=(\w+) meta_messages_sent=(\d+) "
                   r"messages_sent=(\d+) step_ms=([\d.]+) peak_activations=(\S+) "
                   r"cache_written=(\d)")

# Loss per model: a target of the output's shape for mse, classes for
# cross_entropy.
LOSS = {"mlp": "cross_entropy", "resnet18": "mse", "decoder": "mse", "unet": "mse",
        "two_io": "mse"}


# Batch rows per model: resnet18's BatchNorm needs 2 rows per microbatch at
# its 1x1 last stage, so it gets 8 (3 microbatches of 3, 3 and 2 rows).
ROWS = {"resnet18": 8}
# (schedule, stages, ranks) that train every schedule: 2 and 4 stages on 2
# ranks; the V holds 2 stages per rank.
SCHEDULE_CONFIGS = [
    ("gpipe", 2, 2), ("gpipe", 4, 2), ("1f1b", 2, 2), ("1f1b", 4, 2),
    ("interleaved-1f1b", 4, 2), ("zb-h1", 2, 2), ("zb-h1", 4, 2),
    ("looped-bfs", 2, 2), ("looped-bfs", 4, 2),
    ("interleaved-zb", 2, 2), ("interleaved-zb", 4, 2),
    ("zbv", 2, 1), ("zbv", 4, 2),
    ("dualpipev", 2, 1), ("dualpipev", 4, 2),
]


def model_inputs(name):
    """NAME.input.pt (5 rows) as a tuple of inputs, grown to ROWS[name] rows."""
    x = torch.load(model_path(name, ".input.pt"))
    x = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    rows = ROWS.get(name)
    return tuple(torch.cat([t, t.flip(0)])[:rows] for t in x) if rows else x


def make_target(name, loss, loss_output=0, seed=0):
    """A fixed random target for the model's output `loss_output`."""
    model = torch.jit.load(model_path(name))
    with torch.no_grad():
        out = model(*model_inputs(name))
    if isinstance(out, tuple):
        out = out[loss_output]
    g = torch.Generator().manual_seed(seed)
    if loss == "cross_entropy":
        return torch.randint(0, out.shape[1], (out.shape[0],), generator=g)
    return torch.randn(out.shape, generator=g)


def write_data(path, name, loss, loss_output=0):
    """Writes DATA for NAME: one (input, target) pair; returns (inputs, target)."""
    inputs = model_inputs(name)
    target = make_target(name, loss, loss_output)
    torch.save((inputs[0] if len(inputs) == 1 else inputs, target), path)
    return inputs, target


def resolve(module, path):
    """The attribute at a dotted path."""
    return functools.reduce(getattr, path.split("."), module)


class LibTorchAdam(torch.optim.Optimizer):
    """Adam as LibTorch's C++ torch::optim::Adam (which `ppc train` uses)
    computes it (torch/csrc/api/src/optim/adam.cpp), so the reference rounds
    as ppc does. It is torch.optim.Adam's algorithm; PyTorch 1.13's Python
    Adam also rounds the same way, but 2.x's updates the first moment with
    lerp_ rather than mul_ and add_, one ulp apart, which resnet18's
    BatchNorm over 2-3 rows amplifies to 1e-4 of the loss within 3 steps."""

    # Whether the first moment moves by lerp_, as torch 2.x's Python Adam
    # does, rather than by mul_ and add_ as the C++ one (a subclass's choice:
    # test_train_optim.py replays torch.optim.AdamW bitwise with it).
    first_moment_lerp = False

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if group["weight_decay"] != 0:
                    grad = grad.add(p, alpha=group["weight_decay"])
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                if self.first_moment_lerp:
                    state["exp_avg"].lerp_(grad, 1 - beta1)
                else:
                    state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                correction1 = 1 - beta1 ** state["step"]
                correction2 = 1 - beta2 ** state["step"]
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(correction2)).add_(group["eps"])
                p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / correction1)


def accumulate(model, loss, parts, targets, rows, loss_output=0, reverse_backward=False,
               autocast=False):
    """One step's forwards and backwards over the microbatches PARTS (per
    model input, a tuple of microbatches) and TARGETS, each loss weighted by
    its rows over ROWS; returns the sum of the weighted losses. With
    autocast, each forward runs under torch.autocast("cpu", bfloat16) and the
    loss is computed on the output cast to float."""
    fn = torch.nn.functional.mse_loss if loss == "mse" else torch.nn.functional.cross_entropy
    total = 0.0
    pending = []
    for m in range(len(targets)):
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(*[p[m] for p in parts])
        else:
            out = model(*[p[m] for p in parts])
        if isinstance(out, tuple):
            out = out[loss_output]
        if autocast:
            out = out.float()
        t = targets[m].to(out.dtype) if loss == "mse" else targets[m]
        value = fn(out, t) * (targets[m].shape[0] / rows)
        if reverse_backward:
            pending.append(value)
        else:
            value.backward()
        total += value.item()
    for value in reversed(pending):
        value.backward()
    return total


def reference(name, inputs, target, steps, microbatches, loss, optimizer, lr,
              momentum=0.0, weight_decay=0.0, loss_output=0, reverse_backward=False):
    """Trains the unsplit model NAME; returns (losses, model). The model's
    parameters keep the last step's gradients (opt.step does not clear them).
    With reverse_backward, every microbatch's forward runs first and the
    backwards accumulate from the last microbatch to the first, as looped-bfs
    orders them (the same sum in another order: resnet18's BatchNorm over 2
    rows turns the last bits into 25% of the loss within 20 steps)."""
    model = torch.jit.load(model_path(name))
    model.train()
    params = list(model.parameters())
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    elif optimizer == "torch-adam":  # Python's own, to check LibTorchAdam against
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    else:
        opt = LibTorchAdam(params, lr=lr, weight_decay=weight_decay)
    parts = [torch.tensor_split(x, microbatches) for x in inputs]
    targets = torch.tensor_split(target, microbatches)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        losses.append(accumulate(model, loss, parts, targets, target.shape[0], loss_output,
                                 reverse_backward))
        opt.step()
    return losses, model


class Trained:
    """One `ppc train` run: its process result, losses and stats."""

    def __init__(self, proc):
        self.proc = proc
        self.output = proc.stdout + proc.stderr
        self.losses = [float(m.group(2)) for m in STEP.finditer(proc.stdout)]
        self.stats = [m.groups() for m in STATS.finditer(proc.stdout)]

    # The process's, for tests that read a run as a CompletedProcess.
    returncode = property(lambda self: self.proc.returncode)
    stdout = property(lambda self: self.proc.stdout)
    stderr = property(lambda self: self.proc.stderr)

    def peaks(self):
        """{stage: peak activations} over every step and rank."""
        out = {}
        for s in self.stats:
            for item in s[6].split(","):
                if item != "none":
                    stage, peak = map(int, item.split(":"))
                    out[stage] = max(out.get(stage, 0), peak)
        return out


def train(ranks, manifest, data, *args, timeout=600, env=None, rank_timeout=120):
    """Runs `ppc train MANIFEST --data DATA --timeout RANK_TIMEOUT ARGS...` on
    `ranks` ranks under ppc launch, with ENV's variables added to the
    environment. No --timeout is added when ARGS has one or RANK_TIMEOUT is
    None. Returns a Trained."""
    extra = () if "--timeout" in args or rank_timeout is None else ("--timeout", rank_timeout)
    return Trained(launch(ranks, "train", manifest, "--data", data, *extra, *args,
                          timeout=timeout, env=dict(os.environ, **env) if env else None))


class MlpDataTest(common.ClassTmpTest):
    """A ClassTmpTest whose tests train the mlp on one data file for
    cross_entropy, written once: cls.mlp_data, its inputs and target."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.mlp_data = os.path.join(cls.tmp, "mlp.data.pt")
        cls.mlp_inputs, cls.mlp_target = write_data(cls.mlp_data, "mlp", "cross_entropy")


def split_under(tmp, name, stages):
    """Splits NAME into `stages` stages under `tmp` once; returns the manifest."""
    return common.split(name, os.path.join(tmp, "%s.%d" % (name, stages)), at=stages,
                        once=True).manifest


def rel_diff(a, b):
    """max |a - b| relative to the largest magnitude of b (1 when b is 0)."""
    a, b = a.double(), b.double()
    scale = b.abs().max().item() if b.numel() else 1.0
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0) if b.numel() else 0.0


def assert_gradients(test, directory, ranks, ref, tol):
    """Asserts that the gradients the ranks wrote with --save-grads into
    DIRECTORY cover every parameter of REF (the reference model after its
    step) and each is within TOL of REF's (rel_diff); returns the worst."""
    got = read_grads(directory, ranks)
    expected = {n for n, _ in ref.named_parameters()}
    test.assertTrue(expected <= set(got), "missing gradients: %s" % sorted(expected - set(got)))
    worst = 0.0
    for path, g in got.items():
        want = resolve(ref, path).grad
        test.assertIsNotNone(want, path)
        d = rel_diff(g, want)
        test.assertLessEqual(d, tol, "%s: gradient off by %g" % (path, d))
        worst = max(worst, d)
    return worst


def losses_rel_diff(got, want):
    """The largest |a - b| / |b| over two loss curves."""
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, want))


def read_grads(directory, ranks):
    """The gradients every rank wrote with --save-grads, by parameter path.
    Each file must be a plain dict of tensors: no torch.jit globals in its
    pickle, which PyTorch 2.6+'s torch.load (weights_only=True by default)
    refuses."""
    out = {}
    for r in range(ranks):
        path = os.path.join(directory, "grads.rank%d.pt" % r)
        with zipfile.ZipFile(path) as archive:
            pickle = next(archive.read(n) for n in archive.namelist()
                          if n.endswith("/data.pkl"))
        assert b"torch.jit" not in pickle, f"{path} pickles torch.jit globals"
        out.update(torch.load(path))
    return out


def stage_tensors(manifest_dir):
    """Every parameter and buffer of the stage files next to a manifest, by
    path (the stages keep the original model's names)."""
    import json
    with open(os.path.join(manifest_dir, "manifest.json")) as f:
        manifest = json.load(f)
    out = {}
    for stage in manifest["stages"]:
        module = torch.jit.load(os.path.join(manifest_dir, stage["file"]))
        for key, value in module.state_dict().items():
            out.setdefault(key, []).append(value)
    return out


# Clipping, LR schedules, AdamW ------------------------------------

class LibTorchAdamW(LibTorchAdam):
    """AdamW as LibTorch's C++ torch::optim::AdamW computes it
    (torch/csrc/api/src/optim/adamw.cpp): the parameter decays by
    1 - lr * weight_decay before LibTorchAdam's update of the undecayed
    gradient. torch.optim.AdamW's defaults (weight_decay 0.01)."""

    def __init__(self, params, lr, weight_decay=0.01):
        super().__init__(params, lr, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self):
        decays = []
        for group in self.param_groups:
            decays.append(group["weight_decay"])
            for p in group["params"]:
                if p.grad is not None and group["weight_decay"] != 0:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
            group["weight_decay"] = 0.0
        try:
            super().step()
        finally:
            for group, decay in zip(self.param_groups, decays):
                group["weight_decay"] = decay


def schedule_lr(s, lr, steps, kind="constant", warmup=0, min_lr=0.0):
    """The learning rate of 0-based step S (docs/training.md's formula)."""
    if s < warmup:
        return lr * (s + 1) / warmup
    if kind == "constant":
        return lr
    progress = min(1.0, (s - warmup) / max(1, steps - warmup))
    if kind == "linear":
        return lr - (lr - min_lr) * progress
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def reference_optim(name, inputs, target, steps, microbatches, loss, optimizer, lr,
                    momentum=0.0, weight_decay=None, clip=0.0, schedule="constant",
                    warmup=0, min_lr=0.0, loss_output=0):
    """reference() with gradient clipping (torch.nn.utils.clip_grad_norm_ on
    the unsplit model, whose parameters() holds a tied parameter once), a
    learning-rate schedule (torch.optim.lr_scheduler.LambdaLR over
    schedule_lr) and "adamw" (LibTorchAdamW). WEIGHT_DECAY None is the
    optimizer's default (0.01 for adamw, else 0). Returns (losses, model,
    lrs, norms): the learning rate and the clipped norm of every step."""
    model = torch.jit.load(model_path(name))
    model.train()
    params = list(model.parameters())
    if optimizer == "adamw":
        opt = LibTorchAdamW(params, lr=lr,
                            weight_decay=0.01 if weight_decay is None else weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay or 0.0)
    else:
        opt = LibTorchAdam(params, lr=lr, weight_decay=weight_decay or 0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: schedule_lr(s, lr, steps, schedule, warmup, min_lr) / lr)
    parts = [torch.tensor_split(x, microbatches) for x in inputs]
    targets = torch.tensor_split(target, microbatches)
    losses, lrs, norms = [], [], []
    for _ in range(steps):
        opt.zero_grad()
        losses.append(accumulate(model, loss, parts, targets, target.shape[0], loss_output))
        if clip > 0:
            norms.append(torch.nn.utils.clip_grad_norm_(params, clip).item())
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return losses, model, lrs, norms


def reference_dp(name, inputs, target, steps, replicas, microbatches, loss, lr):
    """reference() for `ppc train --data-parallel REPLICAS`: plain SGD on the
    unsplit model with gradient accumulation over the microbatches of every
    replica (the batch torch.tensor_split into REPLICAS slices, each split
    into MICROBATCHES), each loss weighted by its rows over the whole batch's.
    As the replicas do, each replica's microbatches accumulate on their own
    and the replicas' sums are added in replica order. Returns (losses, model)."""
    slices = [torch.tensor_split(x, replicas) for x in (*inputs, target)]
    model = torch.jit.load(model_path(name))
    model.train()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=lr)
    losses = []
    for _ in range(steps):
        total, summed = 0.0, None
        for d in range(replicas):
            opt.zero_grad(set_to_none=True)
            parts = [torch.tensor_split(per[d], microbatches) for per in slices]
            total += accumulate(model, loss, parts[:-1], parts[-1], target.shape[0])
            grads = [p.grad.clone() for p in params]
            summed = grads if summed is None else [a.add_(b) for a, b in zip(summed, grads)]
        for p, g in zip(params, summed):
            p.grad = g
        losses.append(total)
        opt.step()
    return losses, model


def reference_bf16(name, inputs, target, steps, microbatches, loss, lr):
    """reference() (SGD) with each microbatch's forward under
    torch.autocast("cpu", dtype=torch.bfloat16), as `ppc train --precision
    bf16` runs its stages: TorchScript's own autocast pass on (its default;
    runtime/exec/Precision.h says why), fp32 parameters and optimizer, the loss in fp32
    of the output cast to float. Returns (losses, model)."""
    model = torch.jit.load(model_path(name))
    model.train()
    opt = torch.optim.SGD(list(model.parameters()), lr=lr)
    parts = [torch.tensor_split(x, microbatches) for x in inputs]
    targets = torch.tensor_split(target, microbatches)
    old = torch._C._jit_set_autocast_mode(True)
    losses = []
    try:
        for _ in range(steps):
            opt.zero_grad()
            losses.append(accumulate(model, loss, parts, targets, target.shape[0],
                                     autocast=True))
            opt.step()
    finally:
        torch._C._jit_set_autocast_mode(old)
    return losses, model
