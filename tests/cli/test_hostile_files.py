#!/usr/bin/python3
"""Tests that every file ppc reads is treated as untrusted.

Each class of hostile file -- an inconsistent or out-of-range manifest, a
stage path leaving the manifest's directory, a FIFO / device / /dev/zero
symlink where a file is expected, huge or deeply nested JSON, a crafted
tensor file -- must give one `error:` line and exit 2 through `ppc inspect`,
`ppc verify` and `ppc run` (under `ppc launch`, where the rank that reads
the bad file names it and the launcher names that rank), within the timeout,
without writing an output and without touching the user's files.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import collections
import hashlib
import json
import os
import shutil
import stat
import struct
import unittest
import zipfile

import torch

from common import (class_tmpdir, free_port, launch, libtorch_major, model_path, ppc, rank_env,
                    tmpdir)

TIMEOUT = 10  # --timeout of each run; a hostile file must never make a rank wait longer.


def crafted_tensor(storage, offset, size, stride):
    """An object torch.save pickles exactly as it pickles a tensor, but with a
    view the storage does not hold (what a hand-edited file could contain)."""

    class Crafted:
        def __reduce_ex__(self, protocol):
            return (torch._utils._rebuild_tensor_v2,
                    (storage, offset, size, stride, False, collections.OrderedDict()))

    return Crafted()


def mark_zip_size(path):
    """Rewrites the first central directory entry of the zip PATH to give its
    uncompressed size as the zip64 marker 0xFFFFFFFF, with no zip64 field;
    returns the record's name."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = struct.unpack_from("<I", data, data.rfind(b"PK\x05\x06") + 16)[0]
    n = struct.unpack_from("<H", data, at + 28)[0]
    struct.pack_into("<I", data, at + 24, 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(data)
    return data[at + 46:at + 46 + n].decode()


class HostileFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.split = os.path.join(class_tmpdir(cls), "split")
        ppc("split", model_path("mlp"), "-o", cls.split, "--stages", 2)

    def setUp(self):
        self.dir = tmpdir(self)
        self.out = os.path.join(self.dir, "out")
        shutil.copytree(self.split, self.out)
        self.manifest = os.path.join(self.out, "manifest.json")
        self.input = os.path.join(self.dir, "x.pt")
        shutil.copy(model_path("mlp", ".input.pt"), self.input)
        self.output = os.path.join(self.dir, "y.pt")

    # --- helpers ---------------------------------------------------------

    def user_files(self):
        """Names, kinds and bytes of every user file, to check nothing changed."""
        files = {}
        for root, dirs, names in os.walk(self.dir):
            for n in sorted(dirs + names):
                p = os.path.join(root, n)
                st = os.lstat(p)
                data = None
                if stat.S_ISREG(st.st_mode):
                    with open(p, "rb") as f:
                        data = f.read()
                elif stat.S_ISLNK(st.st_mode):
                    data = os.readlink(p)
                files[p] = (stat.S_IFMT(st.st_mode), data)
        return files

    def edit_manifest(self, edit):
        with open(self.manifest) as f:
            m = json.load(f)
        edit(m)
        with open(self.manifest, "w") as f:
            json.dump(m, f)

    def expect_refused_unchanged(self, args, message):
        """Runs ppc ARGS; expects exactly `error: MESSAGE` and exit 2."""
        before = self.user_files()
        proc = ppc(*args, check=False, timeout=60)
        self.assertEqual((proc.returncode, proc.stderr), (2, f"error: {message}\n"), proc.stdout)
        self.assertEqual(self.user_files(), before)
        return proc

    def expect_everywhere(self, message, inspect=True):
        """The same one-line error through inspect, verify and a 2-rank run."""
        if inspect:
            self.expect_refused_unchanged(["inspect", self.manifest], message)
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input], message)
        self.expect_run({0: message, 1: message})

    def expect_run(self, messages):
        """A 2-rank `ppc run` under `ppc launch`. Every rank in `messages` reads
        the bad file; the first to fail prints its message as its one error
        line (the launcher may stop the others before they print), the
        launcher names a reader and its error, everything ends within the
        timeout, and no output or file is written."""
        before = self.user_files()
        proc = launch(2, "run", self.manifest, "--input", self.input, "--output", self.output,
                      "--timeout", TIMEOUT, "--no-meta-cache", timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        # No rank waited out its --timeout: a wait that ran out would be the
        # job's first failure and be named below. (Not a wall-clock bound: a
        # loaded CI machine once took 109 s to start two ranks of the PyTorch
        # 2.x build's ppc, whose libraries map 2.7 GB.)
        self.assertNotIn(f"within {TIMEOUT} s", proc.stderr)
        self.assertNotIn("timed out", proc.stderr)
        lines = proc.stderr.splitlines()
        printed = [r for r, m in messages.items() if f"[rank {r}] error: {m}" in lines]
        self.assertTrue(printed, proc.stderr)
        for rank, message in messages.items():
            errors = [l for l in lines if l.startswith(f"[rank {rank}] error: ")]
            self.assertIn(errors, ([], [f"[rank {rank}] error: {message}"]), proc.stderr)
        failed = [l for l in lines if l.startswith("error: rank ")]
        self.assertEqual(len(failed), 1, proc.stderr)
        # The root cause is named with its own error: a reader of the bad
        # file, not a peer that only saw it go.
        self.assertIn(failed[0], [f"error: rank {r} exited with status 2: {m}"
                                  for r, m in messages.items()], proc.stderr)
        self.assertFalse(os.path.exists(self.output))
        self.assertEqual(self.user_files(), before)

    # --- the manifest -----------------------------------------------------

    def test_index_beyond_int_is_not_narrowed(self):
        # 2^32 used to read as 0: a valid reference to stage 0's output 0.
        self.edit_manifest(lambda m: m["stages"][1]["inputs"][0]["source"].update(stage=2**32))
        self.expect_everywhere(f"{self.manifest}: expected an integer from 0 to 2147483647 at "
                               "manifest.stages[1].inputs[0].source.stage")

    def test_negative_parameter_bytes_are_refused(self):
        self.edit_manifest(lambda m: m["stages"][0].update(parameter_bytes=-1))
        self.expect_everywhere(f"{self.manifest}: expected a non-negative integer at "
                               "manifest.stages[0].parameter_bytes")

    def test_source_with_model_input_and_stage(self):
        self.edit_manifest(lambda m: m["stages"][1]["inputs"][0]["source"].update(model_input=0))
        self.expect_everywhere(f"{self.manifest}: expected either 'model_input' or 'stage' and "
                               "'output', not both at manifest.stages[1].inputs[0].source")

    def test_consumer_listed_twice_is_refused(self):
        self.edit_manifest(lambda m: m["stages"][0]["outputs"][0].update(consumers=[1, 1]))
        self.expect_everywhere(f"{self.manifest}: manifest: stages[0].outputs[0] lists "
                               "consumer 1 twice")

    def test_input_kind_unlike_its_producers_is_refused(self):
        self.edit_manifest(lambda m: m["stages"][1]["inputs"][0].update(type="int"))
        self.expect_everywhere(f"{self.manifest}: manifest: stages[1].inputs[0] is a int but "
                               "output 0 of stage 0 is a Tensor")

    def test_tied_parameter_naming_a_missing_stage(self):
        def edit(m):
            m["tied_parameters"] = [{"bytes": 4, "uses": [{"stage": 0, "path": "a"},
                                                          {"stage": 7, "path": "b"}]}]
        self.edit_manifest(edit)
        self.expect_everywhere(f"{self.manifest}: manifest: tied_parameters[0].uses[1] names "
                               "stage 7, but there are 2 stages")

    def test_stage_path_leaving_the_directory(self):
        outside = os.path.join(self.dir, "stage_1.pt")
        shutil.copy(os.path.join(self.out, "stage_1.pt"), outside)
        self.edit_manifest(lambda m: m["stages"][1].update(file="../stage_1.pt"))
        self.expect_everywhere(f"{self.manifest}: manifest: stages[1].file '../stage_1.pt' "
                               "leaves the manifest's directory")
        self.edit_manifest(lambda m: m["stages"][1].update(file=outside))
        self.expect_everywhere(f"{self.manifest}: manifest: stages[1].file '{outside}' is "
                               "absolute; stage files must be relative to the manifest's "
                               "directory")

    def test_deeply_nested_json(self):
        with open(self.manifest, "w") as f:
            f.write("[" * 50000)
        self.expect_everywhere(f"manifest '{self.manifest}' nests deeper than 256 levels")

    def test_oversized_manifest_is_refused_unread(self):
        # A sparse file: its size is checked before a byte is read.
        with open(self.manifest, "r+") as f:
            f.truncate(300 * 2**20)
        self.expect_everywhere(f"manifest '{self.manifest}' is {300 * 2**20} bytes, over the "
                               f"limit of {256 * 2**20}")

    def test_manifest_fifo_and_devices(self):
        os.remove(self.manifest)
        os.mkfifo(self.manifest)
        self.expect_everywhere(f"manifest '{self.manifest}' is not a regular file (a FIFO)")
        os.remove(self.manifest)
        os.symlink("/dev/zero", self.manifest)
        self.expect_everywhere(f"manifest '{self.manifest}' is not a regular file "
                               "(a character device)")

    # --- stage files -------------------------------------------------------

    def test_stage_file_fifo_and_dev_zero(self):
        stage = os.path.join(self.out, "stage_1.pt")
        for make, kind in ((os.mkfifo, "a FIFO"),
                           (lambda p: os.symlink("/dev/zero", p), "a character device")):
            os.remove(stage)
            make(stage)
            message = f"stage 1 file '{stage}' is not a regular file ({kind})"
            self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                           self.input],
                        message)
            self.expect_run({1: message})

    def test_stage_file_inflating_beyond_its_archive(self):
        # Tests that a TorchScript stage file whose manifest was rewritten to match it, with a
        # record that inflates to 90 MB of zeros, is refused before LibTorch's reader inflates
        # anything (a .pt2 archive is checked the same way in test_pt2_hostile).
        stage = os.path.join(self.out, "stage_0.pt")
        bomb = os.path.join(self.dir, "bomb.pt")
        size = 90 * 1000 * 1000
        with zipfile.ZipFile(stage) as zin, zipfile.ZipFile(bomb, "w") as zout:
            root = zin.namelist()[0].split("/", 1)[0]
            for info in zin.infolist():
                zout.writestr(info.filename, zin.read(info.filename))
            entry = zipfile.ZipInfo(root + "/extra/zeros")
            entry.compress_type = zipfile.ZIP_DEFLATED
            with zout.open(entry, "w") as f:
                for _ in range(size >> 20):
                    f.write(bytes(1 << 20))
                f.write(bytes(size % (1 << 20)))
        shutil.move(bomb, stage)
        with open(stage, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.edit_manifest(lambda m: m["stages"][0].update(sha256=digest))
        message = (f"'{stage}': record {root}/extra/zeros inflates to {size} bytes, more than a "
                   f"{os.path.getsize(stage)}-byte archive may hold (67108864 in all)")
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input], message)
        self.expect_run({0: message})

    def test_zip_size_marker_without_zip64_field(self):
        # Tests that a model whose central directory gives a record the zip64 size marker
        # 0xFFFFFFFF, with no zip64 field to hold the real size, is refused before LibTorch's
        # reader allocates 4 GiB for it, and that the --input reader refuses the same edit.
        model = os.path.join(self.dir, "model.pt")
        shutil.copy(model_path("mlp"), model)
        record = mark_zip_size(model)
        self.expect_refused_unchanged(["split", model, "--stages", "2", "-o",
                                       os.path.join(self.dir, "split")],
                    f"'{model}': record {record} has the zip64 size marker 0xFFFFFFFF without "
                    "a zip64 field that holds its size")
        mark_zip_size(self.input)
        message = (f"input '{self.input}' is not a valid torch.save file: a record claims "
                   f"4294967295 bytes in a file of {os.path.getsize(self.input)}")
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input], message)
        self.expect_run({0: message})

    # --- input files -------------------------------------------------------

    def test_ordered_dict_input_is_one_line_not_a_torch_assert(self):
        # LibTorch's unpickler makes a collections.OrderedDict None (it only
        # expects a tensor's empty backward hooks), then asserts on its
        # items: "INTERNAL ASSERT FAILED ... please report a bug to PyTorch".
        x = torch.load(self.input)
        torch.save(collections.OrderedDict(x=x), self.input)
        message = (f"cannot read input '{self.input}': a collections.OrderedDict holds items, "
                   "which LibTorch's reader cannot read (torch.save a dict instead: dict(d)) "
                   "at byte ")
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", self.input,
                   check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertTrue(proc.stderr.startswith("error: " + message), proc.stderr)
        self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)

    def test_input_fifo_and_dev_zero(self):
        os.remove(self.input)
        os.mkfifo(self.input)
        message = f"input '{self.input}' is not a regular file (a FIFO)"
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input], message)
        self.expect_run({0: message})
        os.remove(self.input)
        os.symlink("/dev/zero", self.input)
        message = f"input '{self.input}' is not a regular file (a character device)"
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input], message)
        self.expect_run({0: message})

    def test_empty_list_of_prompts(self):
        # Tests that a `ppc generate` prompt file holding an empty list or tuple is refused
        # before the job starts: it used to decode nothing, write [] and exit 0.
        output = os.path.join(self.dir, "tokens.pt")
        for empty in ([], ()):
            with self.subTest(empty=empty):
                prompt = os.path.join(self.dir, "prompts.pt")
                torch.save(empty, prompt)
                r = ppc("generate", self.manifest, "--prompt", prompt, "--output", output,
                        check=False, env=rank_env(0, 1, free_port()), timeout=60)
                self.assertEqual((r.returncode, r.stderr), (2, f"error: --prompt: '{prompt}' "
                                                               "holds no prompt (an empty list "
                                                               "or tuple)\n"), r.stdout)
                self.assertFalse(os.path.exists(output))

    def test_view_larger_than_storage(self):
        # torch.load refuses this file; ppc used to read past the storage.
        torch.save(crafted_tensor(torch.zeros(10).storage(), 0, (5, 64), (64, 1)), self.input)
        with self.assertRaises(RuntimeError):
            torch.load(self.input)
        message = (f"input '{self.input}' tensor 0 is malformed: its view needs 1280 bytes "
                   "but its storage holds 40")
        if libtorch_major() >= 2:  # LibTorch 2.x's unpickler checks the view first
            message = (f"cannot read input '{self.input}': Tensor: sizes 5 64, strides 64 1, "
                       "storage offset 0 and itemsize 4 require a storage of at least 1280 "
                       "bytes, but storage only has 40 bytes")
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input], message)
        self.expect_run({0: message})

    def test_negative_offset_and_overflowing_strides(self):
        # (LibTorch itself turns negative strides into contiguous ones and
        # refuses negative sizes; these two reach ppc's own checks in 1.13,
        # while LibTorch 2.x's unpickler refuses them first, in one line too.)
        storage = torch.zeros(320).storage()
        torch.save(crafted_tensor(storage, -3, (5, 64), (64, 1)), self.input)
        negative = f"input '{self.input}' tensor 0 is malformed: its storage offset is negative"
        if libtorch_major() >= 2:  # LibTorch 2.x's unpickler refuses it first
            negative = f"cannot read input '{self.input}': Tensor: invalid storage offset -3"
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input],
                    negative)
        torch.save(crafted_tensor(storage, 0, (2, 64), (2**62, 1)), self.input)
        message = f"input '{self.input}' tensor 0 is malformed: its sizes and strides overflow"
        if libtorch_major() >= 2:
            message = (f"cannot read input '{self.input}': Storage size calculation overflowed "
                       "with sizes=[2, 64] and strides=[4611686018427387904, 1]")
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input], message)
        self.expect_run({0: message})

    def test_list_of_one_tensor_is_an_input(self):
        x = torch.load(self.input)
        torch.save([x], self.input)
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", self.input)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        proc = launch(2, "run", self.manifest, "--input", self.input, "--output", self.output,
                      "--timeout", TIMEOUT, "--no-meta-cache", timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        expected = torch.load(model_path("mlp", ".expected.pt"))
        torch.testing.assert_close(torch.load(self.output), expected)

    def test_dict_input_must_use_the_manifests_names(self):
        # A dict gives the inputs by the manifest's names (TorchScript's
        # argument names, "x.1" here); any other name is refused.
        x = torch.load(self.input)
        torch.save({"x.1": x}, self.input)
        proc = ppc("verify", model_path("mlp"), self.manifest, "--input", self.input)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for value in ({"x": x}, {"x": x, "y": x}):
            torch.save(value, self.input)
            message = (f"input '{self.input}' names 'x', which the model does not take (its "
                       "inputs: x.1)")
            self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                           self.input],
                        message)
        self.expect_run({0: message})

    # --- a stage that fails ------------------------------------------------

    def test_stage_failure_names_its_cause(self):
        torch.save(torch.zeros(5, 63), self.input)
        # LibTorch 2.x names the operator that failed.
        op = "addmm: " if libtorch_major() >= 2 else ""
        self.expect_refused_unchanged(["verify", model_path("mlp"), self.manifest, "--input",
                                       self.input],
                    f"stage 0 failed: {op}mat1 and mat2 shapes cannot be multiplied "
                    "(5x63 and 64x64)")


if __name__ == "__main__":
    unittest.main()
