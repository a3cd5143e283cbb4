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
# ctest: one entry: every test skips, or none, on the same two conditions
# (Pt2Case.setUp: a LibTorch 1.x ppc, no PyTorch 2.x to export with).
import json
import os
import struct
import subprocess
import sys
import threading
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pt2  # noqa: E402
from common import BUILD, PPC, libtorch_major, main, ppc, pytorch2_python, tmpdir  # noqa: E402

PT2_PYTHON = pytorch2_python()
PT2_MODELS = os.path.join(BUILD, "pt2-models")
MIB = 1 << 20


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


class Pt2Case(unittest.TestCase):
    """Rewrites of pt2_mlp.pt2 and the checks of a refusal."""

    def setUp(self):
        if libtorch_major() < 2:
            self.skipTest("needs a ppc built against LibTorch 2.x; a 1.x ppc refuses every .pt2")
        if not os.access(PT2_PYTHON, os.X_OK):
            self.skipTest("no PyTorch 2.x to export the model: %s is missing "
                          "(scripts/python.sh build makes it)" % PT2_PYTHON)
        r = pt2.make_pt2_models(PT2_MODELS, PT2_PYTHON)
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


class Pt2HostileTest(Pt2Case):
    def test_rewritten_archive_is_accepted(self):
        # The zipfile rewrite itself is harmless: the cases below fail for their edit alone.
        path = self.rewrite("same", lambda name, data: data)
        ppc("split", path, "--stages", "2", "-o", os.path.join(self.tmp, "ok"))

    def test_truncated_archive_is_refused(self):
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

    def test_unknown_operator_is_refused(self):
        path = self.rewrite("unknown_op", edit_program(lambda p: first_node(p).__setitem__(
            "target", "torch.ops.aten.no_such_op.default")))
        self.expect_refused(path, ": node 'linear' (torch.ops.aten.no_such_op.default): is not "
                            "an operator of this LibTorch %s" % ppc_torch_version())

    def test_named_outputs_are_refused_not_flattened(self):
        # A dict or a transformers ModelOutput names its outputs; ppc's stages
        # and run outputs are positional, so the names would be lost.
        def named(kind, keys):
            def change(program):
                sig = program["graph_module"]["module_call_graph"][0]["signature"]
                leaf = json.loads(sig["out_spec"])[1]
                sig["out_spec"] = json.dumps([1, {"type": kind, "context": json.dumps(keys),
                                                  "children_spec": [leaf]}])
            return edit_program(change)
        path = self.rewrite("dict", named("builtins.dict", ["y"]))
        self.expect_refused(path, ": it returns a builtins.dict (y), whose names ppc would "
                            "drop; return a tensor or a tuple (in Python: the field itself, "
                            "out.logits, or tuple(out.values()))")
        path = self.rewrite("model_output", named(
            "transformers.modeling_outputs.CausalLMOutputWithPast", ["logits\n"]))
        self.expect_refused(path, ": it returns a transformers.modeling_outputs."
                            "CausalLMOutputWithPast (logits\\x0a), whose names ppc would drop; "
                            "return a tensor or a tuple (in Python: the field itself, "
                            "out.logits, or tuple(out.values()))")

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

    def test_use_of_an_undefined_value_is_refused(self):
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

    def test_unknown_archive_version_is_refused(self):
        path = self.rewrite("version", lambda name, data:
                            b"7" if name == "archive_version" else data)
        self.expect_refused(path, ": archive version '7' is not one ppc reads (0, as "
                            "torch.export.save writes)")


class Pt2BoundsTest(Pt2Case):
    """What an archive declares is checked against what it can hold before
    anything is allocated, and a weight is written back as the storage it
    was given, so that memory and stage files stay bounded by the archive."""

    def split_measured(self, path, out):
        """`ppc split PATH --stages 2 -o OUT`: (exit status, stderr, peak
        resident memory in bytes)."""
        with open(os.path.join(self.tmp, "stderr"), "w+") as err:
            p = subprocess.Popen([PPC, "split", path, "--stages", "2", "-o", out],
                                 stdout=subprocess.DEVNULL, stderr=err)
            timer = threading.Timer(300, p.kill)
            timer.start()
            try:
                _, status, usage = os.wait4(p.pid, 0)
            finally:
                timer.cancel()
            p.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            return p.returncode, err.read(), usage.ru_maxrss * 1024

    def baseline_rss(self):
        """Peak memory of splitting the unedited model, the yardstick."""
        rc, err, rss = self.split_measured(self.source, os.path.join(self.tmp, "base"))
        self.assertEqual(rc, 0, err)
        return rss

    def expect_bounded_refusal(self, path, message, bound):
        out = os.path.join(self.tmp, "out")
        rc, err, rss = self.split_measured(path, out)
        self.assertEqual((rc, err), (2, "error: '%s'%s\n" % (path, message)))
        self.assertLess(rss, bound)
        self.assertFalse(os.path.exists(out))

    def rewrite_record(self, name, record, write):
        """The source archive with RECORD (below the root) deflated and its
        bytes from WRITE(file object), streamed."""
        path = os.path.join(self.tmp, name + ".pt2")
        with zipfile.ZipFile(self.source) as zin, zipfile.ZipFile(path, "w") as zout:
            for info in zin.infolist():
                if info.filename.split("/", 1)[1] != record:
                    zout.writestr(info.filename, zin.read(info.filename))
                    continue
                entry = zipfile.ZipInfo(info.filename)
                entry.compress_type = zipfile.ZIP_DEFLATED
                with zout.open(entry, "w") as f:
                    write(f)
        return path, zin.namelist()[0].split("/", 1)[0]

    def test_inflation_is_bounded_by_the_archive(self):
        bound = self.baseline_rss() + 128 * MIB
        # Tests that a small archive whose weight inflates to 300 MB of zeros is refused.
        size = 300 * 1000 * 1000

        def zeros(f):
            for _ in range(size >> 20):
                f.write(bytes(MIB))
            f.write(bytes(size % MIB))
        bomb, root = self.rewrite_record("bomb", "data/weights/weight_2", zeros)
        self.expect_bounded_refusal(bomb, ": record %s/data/weights/weight_2 inflates to %d bytes, "
                                    "more than a %d-byte archive may hold (67108864 in all)"
                                    % (root, size, os.path.getsize(bomb)), bound)
        # Tests that a central directory declaring 3 GiB for the record LibTorch's reader reads
        # as it opens the archive is refused before the reader exists.
        path, root = self.rewrite_record("declared", ".data/version", lambda f: f.write(b"3\n"))
        declare_size(path, root + "/.data/version", 3 << 30)
        self.expect_bounded_refusal(path, ": record %s/.data/version inflates to %d bytes, more "
                                    "than a %d-byte archive may hold (67108864 in all)"
                                    % (root, 3 << 30, os.path.getsize(path)), bound)

    def test_size_marker_without_zip64_field(self):
        # Tests that a central directory giving .data/version (which LibTorch's reader reads as
        # it opens the archive) the zip64 size marker 0xFFFFFFFF without a zip64 field is
        # refused before the reader exists, which would allocate 4 GiB for it.
        path, root = self.rewrite_record("marker", ".data/version", lambda f: f.write(b"3\n"))
        declare_size(path, root + "/.data/version", 0xFFFFFFFF)
        self.expect_bounded_refusal(path, ": record %s/.data/version has the zip64 size marker "
                                    "0xFFFFFFFF without a zip64 field that holds its size"
                                    % root, self.baseline_rss() + 128 * MIB)

    def test_a_deflated_weight_is_read_by_copy(self):
        # Tests that a weight record deflated (PyTorch stores every record, and ppc views a
        # stored one in place in the mapped archive) is inflated into a copy instead: the
        # split's stage holds the same values.
        root = zipfile.ZipFile(self.source).namelist()[0].split("/", 1)[0]
        raw = zipfile.ZipFile(self.source).read(root + "/data/weights/weight_2")
        path, _ = self.rewrite_record("deflated", "data/weights/weight_2",
                                      lambda f: f.write(raw))
        out = os.path.join(self.tmp, "out")
        rc, err, _ = self.split_measured(path, out)
        self.assertEqual(rc, 0, err)
        check = (
            "import sys, torch, zipfile\n"
            "raw = zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])\n"
            "want = torch.frombuffer(bytearray(raw), dtype=torch.float32)\n"
            "for stage in sys.argv[3:]:\n"
            "    w = torch.export.load(stage).state_dict.get('layers.2.weight')\n"
            "    if w is not None:\n"
            "        print(torch.equal(w.flatten(), want))\n")
        r = subprocess.run([PT2_PYTHON, "-W", "ignore", "-c", check, self.source,
                            root + "/data/weights/weight_2",
                            os.path.join(out, "stage_0.pt2"), os.path.join(out, "stage_1.pt2")],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual((r.returncode, r.stdout), (0, "True\n"), r.stderr)

    def test_expanded_weight_keeps_its_storage(self):
        # Tests that a stride-0 [2^24, 16] float weight over a 2 KiB record stays 2 KiB in its
        # stage file (not 1 GiB), and that torch.export.load reads it back with equal values.
        def expand(name, data):
            if name != "data/weights/model_weights_config.json":
                return data
            config = json.loads(data)
            meta = config["config"]["layers.2.weight"]["tensor_meta"]
            meta["sizes"] = [{"as_int": 1 << 24}, {"as_int": 16}]
            meta["strides"] = [{"as_int": 0}, {"as_int": 1}]
            meta["storage_offset"] = {"as_int": 8}
            return json.dumps(config).encode()
        path = self.rewrite("expanded", expand)
        bound = self.baseline_rss() + 128 * MIB
        out = os.path.join(self.tmp, "out")
        rc, err, rss = self.split_measured(path, out)
        self.assertEqual(rc, 0, err)
        self.assertLess(rss, bound)
        self.assertEqual(sorted(os.listdir(out)), ["manifest.json", "stage_0.pt2", "stage_1.pt2"])
        self.assertTrue(all(os.path.getsize(os.path.join(out, f)) < 256 * 1024
                            for f in os.listdir(out)))
        check = (
            "import sys, torch, zipfile\n"
            "raw = zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])\n"
            "row = torch.frombuffer(bytearray(raw), dtype=torch.float32)[8:24]\n"
            "for stage in sys.argv[3:]:\n"
            "    w = torch.export.load(stage).state_dict.get('layers.2.weight')\n"
            "    if w is not None:\n"
            "        print(tuple(w.shape), w.stride(), w.untyped_storage().nbytes(),\n"
            "              torch.equal(w[0], row), torch.equal(w[(1 << 24) - 1], row))\n")
        root = zipfile.ZipFile(path).namelist()[0].split("/", 1)[0]
        r = subprocess.run([PT2_PYTHON, "-W", "ignore", "-c", check, path,
                            root + "/data/weights/weight_2",
                            os.path.join(out, "stage_0.pt2"), os.path.join(out, "stage_1.pt2")],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "(16777216, 16) (0, 1) 4096 True True\n")

    def test_range_constraints_as_pytorch_checks_them(self):
        program = json.loads(zipfile.ZipFile(self.source).read(
            zipfile.ZipFile(self.source).namelist()[0].split("/", 1)[0] + "/models/model.json"))
        symbol = next(iter(program["range_constraints"]))
        hint = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"][
            "hint"]["as_int"]

        def ranged(lo, hi):
            return edit_program(lambda p: p["range_constraints"].__setitem__(
                symbol, {"min_val": lo, "max_val": hi}))
        what = ": its range constraint for symbol '%s', " % symbol
        # Tests that min above max is refused, as ValueRanges refuses it.
        self.expect_refused(self.rewrite("inverted", ranged(7, 4)),
                            what + "[7, 4], has its minimum above its maximum")
        # Tests that a size may not go below 0.
        self.expect_refused(self.rewrite("negative", ranged(-3, 100)),
                            what + "[-3, 100], admits negative values for a size")
        # Tests that the range must hold the example value the program was exported with.
        self.expect_refused(self.rewrite("excludes", ranged(None, hint - 1)),
                            what + "[-inf, %d], excludes the symbol's example value %d"
                            % (hint - 1, hint))


def declare_size(path, record, size):
    """Rewrites the central directory entry of RECORD in the zip PATH to
    declare SIZE uncompressed bytes."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = struct.unpack_from("<I", data, data.rfind(b"PK\x05\x06") + 16)[0]
    while True:
        n, e, c = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46:at + 46 + n] == record.encode():
            break
        at += 46 + n + e + c
    struct.pack_into("<I", data, at + 24, size)
    with open(path, "wb") as f:
        f.write(data)


def ppc_torch_version():
    """The LibTorch version `ppc --version` names ("2.15.0")."""
    return ppc("--version").stdout.splitlines()[1].split()[1]


if __name__ == "__main__":
    main()
