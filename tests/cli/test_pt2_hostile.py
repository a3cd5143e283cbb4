#!/usr/bin/python3
"""Hostile torch.export archives (.pt2) get one `error:` line each.

Each case rewrites a real program (pt2_mlp.pt2, exported by the PyTorch 2.x
configuration's Python: tests/models/make_pt2_models.py) with Python's
zipfile, runs `ppc split` on it and checks the exit status, the exact message
and that the output directory was not created. Needs a ppc built against
LibTorch 2.x (skips otherwise: a 1.x ppc refuses every .pt2,
tests/cli/test_pt2.py).

Env: PPC, PPC_BUILD_DIR, PPC_TORCH_PYTHON (tests/CMakeLists.txt).
"""
import json
import os
import sys
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pt2  # noqa: E402
from common import BUILD, libtorch_major, main, ppc, pytorch2_python, tmpdir  # noqa: E402

PT2_PYTHON = pytorch2_python()
PT2_MODELS = os.path.join(BUILD, "pt2-models")


def edit_program(change):
    """An edit of models/model.json by CHANGE(program dict)."""
    def edit(name, data):
        if name != "models/model.json":
            return data
        program = json.loads(data)
        change(program)
        return json.dumps(program).encode()
    return edit


def first_node(program):
    return program["graph_module"]["graph"]["nodes"][0]


class Pt2HostileTest(unittest.TestCase):
    def setUp(self):
        if libtorch_major() < 2:
            self.skipTest("needs a ppc built against LibTorch 2.x; a 1.x ppc refuses every .pt2")
        if not os.access(PT2_PYTHON, os.X_OK):
            self.skipTest("no PyTorch 2.x to export the model: %s is missing "
                          "(scripts/python.sh build makes it)" % PT2_PYTHON)
        r = pt2.generate(PT2_MODELS, PT2_PYTHON)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.source = pt2.files(PT2_MODELS, "pt2_mlp")[".pt2"]
        self.tmp = tmpdir(self)

    def rewrite(self, name, edit):
        """The source archive with each record's bytes through EDIT(record
        name below the root, bytes)."""
        path = os.path.join(self.tmp, name + ".pt2")
        with zipfile.ZipFile(self.source) as zin, \
                zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                data = edit(info.filename.split("/", 1)[1], zin.read(info.filename))
                if data is not None:
                    zout.writestr(info.filename, data)
        return path

    def expect_refused(self, path, message):
        out = os.path.join(self.tmp, "out")
        r = ppc("split", path, "--stages", "2", "-o", out, check=False)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "error: '%s'%s\n" % (path, message))
        self.assertFalse(os.path.exists(out))

    def test_rewritten_archive_is_accepted(self):
        # The zipfile rewrite itself is harmless: the cases below fail for their edit alone.
        path = self.rewrite("same", lambda name, data: data)
        ppc("split", path, "--stages", "2", "-o", os.path.join(self.tmp, "ok"))

    def test_truncated_zip(self):
        path = os.path.join(self.tmp, "truncated.pt2")
        with open(self.source, "rb") as f, open(path, "wb") as g:
            g.write(f.read()[:3000])
        out = os.path.join(self.tmp, "out")
        r = ppc("split", path, "--stages", "2", "-o", out, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"\Aerror: '%s' is not a TorchScript module or torch.export "
                         r"program \(\.pt2\): it is not a readable zip archive: [^\n]*\(formats "
                         r"ppc reads: torchscript, pt2\)\n\Z" % path)
        self.assertFalse(os.path.exists(out))

    def test_weight_shorter_than_its_config(self):
        path = self.rewrite("short", lambda name, data:
                            data[:len(data) // 2] if name == "data/weights/weight_0" else data)
        self.expect_refused(path, ": weight 'layers.0.weight''s data data/weights/weight_0 "
                            "holds 1024 bytes, but its config (Float [32, 16]) needs 2048")

    def test_unknown_operator(self):
        path = self.rewrite("unknown_op", edit_program(lambda p: first_node(p).__setitem__(
            "target", "torch.ops.aten.no_such_op.default")))
        self.expect_refused(path, ": node 'linear' (torch.ops.aten.no_such_op.default): is not "
                            "an operator of this LibTorch %s" % ppc_torch_version())

    def test_schema_version_from_the_future(self):
        path = self.rewrite("future", edit_program(
            lambda p: p["schema_version"].__setitem__("major", 99)))
        minor = None

        def read_minor(name, data):
            nonlocal minor
            if name == "models/model.json":
                minor = json.loads(data)["schema_version"]["minor"]
            return data
        self.rewrite("scratch", read_minor)
        self.expect_refused(path, ": its schema version 99.%d is newer than the one ppc reads "
                            "(8.x, torch 2.x's); export it with a torch whose schema is 8.x"
                            % minor)

    def test_undefined_value(self):
        path = self.rewrite("undefined", edit_program(
            lambda p: first_node(p)["inputs"][0]["arg"].__setitem__(
                "as_tensor", {"name": "nowhere"})))
        self.expect_refused(path, ": node 'linear' (torch.ops.aten.linear.default): uses "
                            "'nowhere', which is not defined before it")

    def test_deeply_nested_json(self):
        path = self.rewrite("deep", lambda name, data:
                            b"[" * 100000 + b"]" * 100000 if name == "models/model.json"
                            else data)
        self.expect_refused(path, ": models/model.json nests deeper than 256 levels")

    def test_archive_version(self):
        path = self.rewrite("version", lambda name, data:
                            b"7" if name == "archive_version" else data)
        self.expect_refused(path, ": archive version '7' is not one ppc reads (0, as "
                            "torch.export.save writes)")


def ppc_torch_version():
    """The LibTorch version `ppc --version` names ("2.15.0")."""
    return ppc("--version").stdout.splitlines()[1].split()[1]


if __name__ == "__main__":
    main()
