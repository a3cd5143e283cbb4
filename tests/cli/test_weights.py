"""Tests programs exported without weights and weights bound from Hugging
Face safetensors checkpoints (`--weights`, docs/weights.md).

The models come from tests/models/make_weight_models.py, run with the
PyTorch 2.x configuration's Python and cached in PPC_BUILD_DIR/weight-models:
an MLP exported on the meta device (fp32 and bf16) with its real weights in a
.safetensors file, and a LLaMA (untied) and a GPT-2 (tied embeddings)
decoder exported under accelerate.init_empty_weights() as docs/generate.md
exports decoders, with their real weights as save_pretrained shards. Every
test skips with the reason where ppc is built against LibTorch 1.x or no
Python with transformers, accelerate and safetensors is found.

A ppc built against LibTorch 2.x must:
  - split a program without weights, say so, list every stage's weights in
    the manifest, and refuse --cost profile in one line;
  - run, verify and train it with --weights, each rank reading only its own
    stage's tensors (weight_bytes in --stats), matching the real model, in
    fp32 and bf16;
  - split with --weights into stages that carry their weights;
  - decode the decoders on 2 and 4 ranks token for token as transformers'
    own greedy generate() on the real model, reading the shards (GPT-2's
    head, which the shards lack, tied to its embedding by config.json);
  - join the stages back into shards (`ppc join --format safetensors`) that
    from_pretrained reads as the real model's tensors;
  - refuse a missing, extra, misshapen or mistyped checkpoint tensor, and a
    stage without data run without --weights, each in its one line;
  - count --cost flops of a program without weights on the meta device, as
    with its weights.

Env: PPC, PPC_BUILD_DIR, PPC_TORCH_PYTHON (the PyTorch 2.x build).
"""
# ctest: one entry: every test skips, or none, on the same three conditions
# (WeightsTest.setUp: a LibTorch 1.x ppc, no PyTorch 2.x Python, no transformers,
# accelerate or safetensors there), checked once per process: a ctest per test
# paid for each the probe and the generator's check (5 to 8 s) on top of Python
# and torch.
import json
import os
import re
import subprocess
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, ROOT, assert_outputs_close, class_tmpdir, launch,  # noqa: E402
                    libtorch_major, main, ppc, pytorch2_python, run_pipeline, split,
                    tmpdir)

PYTHON = pytorch2_python()
GENERATOR = os.path.join(ROOT, "tests", "models", "make_weight_models.py")
MODELS = os.path.join(BUILD, "weight-models")
TIMEOUT = 60
WEIGHT_BYTES = re.compile(r"stats: rank=(\d+) .* weight_bytes=(\d+)")

NOTE_NO_WEIGHTS = ("note: the program carries no data for its weights (exported without "
                   "weights): the stages carry none either, and ppc run, verify, train and "
                   "generate read them from --weights")
ERR_EXAMPLE = ("--cost %s runs the model on --example-input, which needs its weights, and "
               "this program has none for 'l1.bias' (exported without weights): give them "
               "with --weights, or use --cost params or nodes")
# Each rank refuses its own stage; the launcher names the first to fail.
ERR_NO_DATA = {"stage %d's weight '%s' holds no data (its program was exported without "
               "weights): give the checkpoint with --weights" % (s, w)
               for s, w in ((0, "l1.weight"), (1, "l2.weight"))}
CAUSE = re.compile(r"^error: rank (\d+) exited with status 2: (.*)$", re.M)


def weight_model(name):
    return os.path.join(MODELS, name)


class WeightsTest(unittest.TestCase):
    made = None

    @classmethod
    def setUpClass(cls):
        cls.splits = {}

    def setUp(self):
        self.tmp = tmpdir(self)
        major = libtorch_major()
        if major < 2:
            self.skipTest("needs a ppc built against LibTorch 2.x (programs exported on the "
                          "meta device are .pt2); this one has LibTorch %d" % major)
        if not os.access(PYTHON, os.X_OK):
            self.skipTest("no PyTorch 2.x Python: %s is missing (scripts/python.sh build "
                          "makes it)" % PYTHON)
        if WeightsTest.made is None:
            probe = subprocess.run([PYTHON, "-c", "import transformers, accelerate, safetensors"],
                                   capture_output=True, text=True)
            WeightsTest.made = probe.returncode == 0 and subprocess.run(
                [PYTHON, "-W", "ignore", GENERATOR, MODELS], capture_output=True, text=True,
                timeout=600)
        if WeightsTest.made is False:
            self.skipTest("%s lacks transformers, accelerate or safetensors (the venv of "
                          "scripts/python.sh has them)" % PYTHON)
        r = WeightsTest.made
        self.assertEqual(r.returncode, 0, "make_weight_models.py:\n" + r.stdout + r.stderr)

    # -- helpers -------------------------------------------------------------

    def split_weights_model(self, name, stages, *extra):
        """NAME.pt2 split into STAGES stages (once per class and arguments):
        (manifest path, split process or None)."""
        key = (name, stages) + extra
        if key not in self.splits:
            out = os.path.join(class_tmpdir(type(self)), "_".join(map(str, key)).replace("/", "_"))
            s = split(weight_model(name + ".pt2"), out, "--stages", stages, *extra)
            self.splits[key] = (s.manifest, s.proc)
        return self.splits[key]

    def stage_bytes(self, manifest):
        """Per stage, the bytes of the parameters its manifest entry lists
        (what a checkpoint holds of the stage: the models' buffers are a
        decoder's caches and rotary frequencies, which it does not)."""
        with open(manifest) as f:
            m = json.load(f)
        size = {"float32": 4, "bfloat16": 2, "int64": 8}
        out = []
        for s in m["stages"]:
            total = 0
            for w in s["weights"]:
                if not w["parameter"]:
                    continue
                n = size[w["dtype"]]
                for d in w["shape"]:
                    n *= d
                total += n
            out.append(total)
        return out

    def write_checkpoint(self, tensors):
        from safetensors.torch import save_file
        path = os.path.join(self.tmp, "edited.safetensors")
        save_file(tensors, path)
        return path

    def real_mlp(self):
        from safetensors.torch import load_file
        return load_file(weight_model("mlp.safetensors"))

    def run_error(self, manifest, *extra):
        """A 2-rank `ppc run` that fails: the launcher's root-cause lines."""
        out = os.path.join(self.tmp, "refused.pt")
        r = launch(2, "run", manifest, "--input", weight_model("mlp.input.pt"), "--output", out,
                   "--timeout", TIMEOUT, *extra, timeout=120)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(out))
        return [m.group(2) for m in CAUSE.finditer(r.stderr)]

    def generate_and_compare(self, manifest, ranks, name, *extra):
        out = os.path.join(self.tmp, "tokens.pt")
        with open(weight_model(name + ".json")) as f:
            ref = json.load(f)
        r = launch(ranks, "generate", manifest, "--prompt", weight_model(name + ".prompt.pt"),
                   "--max-new-tokens", len(ref["generate"][0]), "--output", out, "--stats",
                   "--timeout", TIMEOUT, *extra, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return torch.load(out), torch.tensor(ref["generate"]), r

    # -- programs without weights --------------------------------------------

    def test_split_of_a_program_without_weights_lists_each_stages_weights(self):
        manifest, proc = self.split_weights_model("mlp", 2)
        self.assertIn(NOTE_NO_WEIGHTS, proc.stderr)
        with open(manifest) as f:
            m = json.load(f)
        names = [[w["name"] for w in s["weights"]] for s in m["stages"]]
        self.assertEqual(sorted(sum(names, [])), sorted(self.real_mlp()))
        first = m["stages"][0]["weights"][0]
        self.assertEqual(first, {"name": "l1.weight", "dtype": "float32", "shape": [32, 16],
                                 "parameter": True})
        for s, total in zip(m["stages"], self.stage_bytes(manifest)):
            self.assertEqual(s["parameter_bytes"], total)
        # The stage files carry no weight bytes: far smaller than the weights.
        for s in m["stages"]:
            path = os.path.join(os.path.dirname(manifest), s["file"])
            self.assertLess(os.path.getsize(path), 64 * 1024)
        out = os.path.join(self.tmp, "profile")
        proc = ppc("split", weight_model("mlp.pt2"), "-o", out, "--stages", 2, "--cost", "profile",
                   "--example-input", weight_model("mlp.input.pt"), check=False)
        self.assertEqual((proc.returncode, proc.stderr),
                         (2, "error: %s\n" % (ERR_EXAMPLE % "profile")))
        self.assertFalse(os.path.exists(out))
        # With --weights the profile runs on the real weights.
        out = os.path.join(self.tmp, "profiled")
        ppc("split", weight_model("mlp.pt2"), "-o", out, "--stages", 2, "--cost", "profile",
            "--example-input", weight_model("mlp.input.pt"), "--weights",
            weight_model("mlp.safetensors"))

    def test_flops_of_a_program_without_weights_are_those_with_its_weights(self):
        # --cost flops runs a program without weights on the meta device:
        # the same counts, so the same partition, as with the real weights.
        example = os.path.join(self.tmp, "example.pt")
        torch.save((torch.zeros(2, 1, dtype=torch.int64), torch.tensor([0])), example)
        for name, inputs, weights in (("mlp", weight_model("mlp.input.pt"),
                                       weight_model("mlp.safetensors")),
                                      ("llama", example, weight_model("llama"))):
            with self.subTest(model=name):
                costs = []
                for extra in ((), ("--weights", weights)):
                    manifest, _ = self.split_weights_model(name, 2, "--cost", "flops",
                                                           "--example-input",
                                             inputs, *extra)
                    with open(manifest) as f:
                        m = json.load(f)
                    self.assertEqual(m["cost_model"], "flops")
                    # Stage contents are module paths, not Dynamo's globals
                    # (transformers' apply_rotary_pos_emb; issue #44).
                    for s in m["stages"]:
                        self.assertEqual([p for p in s["modules"] if "[" in p], [])
                    costs.append([(s["predicted_cost"], s["parameter_count"])
                                  for s in m["stages"]])
                self.assertEqual(costs[0], costs[1])

    def test_run_reads_each_ranks_own_tensors_and_matches_the_model(self):
        manifest, _ = self.split_weights_model("mlp", 2)
        ran = run_pipeline(self, manifest, 2, weight_model("mlp.input.pt"),
                           os.path.join(self.tmp, "out.pt"), "--weights",
                           weight_model("mlp.safetensors"), micro=2,
                           expected=torch.load(weight_model("mlp.expected.pt")))
        read = {int(m.group(1)): int(m.group(2)) for m in WEIGHT_BYTES.finditer(ran.proc.stdout)}
        self.assertEqual(read, dict(enumerate(self.stage_bytes(manifest))), ran.proc.stdout)
        causes = self.run_error(manifest)
        self.assertEqual(len(causes), 1, causes)
        self.assertIn(causes[0], ERR_NO_DATA)

    def test_verify_and_split_with_weights(self):
        manifest, _ = self.split_weights_model("mlp", 2)
        proc = ppc("verify", weight_model("mlp.pt2"), manifest, "--input",
                   weight_model("mlp.input.pt"),
                   "--weights", weight_model("mlp.safetensors"))
        self.assertIn("verify: stages match the model", proc.stdout)
        # Stages that carry their weights run without --weights.
        carried, proc = self.split_weights_model("mlp", 2, "--weights",
                                                 weight_model("mlp.safetensors"))
        self.assertIn("note: bound 6 tensors", proc.stderr)
        self.assertNotIn(NOTE_NO_WEIGHTS, proc.stderr)
        run_pipeline(self, carried, 2, weight_model("mlp.input.pt"), os.path.join(self.tmp, "o.pt"),
                     micro=2, expected=torch.load(weight_model("mlp.expected.pt")))

    def test_train_from_a_checkpoint_matches_the_unsplit_losses_fp32_and_bf16(self):
        # docs/weights.md: fp32 to 1e-5; bf16 weights and gradients to 1e-2
        # relative (the microbatches' bf16 gradients are summed in bf16).
        for name, rel in (("mlp", 1e-5), ("mlp_bf16", 1e-2)):
            with self.subTest(name=name):
                manifest, _ = self.split_weights_model(name, 2)
                r = launch(2, "train", manifest, "--data", weight_model(name + ".data.pt"),
                           "--loss",
                           "mse", "--optimizer", "sgd", "--lr", "0.1", "--steps", 3,
                           "--microbatches", 2, "--no-meta-cache", "--timeout", TIMEOUT,
                           "--weights", weight_model(name + ".safetensors"), timeout=300)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                losses = [float(x) for x in re.findall(r"step \d+ loss (\S+)", r.stdout)]
                with open(weight_model(name + ".losses.json")) as f:
                    want = json.load(f)
                self.assertEqual(len(losses), 3, r.stdout)
                for got, expected in zip(losses, want):
                    self.assertAlmostEqual(got, expected, delta=rel * abs(expected))

    def test_bf16_program_runs_with_bf16_weights(self):
        manifest, _ = self.split_weights_model("mlp_bf16", 2)
        with open(manifest) as f:
            self.assertEqual({w["dtype"] for s in json.load(f)["stages"] for w in s["weights"]},
                             {"bfloat16"})
        ran = run_pipeline(self, manifest, 2, weight_model("mlp_bf16.input.pt"),
                           os.path.join(self.tmp, "out.pt"), "--weights",
                           weight_model("mlp_bf16.safetensors"), micro=2, expected=None)
        want = torch.load(weight_model("mlp_bf16.expected.pt"))
        self.assertEqual(ran.output.dtype, torch.bfloat16)
        # docs/weights.md: bf16 stages match the bf16 program to bf16's rounding.
        torch.testing.assert_close(ran.output.float(), want.float(), rtol=1.6e-2, atol=1e-2)

    # -- refusals --------------------------------------------------------------

    def test_each_bad_checkpoint_is_one_line(self):
        manifest, _ = self.split_weights_model("mlp", 2)
        real = self.real_mlp()
        path = os.path.join(self.tmp, "edited.safetensors")
        missing = dict(real)
        del missing["l3.bias"]
        extra = dict(real, stray=torch.zeros(2))
        shape = dict(real, **{"l1.bias": torch.zeros(31)})
        dtype = dict(real, **{"l1.bias": real["l1.bias"].to(torch.bfloat16)})
        cases = [
            (missing, [], "weight 'l3.bias' is not in checkpoint '%s' (the program carries no "
             "data for it; if it shares another weight's tensor, name that one with "
             "--weights-tied l3.bias=SOURCE)" % path),
            (extra, [], "checkpoint '%s': tensor 'stray' (in %s) is not a weight of the "
             "program (--weights-extra ignore skips it)" % (path, path)),
            (shape, [], "checkpoint '%s': tensor 'l1.bias' in %s is F32 [31], but the "
             "program's 'l1.bias' is float32 [32]" % (path, path)),
            (dtype, [], "checkpoint '%s': tensor 'l1.bias' in %s is BF16 [32], but the "
             "program's 'l1.bias' is float32 [32]" % (path, path)),
        ]
        for tensors, args, message in cases:
            with self.subTest(message=message):
                self.write_checkpoint(tensors)
                self.assertIn(message, self.run_error(manifest, "--weights", path, *args))
        # --weights-extra ignore takes the checkpoint with a stray tensor.
        self.write_checkpoint(extra)
        run_pipeline(self, manifest, 2, weight_model("mlp.input.pt"), os.path.join(self.tmp,
                                                                                   "o.pt"),
                     "--weights", path, "--weights-extra", "ignore", micro=2,
                     expected=torch.load(weight_model("mlp.expected.pt")))

    # -- decoders from save_pretrained shards ------------------------------------

    def decodes_on_2_and_4_ranks(self, name):
        """Decoder NAME, split into 2 and into 4 stages, decodes on as many
        ranks from its shards (--weights) the tokens NAME.json gives, each
        rank reading its own stage's tensors only. Returns the manifests."""
        manifests = []
        for stages in (2, 4):
            with self.subTest(stages=stages):
                manifest, _ = self.split_weights_model(name, stages)
                got, want, r = self.generate_and_compare(manifest, stages, name, "--weights",
                                                         weight_model(name))
                self.assertTrue(torch.equal(got, want), "want %s\ngot  %s" % (want, got))
                read = {int(m.group(1)): int(m.group(2))
                        for m in WEIGHT_BYTES.finditer(r.stdout)}
                self.assertEqual(read, dict(enumerate(self.stage_bytes(manifest))), r.stdout)
                manifests.append(manifest)
        return manifests

    def test_llama_decodes_as_transformers_generate_on_2_and_4_ranks(self):
        self.decodes_on_2_and_4_ranks("llama")

    def test_join_writes_shards_that_from_pretrained_reads_back(self):
        from transformers import LlamaForCausalLM
        manifest, _ = self.split_weights_model("llama", 2)
        out = os.path.join(self.tmp, "joined")
        proc = ppc("join", manifest, "--format", "safetensors", "-o", out, "--weights",
                   weight_model("llama"), "--max-shard-size", "100K")
        self.assertRegex(proc.stdout, r"^joined 2 stages: 39 tensors \(\d+ bytes\) into \d+ "
                         r"shards in .* \(without the prefix 'model\.'\)\n$")
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            self.assertGreater(len(set(json.load(f)["weight_map"].values())), 1)
        import shutil
        shutil.copy(os.path.join(weight_model("llama"), "config.json"), out)
        joined = LlamaForCausalLM.from_pretrained(out).state_dict()
        real = LlamaForCausalLM.from_pretrained(weight_model("llama")).state_dict()
        self.assertEqual(sorted(joined), sorted(real))
        for name in real:
            self.assertTrue(torch.equal(joined[name], real[name]), name)
        # Nothing the user owns is overwritten: a second join into it is refused.
        again = ppc("join", manifest, "--format", "safetensors", "-o", out, "--weights",
                    weight_model("llama"), check=False)
        self.assertEqual(again.returncode, 2, again.stderr)
        self.assertTrue(again.stderr.startswith("error: "), again.stderr)

    def test_bf16_llama_decodes_as_its_program_on_2_and_4_ranks(self):
        for manifest in self.decodes_on_2_and_4_ranks("llama_bf16"):
            with open(manifest) as f:
                dtypes = {w["dtype"] for s in json.load(f)["stages"] for w in s["weights"]
                          if w["parameter"]}
            self.assertEqual(dtypes, {"bfloat16"})

    def test_gpt2_with_tied_embeddings_decodes_as_transformers_generate_on_2_and_4_ranks(self):
        # The shards lack lm_head.weight; their config.json ties word
        # embeddings, so it is transformer.wte.weight (no --weights-tied). The
        # last stage reads the embedding it shares with the first (the
        # manifest lists lm_head.weight there, not wte).
        self.decodes_on_2_and_4_ranks("gpt2")


if __name__ == "__main__":
    main()
