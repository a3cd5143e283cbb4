"""Tests that ppc join puts trained stage tensors back into the original model.

`ppc train --save` is not written yet, so each test makes "trained" stages as
it will: split a model, add a deterministic perturbation to every parameter
and buffer of every stage file (the same one to each copy of a tied tensor),
save the files and update the manifest's stage hashes. Then:
  - the joined model, loaded by Python's torch.jit.load, computes what the
    stages compute (in Python, and per ppc verify), and its state_dict holds
    the stage tensors by name;
  - each error is one line with exit status 2 and leaves no output behind.
"""
import json
import os
import re
import shutil
import sys
import unittest
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (as_tuple, assert_outputs_close, file_sha256, load_manifest, main,  # noqa: E402
                    model_path, ppc, read_bytes, split, tmpdir)

RTOL, ATOL = 1e-5, 1e-6
SUMMARY = r"^joined (\d+) stages?: (\d+) parameters? and (\d+) buffers? into (.*)\n$"


def perturbed(tensor, name):
    """A deterministic new value for the tensor called `name`."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    if not tensor.is_floating_point():
        return tensor + zlib.crc32(name.encode()) % 7 + 1
    r = torch.rand(tensor.shape, generator=g, dtype=torch.float64) * 2 - 1
    # Multiplicative, plus a small positive shift: BatchNorm variances stay > 0.
    return (tensor.double() * (1 + 0.1 * r) + 0.01 * r.abs()).to(tensor.dtype)


def read_safetensors(path):
    """{name: tensor} of a .safetensors file of F32 tensors, read as the
    format says (an 8-byte header length, the JSON header, the data), so
    that no safetensors package is needed."""
    with open(path, "rb") as f:
        data = f.read()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", entry
        begin, end = (8 + length + o for o in entry["data_offsets"])
        out[name] = torch.frombuffer(bytearray(data[begin:end]),
                                     dtype=torch.float32).reshape(entry["shape"])
    return out


def train_stages(outdir, change=None, update_manifest=True):
    """Perturbs every parameter and buffer of the stages in `outdir` and
    rewrites the manifest's stage hashes, as `ppc train --save` will. Copies of
    a tied tensor (manifest tied_parameters) get the same perturbation.
    `change(stage, key, value)` may return another value for one tensor."""
    manifest = load_manifest(outdir)
    canonical = {}
    for tied in manifest["tied_parameters"]:
        for use in tied["uses"]:
            canonical[(use["stage"], use["path"])] = tied["uses"][0]["path"]
    for stage in manifest["stages"]:
        path = os.path.join(outdir, stage["file"])
        module = torch.jit.load(path)
        state = module.state_dict()
        # From a snapshot: a tensor held under two keys is set, not perturbed twice.
        before = {k: v.clone() for k, v in state.items()}
        with torch.no_grad():
            for key, tensor in state.items():
                value = perturbed(before[key], canonical.get((stage["index"], key), key))
                if change:
                    value = change(stage["index"], key, value)
                tensor.copy_(value)
        torch.jit.save(module, path)
        if update_manifest:
            stage["sha256"] = file_sha256(path)
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def run_stages(outdir, manifest, inputs):
    """Runs the stage files with Python's torch.jit.load, following the manifest."""
    outputs = []
    for stage in manifest["stages"]:
        module = torch.jit.load(os.path.join(outdir, stage["file"]))
        args = [inputs[s["model_input"]] if "model_input" in s
                else outputs[s["stage"]][s["output"]]
                for s in (inp["source"] for inp in stage["inputs"])]
        with torch.no_grad():
            outputs.append(module(*args))
    return tuple(inputs[r["model_input"]] if "model_input" in r
                 else outputs[r["stage"]][r["output"]] for r in manifest["outputs"])


class JoinTest(unittest.TestCase):
    def check_join(self, name, stages):
        work = tmpdir(self)
        out = os.path.join(work, "out")
        manifest_path = split(name, out, "--stages", stages).manifest
        manifest = train_stages(out)
        joined_path = os.path.join(work, "trained.pt")

        proc = ppc("join", manifest_path, "-o", joined_path)
        self.assertRegex(proc.stdout, SUMMARY)
        self.assertEqual(proc.stderr, "")

        original = torch.jit.load(model_path(name))
        joined = torch.jit.load(joined_path)
        self.assertEqual(joined.training, original.training)
        stage_count, params, buffers, into = re.match(SUMMARY, proc.stdout).groups()
        self.assertEqual((int(stage_count), into), (stages, joined_path))
        self.assertEqual(int(params), len(dict(original.named_parameters())))
        self.assertEqual(int(buffers), len(dict(original.named_buffers())))

        # The state_dict holds the stage tensors by name; the rest is the original's.
        joined_state, original_state = joined.state_dict(), original.state_dict()
        self.assertEqual(joined_state.keys(), original_state.keys())
        held = set()
        for stage in manifest["stages"]:
            for key, value in torch.jit.load(os.path.join(out, stage["file"])).state_dict().items():
                self.assertEqual(joined_state[key].dtype, value.dtype, key)
                self.assertTrue(torch.equal(joined_state[key], value), key)
                self.assertFalse(torch.equal(original_state[key], value),
                                 f"{key} was not perturbed")
                held.add(key)
        for key in original_state.keys() - held:
            self.assertTrue(torch.equal(joined_state[key], original_state[key]), key)

        # The joined model computes what the stages compute ...
        inputs = as_tuple(torch.load(model_path(name, ".input.pt")))
        with torch.no_grad():
            got = joined(*inputs)
        assert_outputs_close(self, run_stages(out, manifest, inputs), got, rtol=RTOL, atol=ATOL)
        # ... and so does ppc verify, which runs the stages in C++; the
        # untrained model no longer does.
        args = [manifest_path, "--input", model_path(name, ".input.pt"),
                "--rtol", RTOL, "--atol", ATOL]
        verify = ppc("verify", joined_path, *args, check=False)
        self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
        self.assertEqual(ppc("verify", model_path(name), *args, check=False).returncode, 1)
        return joined

    def test_mlp_2_stages(self):
        self.check_join("mlp", 2)

    def test_safetensors_keeps_a_module_lists_names(self):
        # Tests that `ppc join --format safetensors` of a model whose every weight lives in one
        # ModuleList (`layers.0.0.weight`, ...) keeps the model's names: `layers.` is not a
        # wrapper's prefix.
        work = tmpdir(self)
        manifest_path = split("mlp", os.path.join(work, "out"), "--stages", 2).manifest
        out = os.path.join(work, "shards")
        proc = ppc("join", manifest_path, "--format", "safetensors", "-o", out)
        self.assertRegex(proc.stdout, r"^joined 2 stages: \d+ tensors \(\d+ bytes\) into 1 "
                         r"shard in %s\n$" % re.escape(out))
        tensors = read_safetensors(os.path.join(out, "model.safetensors"))
        original = torch.jit.load(model_path("mlp")).state_dict()
        self.assertEqual(sorted(tensors), sorted(original))
        for key, value in original.items():
            self.assertTrue(torch.equal(tensors[key], value), key)

    def test_mlp_4_stages(self):
        self.check_join("mlp", 4)

    def test_resnet18_batchnorm_buffers(self):
        joined = self.check_join("resnet18", 2)
        self.assertGreater(len(dict(joined.named_buffers())), 0)

    def test_decoder_tied_weights_stay_tied(self):
        joined = self.check_join("decoder", 2)
        # One tensor under both names, as in the original, not two copies.
        self.assertEqual(joined.embed.weight.data_ptr(), joined.head.weight.data_ptr())

    def test_keeps_training_mode(self):
        work = tmpdir(self)
        model = torch.jit.load(model_path("mlp"))
        model.train()
        training = os.path.join(work, "mlp_training.pt")
        torch.jit.save(model, training)
        manifest_path = split(training, os.path.join(work, "out"), "--stages", 2).manifest
        train_stages(os.path.join(work, "out"))
        ppc("join", manifest_path, "-o", os.path.join(work, "trained.pt"))
        joined = torch.jit.load(os.path.join(work, "trained.pt"))
        self.assertTrue(all(m.training for m in joined.modules()))

    def test_tensors_no_stage_holds_are_kept(self):
        class Unused(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(4, 4)
                self.b = torch.nn.Linear(4, 2)
                self.spare = torch.nn.Parameter(torch.ones(3))

            def forward(self, x):
                return self.b(torch.relu(self.a(x)))

        work = tmpdir(self)
        model = os.path.join(work, "unused.pt")
        torch.jit.save(torch.jit.script(Unused().eval()), model)
        manifest_path = split(model, os.path.join(work, "out"), "--stages", 2).manifest
        train_stages(os.path.join(work, "out"))
        joined_path = os.path.join(work, "trained.pt")
        proc = ppc("join", manifest_path, "-o", joined_path)
        self.assertEqual(proc.stdout, "joined 2 stages: 4 parameters and 0 buffers into %s "
                         "(1 kept from the original: no stage holds it)\n" % joined_path)
        self.assertTrue(torch.equal(torch.jit.load(joined_path).spare, torch.ones(3)))

    def test_relative_source_path_is_found_from_the_manifest(self):
        # A manifest moved with its model may name the model relative to itself.
        work = tmpdir(self)
        shutil.copy(model_path("mlp"), os.path.join(work, "mlp.pt"))
        out = os.path.join(work, "out")
        manifest_path = split(os.path.join(work, "mlp.pt"), out, "--stages", 2).manifest
        manifest = train_stages(out)
        manifest["source"]["path"] = os.path.join("..", "mlp.pt")
        with open(manifest_path, "w") as f:
            json.dump(manifest, f)
        proc = ppc("join", manifest_path, "-o", os.path.join(work, "trained.pt"))
        self.assertRegex(proc.stdout, SUMMARY)


class JoinErrorsTest(unittest.TestCase):
    def setUp(self):
        self.work = tmpdir(self)
        self.out = os.path.join(self.work, "out")
        self.output = os.path.join(self.work, "trained.pt")

    def split_copy(self, name="mlp"):
        """Splits a copy of model NAME (so a test may change or remove it)."""
        copy = os.path.join(self.work, name + ".pt")
        shutil.copy(model_path(name), copy)
        return copy, split(copy, self.out, "--stages", 2).manifest

    def assert_join_refused(self, manifest_path, pattern, output=None):
        """Runs ppc join, expecting one error line matching `pattern`, exit
        status 2, and no file added to or removed from the output's folder."""
        output = output or self.output
        before = sorted(os.listdir(os.path.dirname(output)))
        proc = ppc("join", manifest_path, "-o", output, check=False)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout, "")
        self.assertRegex(proc.stderr, r"^error: " + pattern + r"[^\n]*\n$")
        self.assertEqual(sorted(os.listdir(os.path.dirname(output))), before,
                         "join left a file behind")
        return proc.stderr

    def test_join_refuses_a_missing_original_model(self):
        model, manifest_path = self.split_copy()
        train_stages(self.out)
        os.remove(model)
        self.assert_join_refused(manifest_path, "the original model '%s' named by the manifest is "
                                 "missing$" % model)

    def test_join_refuses_a_changed_original_model(self):
        model, manifest_path = self.split_copy()
        train_stages(self.out)
        size = os.path.getsize(model)
        with open(model, "ab") as f:
            f.write(b"\0")
        self.assert_join_refused(manifest_path, r"the original model '%s' does not match the "
                                 r"manifest \(%d bytes, the manifest says %d\); ppc join needs "
                                 r"the model the stages were split from$" % (model, size + 1, size))

    def test_stage_changed_without_updating_the_manifest(self):
        manifest_path = split("mlp", self.out, "--stages", 2).manifest
        train_stages(self.out, update_manifest=False)
        self.assert_join_refused(manifest_path,
                                 r"stage 0 file '[^']*stage_0.pt' does not match the "
                          r"manifest \(sha256 ")

    def test_output_is_the_manifest(self):
        manifest_path = split("mlp", self.out, "--stages", 2).manifest
        train_stages(self.out)
        before = read_bytes(manifest_path)
        self.assert_join_refused(manifest_path, "the output '%s' is the manifest; refusing to "
                                 "overwrite it$" % manifest_path, output=manifest_path)
        self.assertEqual(read_bytes(manifest_path), before)

    def test_output_is_a_stage_or_the_original(self):
        model, manifest_path = self.split_copy()
        stage = os.path.join(self.out, "stage_1.pt")
        self.assert_join_refused(
            manifest_path,
            "the output '%s' is the file of stage 1; refusing to overwrite it$" % stage,
            output=stage)
        self.assert_join_refused(manifest_path, "the output '%s' is the original model" % model,
                          output=model)
        ppc("verify", model, manifest_path, "--input", model_path("mlp", ".input.pt"))

    def test_tied_copies_differ(self):
        manifest_path = split("decoder", self.out, "--stages", 2).manifest
        tied = load_manifest(self.out)["tied_parameters"]
        self.assertEqual([(u["stage"], u["path"]) for u in tied[0]["uses"]],
                         [(0, "embed.weight"), (1, "head.weight")])
        train_stages(self.out, change=lambda stage, key, value:
                     value + 0.5 if (stage, key) == (1, "head.weight") else value)
        # An earlier output stays as it was.
        with open(self.output, "wb") as f:
            f.write(b"earlier")
        self.assert_join_refused(manifest_path, r"the copies of tied tensor 'embed.weight' differ: "
                                 r"stage 0 'embed.weight' != stage 1 'head.weight' "
                                 r"\(max abs diff 0\.5\)$")
        self.assertEqual(read_bytes(self.output), b"earlier")

    def test_shape_differs_from_the_original(self):
        manifest_path = split("mlp", self.out, "--stages", 2).manifest
        manifest = load_manifest(self.out)
        path = os.path.join(self.out, "stage_1.pt")
        module = torch.jit.load(path)
        key, value = next(iter(module.state_dict().items()))
        owner = module
        *parents, leaf = key.split(".")
        for p in parents:
            owner = getattr(owner, p)
        setattr(owner, leaf, torch.nn.Parameter(torch.zeros(3, dtype=value.dtype)))
        torch.jit.save(module, path)
        manifest["stages"][1]["sha256"] = file_sha256(path)
        with open(manifest_path, "w") as f:
            json.dump(manifest, f)
        self.assert_join_refused(manifest_path,
                                 r"stage 1 '%s' is Float \[3\]; the original model's "
                          r"is Float \[%s\]$" % (key, ", ".join(map(str, value.shape))))


if __name__ == "__main__":
    main()
