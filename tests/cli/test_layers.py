#!/usr/bin/python3
"""Tests that the build holds the layers docs/architecture.md draws (issue
#40): scripts/check_layers.py passes on the tree, and fails, naming the
line, on a planted upward #include, on an edge the doc lists that nothing
uses, on an environment read outside LaunchEnv, on a file over 900 lines,
on a flag named in the runtime, and on a fourth function over 100 lines.

Env: none (reads the checkout).
"""
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, main, tmpdir  # noqa: E402

CHECK = os.path.join(ROOT, "scripts", "check_layers.py")


def run_layer_check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True,
                          timeout=120)


class LayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tmpdir(self)

    def copy(self):
        """The parts and the doc, copied into a scratch checkout."""
        root = os.path.join(self.tmp, "tree")
        for d in ("lib", "passes", "runtime", "tools", "include"):
            shutil.copytree(os.path.join(ROOT, d), os.path.join(root, d))
        os.makedirs(os.path.join(root, "docs"))
        shutil.copy(os.path.join(ROOT, "docs", "architecture.md"), os.path.join(root, "docs"))
        return root

    def append(self, root, path, text):
        with open(os.path.join(root, path), "a") as f:
            f.write(text)

    def layer_errors(self, root):
        r = run_layer_check(root)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        return r.stdout.splitlines()

    def test_the_tree_keeps_the_layers(self):
        r = run_layer_check(ROOT)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"^check_layers: \d+ parts, \d+ edges, every include an "
                                   r"edge of the graph\n$")

    def test_a_planted_upward_include_fails(self):
        root = self.copy()
        with open(os.path.join(root, "runtime", "link", "Link.cpp")) as f:
            lines = len(f.read().splitlines())
        self.append(root, "runtime/link/Link.cpp", '#include "runtime/train/Trainer.h"\n')
        self.assertEqual(self.layer_errors(root), [
            'error: runtime/link/Link.cpp:%d: runtime/link includes '
            '"runtime/train/Trainer.h" (runtime/train), not an edge of the part graph in '
            'docs/architecture.md' % (lines + 1)])

    def test_the_doc_and_the_code_must_agree(self):
        root = self.copy()
        doc = os.path.join(root, "docs", "architecture.md")
        with open(doc) as f:
            text = f.read()
        text = text.replace("runtime/schedule -> lib\n",
                            "runtime/schedule -> lib runtime/platform\n", 1)
        with open(doc, "w") as f:
            f.write(text)
        self.assertEqual(self.layer_errors(root), [
            "error: docs/architecture.md: the part graph's edge runtime/schedule -> "
            "runtime/platform is used by no #include"])

    def test_environment_reads_and_long_files_fail(self):
        root = self.copy()
        self.append(root, "runtime/exec/Trace.cpp", 'static const char *x = getenv("X");\n'
                    + "\n" * 900)
        errors = self.layer_errors(root)
        self.assertEqual(len(errors), 2, errors)
        self.assertRegex(errors[0], r"^error: runtime/exec/Trace\.cpp has \d+ lines, over the "
                                    r"limit of 900$")
        self.assertRegex(errors[1], r"^error: runtime/exec/Trace\.cpp:\d+: reads the "
                                    r"environment outside runtime/link/LaunchEnv")

    def test_a_flag_named_in_the_runtime_fails(self):
        root = self.copy()
        with open(os.path.join(root, "runtime", "train", "Save.cpp")) as f:
            lines = len(f.read().splitlines())
        self.append(root, "runtime/train/Save.cpp",
                    'static const char *kFlag = "--save";\n')
        self.assertEqual(self.layer_errors(root), [
            "error: runtime/train/Save.cpp:%d: names a flag in the runtime (name options by "
            "optionName(), lib/OptionName.h)" % (lines + 1)])

    def test_a_fourth_function_over_100_lines_fails(self):
        root = self.copy()
        with open(os.path.join(root, "lib", "Manifest.cpp")) as f:
            lines = len(f.read().splitlines())
        # Two functions of the tree are over 100 lines; two more make four.
        body = "".join("  total += %d;\n" % i for i in range(100))
        self.append(root, "lib/Manifest.cpp",
                    "int longOne(int total) {\n%s  return total;\n}\n" % body
                    + "static int\nlongTwo(int total) {\n%s  if (total) {\n  }\n"
                      "  return total;\n}\n" % body)
        errors = [e for e in self.layer_errors(root) if "functions are over" in e]
        self.assertEqual(len(errors), 4, errors)
        self.assertIn("error: lib/Manifest.cpp:%d: longOne has 103 lines; 4 functions are "
                      "over 100 lines, more than the 3 allowed" % (lines + 1), errors)
        # Counted from the line that names it (the return type on its own line
        # above is not).
        self.assertIn("error: lib/Manifest.cpp:%d: longTwo has 105 lines; 4 functions are "
                      "over 100 lines, more than the 3 allowed" % (lines + 105), errors)


if __name__ == "__main__":
    main()
