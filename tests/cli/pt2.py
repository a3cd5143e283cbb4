"""Helpers for the torch.export (`.pt2`) tests (tests/cli/test_pt2.py).

Needs a torch with torch.export (2.x: the PyTorch 2.x configuration's Python,
common.pytorch2_python()); importing this module under Debian's torch 1.13
works, but the helpers that load programs fail there.

  make_pt2_models(outdir, python)
                             runs tests/models/make_pt2_models.py (which
                             caches: a model with a current stamp is kept)
  load_module(path)          torch.export.load(path).module()
  chain_stages(dir, inputs)  runs the stage programs of DIR/manifest.json one
                             after another, as the manifest wires them, and
                             returns the model's output
  write_pt2_data(path, models, name, loss) / make_pt2_target(...)
                             `ppc train --data` files, as training.py's
  reference_pt2(...)         trains the unsplit exported program in Python as
                             `ppc train` trains (training.accumulate,
                             LibTorchAdam); returns (losses, params by FQN,
                             module)
  pt2_stage_tensors(dir)         every parameter and buffer of the stage programs
                             of a manifest, by FQN

On a program loaded back by torch.export.load, a tied weight (pt2_gpt's
emb.weight and head.weight) is two Parameters of the module sharing one
storage: the exported graph lists both as inputs but reads only the last one
(p_head_weight), so the gradient of both uses lands on head.weight, emb.weight's
stays None, and an in-place optimizer step on head.weight moves emb.weight with
it. That is one tied parameter trained as the eager model trains it (checked
by check_helpers()).
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import ROOT, as_tuple, run_generator  # noqa: E402

GENERATOR = os.path.join(ROOT, "tests", "models", "make_pt2_models.py")
NAMES = ["pt2_cnn", "pt2_gpt", "pt2_unet", "pt2_two_io", "pt2_mlp", "pt2_state",
         "pt2_state_functional"]


def make_pt2_models(outdir, python=sys.executable, timeout=600):
    """Runs the generator into OUTDIR with PYTHON (skipped when PYTHON is
    this one and the files are up to date: starting it costs seconds);
    returns a CompletedProcess (the caller checks returncode)."""
    return run_generator(GENERATOR, outdir, NAMES, (".pt2", ".input.pt", ".output.pt", ".json"),
                         python, timeout)


def files(models, name):
    """{suffix: path} of model NAME in the generator's directory MODELS."""
    base = os.path.join(models, name)
    return {s: base + s for s in (".pt2", ".input.pt", ".output.pt", ".json")}


def load_inputs(path):
    """An input file (a tensor, or a tuple of them) as a tuple of inputs."""
    return as_tuple(torch.load(path))


def load_module(path):
    """The exported program at PATH as a callable module (a GraphModule whose
    named_parameters() are the original FQNs)."""
    return torch.export.load(path).module()


def _load_manifest(manifest_dir):
    with open(os.path.join(manifest_dir, "manifest.json")) as f:
        return json.load(f)


def chain_stages(manifest_dir, inputs, grad=False, modules=None):
    """The model output of the stages of MANIFEST_DIR/manifest.json on INPUTS
    (a tensor or a tuple/list of model inputs), each stage program loaded
    with torch.export.load(...).module() (or taken from MODULES, a list by
    stage index) and called with its inputs in manifest order, each input
    taken from `source` (a model input, or output `output` of stage `stage`).
    A stage's outputs are its program's outputs in manifest order (a tuple;
    a lone tensor is taken as a 1-tuple); their number must be the
    manifest's. Returns a tuple when `output_is_tuple`, else the one output.
    Under torch.no_grad() unless GRAD."""
    manifest = _load_manifest(manifest_dir)
    assert manifest.get("format") == "pt2", "manifest format %r" % manifest.get("format")
    inputs = as_tuple(inputs)
    outputs = []

    def value(source):
        if "model_input" in source:
            return inputs[source["model_input"]]
        return outputs[source["stage"]][source["output"]]

    for stage in manifest["stages"]:
        assert stage["index"] == len(outputs), "stages out of order"
        module = modules[stage["index"]] if modules else load_module(
            os.path.join(manifest_dir, stage["file"]))
        args = [value(inp["source"]) for inp in stage["inputs"]]
        with torch.set_grad_enabled(grad):
            out = as_tuple(module(*args))
        assert len(out) == len(stage["outputs"]), "stage %d: %d outputs, manifest lists %d" % (
            stage["index"], len(out), len(stage["outputs"]))
        outputs.append(out)
    result = tuple(value(ref) for ref in manifest["outputs"])
    return result if manifest["output_is_tuple"] else result[0]


def pt2_stage_tensors(manifest_dir):
    """Every parameter and buffer of the stage programs next to a manifest,
    by FQN: {fqn: [tensor per stage holding it]} (the stages keep the
    original model's names; a tied weight is held by each stage using it)."""
    manifest = _load_manifest(manifest_dir)
    out = {}
    for stage in manifest["stages"]:
        ep = torch.export.load(os.path.join(manifest_dir, stage["file"]))
        for key, value in ep.state_dict.items():
            out.setdefault(key, []).append(value)
    return out


# --- training ---------------------------------------------------------------

def make_pt2_target(models, name, loss, loss_output=0, seed=0):
    """A fixed random target for output LOSS_OUTPUT of model NAME (its
    shape from NAME.output.pt): classes for cross_entropy, as
    training.make_target."""
    out = torch.load(os.path.join(models, name + ".output.pt"))
    if isinstance(out, (tuple, list)):
        out = out[loss_output]
    g = torch.Generator().manual_seed(seed)
    if loss == "cross_entropy":
        return torch.randint(0, out.shape[1], (out.shape[0],), generator=g)
    return torch.randn(out.shape, generator=g)


def write_pt2_data(path, models, name, loss, loss_output=0):
    """Writes `ppc train --data` for NAME: one (input, target) pair, the
    input NAME.input.pt's; returns (inputs tuple, target)."""
    inputs = load_inputs(os.path.join(models, name + ".input.pt"))
    target = make_pt2_target(models, name, loss, loss_output)
    torch.save((inputs[0] if len(inputs) == 1 else inputs, target), path)
    return inputs, target


def _optimizer(params, optimizer, lr, momentum, weight_decay):
    import training
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if optimizer == "torch-adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if optimizer == "adam":
        return training.LibTorchAdam(params, lr=lr, weight_decay=weight_decay)
    if optimizer == "adamw":
        return training.LibTorchAdamW(params, lr=lr,
                                      weight_decay=0.01 if weight_decay is None else weight_decay)
    raise ValueError("optimizer %r" % optimizer)


def train_module(model, inputs, target, steps, microbatches, loss, optimizer, lr,
                 momentum=0.0, weight_decay=0.0, loss_output=0, reverse_backward=False):
    """Trains MODULE in place as training.reference does (zero_grad, then
    training.accumulate over torch.tensor_split microbatches, each loss
    weighted by its rows, then one optimizer step); returns the losses."""
    import training
    params = list(model.parameters())
    opt = _optimizer(params, optimizer, lr, momentum, weight_decay)
    parts = [torch.tensor_split(x, microbatches) for x in inputs]
    targets = torch.tensor_split(target, microbatches)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        losses.append(training.accumulate(model, loss, parts, targets, target.shape[0],
                                          loss_output, reverse_backward))
        opt.step()
    return losses


def reference_pt2(pt2_path, inputs, target, steps, microbatches, loss, optimizer, lr,
                  momentum=0.0, weight_decay=0.0, loss_output=0, reverse_backward=False):
    """Trains the unsplit exported program PT2_PATH (torch.export.load(...)
    .module()) as `ppc train` trains it: training.reference's loop with
    SGD (momentum, weight decay), "adam" (training.LibTorchAdam: LibTorch's
    C++ rounding), "adamw" or "torch-adam". With reverse_backward, the
    backwards run from the last microbatch to the first (looped-bfs).
    Returns (losses, {fqn: final value} for every parameter name, tied names
    included, module: its parameters keep the last step's gradients)."""
    model = load_module(pt2_path)
    losses = train_module(model, as_tuple(inputs), target, steps, microbatches, loss, optimizer,
                          lr, momentum, weight_decay, loss_output, reverse_backward)
    params = {n: p.detach().clone()
              for n, p in model.named_parameters(remove_duplicate=False)}
    return losses, params, model


def trained_weights(saved_dir):
    """{fqn: tensor} of the parameters and buffers of the stage programs of
    a `ppc train --save` directory, checking that the copies of a tied
    weight agree bit for bit."""
    out = {}
    for key, copies in pt2_stage_tensors(saved_dir).items():
        for c in copies[1:]:
            assert torch.equal(c, copies[0]), "%s: the stages' copies differ" % key
        out[key] = copies[0]
    return out


# --- standalone validation -----------------------------------------------------

def check_helpers(models):
    """Checks the helpers against eager PyTorch on the generator's models in
    MODELS (run `python tests/cli/pt2.py MODELS` with a torch 2.x python):
      - each NAME.output.pt is the eager model's output and the program's at
        other batch sizes (1, 3) too (the dynamic batch);
      - reference_pt2 on pt2_mlp and pt2_gpt (3 SGD steps with momentum and
        weight decay, 3 Adam steps; 3 microbatches of 10 rows) gives the
        losses and weights of the eager model trained the same way, and the
        tied weight stays one weight;
      - chain_stages on a hand-made 2-stage split of pt2_two_io (torch.export
        programs written as ppc writes stages) gives the model's outputs."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
    import make_pt2_models as gen
    import training
    torch.manual_seed(0)
    report = []
    for name, (build, make_input, loss, _, _) in gen.MODELS.items():
        torch.manual_seed(0)
        eager = build().eval()
        inputs = load_inputs(os.path.join(models, name + ".input.pt"))
        want = torch.load(os.path.join(models, name + ".output.pt"))
        module = load_module(os.path.join(models, name + ".pt2"))
        with torch.no_grad():
            e, m = as_tuple(eager(*inputs)), as_tuple(module(*inputs))
            for a, b, c in zip(e, m, as_tuple(want)):
                assert torch.allclose(a, c, rtol=1e-5, atol=1e-6), name
                assert torch.equal(b, c), name
            for rows in (1, 3):
                small = tuple(x[:rows] for x in inputs)
                for a, b in zip(as_tuple(eager(*small)), as_tuple(module(*small))):
                    assert a.shape[0] == rows and torch.allclose(a, b, rtol=1e-5, atol=1e-6), \
                        (name, rows)
        report.append("%s: output.pt = eager = program (batch 10, 1, 3)" % name)

    for name in ("pt2_mlp", "pt2_gpt"):
        build, _, loss, _, _ = gen.MODELS[name]
        inputs = load_inputs(os.path.join(models, name + ".input.pt"))
        target = make_pt2_target(models, name, loss)
        for opt, kw in (("sgd", dict(momentum=0.9, weight_decay=1e-4)), ("adam", {})):
            lr = 0.05 if opt == "sgd" else 1e-3
            for reverse in (False, True):
                losses, params, module = reference_pt2(
                    os.path.join(models, name + ".pt2"), inputs, target, 3, 3, loss, opt, lr,
                    reverse_backward=reverse, **kw)
                torch.manual_seed(0)
                eager = build().eval()
                eager_losses = train_module(eager, inputs, target, 3, 3, loss, opt, lr,
                                            reverse_backward=reverse, **kw)
                worst = training.losses_rel_diff(losses, eager_losses)
                assert worst <= 1e-6, (name, opt, losses, eager_losses)
                eager_params = dict(eager.named_parameters(remove_duplicate=False))
                assert set(eager_params) == set(params), (name, set(eager_params) ^ set(params))
                wd = max(training.rel_diff(params[k], v.detach()) for k, v in eager_params.items())
                assert wd <= 1e-5, (name, opt, wd)
                assert all(p.grad is not None for n, p in module.named_parameters()
                           if n != "emb.weight"), name
                if name == "pt2_gpt":
                    assert torch.equal(params["emb.weight"], params["head.weight"])
                    assert module.emb.weight.data_ptr() == module.head.weight.data_ptr()
                report.append("%s %s%s: 3 steps, losses %s, eager rel diff %.2g, weights %.2g"
                              % (name, opt, " reverse" if reverse else "",
                                 " ".join("%.6g" % x for x in losses), worst, wd))

    # chain_stages on a 2-stage split made by hand: stage 0 = a, a_head, c
    # (x -> hc, aux), stage 1 = b, mix (y, hc -> out); model outputs
    # (stage 1.0, stage 0.1).
    import tempfile

    class Stage0(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.a, self.a_head, self.c = m.a, m.a_head, m.c

        def forward(self, x):
            ha = self.a(x)
            return self.c(ha), self.a_head(ha)

    class Stage1(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.b, self.mix = m.b, m.mix

        def forward(self, y, hc):
            return (self.mix(hc, self.b(y)),)

    torch.manual_seed(0)
    eager = gen.TwoIO().eval()
    inputs = load_inputs(os.path.join(models, "pt2_two_io.input.pt"))
    with tempfile.TemporaryDirectory() as d:
        batch = torch.export.Dim("batch", min=1)
        hc = eager.c(eager.a(inputs[0]))
        for i, (mod, args) in enumerate(((Stage0(eager), inputs[:1]),
                                         (Stage1(eager), (inputs[1], hc)))):
            ep = torch.export.export(mod, tuple(args), dynamic_shapes=tuple({0: batch}
                                                                            for _ in args))
            torch.export.save(ep, os.path.join(d, "stage_%d.pt2" % i))
        t = {"type": "Tensor"}
        manifest = {
            "format": "pt2", "output_is_tuple": True,
            "outputs": [{"stage": 1, "output": 0}, {"stage": 0, "output": 1}],
            "stages": [
                {"index": 0, "file": "stage_0.pt2",
                 "inputs": [dict(t, name="x", source={"model_input": 0})],
                 "outputs": [dict(t, name="hc", consumers=[1]), dict(t, name="aux",
                                                                     consumers=[])]},
                {"index": 1, "file": "stage_1.pt2",
                 "inputs": [dict(t, name="y", source={"model_input": 1}),
                            dict(t, name="hc", source={"stage": 0, "output": 0})],
                 "outputs": [dict(t, name="out", consumers=[])]}]}
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        got = chain_stages(d, inputs)
        want = torch.load(os.path.join(models, "pt2_two_io.output.pt"))
        assert isinstance(got, tuple) and len(got) == 2
        for a, b in zip(got, want):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        held = pt2_stage_tensors(d)
        assert set(held) == {k for k, _ in eager.named_parameters()}, sorted(held)
        report.append("chain_stages: hand-made 2-stage pt2_two_io = pt2_two_io.output.pt; "
                      "stage_tensors holds every parameter once")
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/cli/pt2.py MODELS_DIR (make_pt2_models.py's output)")
    for line in check_helpers(sys.argv[1]):
        print(line)
