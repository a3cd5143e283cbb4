#!/usr/bin/python3
"""Tests that no name or path from outside reaches the terminal raw (issue
#45, class 5): one rule (terminalText, lib/Error.h) escapes control bytes
(newline, ESC, ...) as \\xHH wherever ppc prints such text.

A table of hostile names, each carrying an ESC sequence and a newline that
would forge an `error:` line, goes through:
  - a path on the command line (`ppc verify --input`, `ppc inspect`), whose
    error is one line, escaped;
  - a worker's own error line, which `ppc launch` reports as the root cause
    in one escaped line;
  - a manifest's labels, module names, state names and paths, which
    `ppc inspect` prints (table and --dot) escaped.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import json
import os
import shutil
import unittest

from common import class_tmpdir, launch, main, model_path, ppc, split_at, tmpdir

# Each name holds an ESC sequence (red, clear screen) and a newline that
# would start a forged line.
HOSTILE = [
    "in\x1b[31m\nerror: forged",
    "\x1b]0;title\x07x\r\nnote: forged",
    "tab\tdel\x7f\x1b[2J",
]


def escaped(text):
    """`text` as terminalText shows it (control bytes as \\xHH)."""
    return "".join("\\x%02x" % ord(c) if ord(c) < 0x20 or ord(c) == 0x7f else c for c in text)


class HostileNamesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.manifest = split_at("mlp", 2, os.path.join(class_tmpdir(cls), "mlp2"))

    def setUp(self):
        self.tmp = tmpdir(self)

    def assertClean(self, text):
        """No control byte other than line ends."""
        self.assertEqual([c for c in text if (ord(c) < 0x20 and c != "\n") or ord(c) == 0x7f],
                         [], repr(text))

    def test_a_path_on_the_command_line_is_one_escaped_line(self):
        for name in HOSTILE:
            with self.subTest(name=name):
                path = os.path.join(self.tmp, name)
                for args in (["verify", model_path("mlp"), self.manifest, "--input", path],
                             ["inspect", path]):
                    proc = ppc(*args, check=False)
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertEqual(proc.stderr.count("\n"), 1, repr(proc.stderr))
                    self.assertTrue(proc.stderr.startswith("error: "), proc.stderr)
                    self.assertIn(escaped(name), proc.stderr)
                    self.assertClean(proc.stderr)

    def test_the_launchers_root_cause_line_is_escaped(self):
        # A worker's own lines are its output, forwarded as they are; the
        # error line the launcher reports as the root cause is escaped.
        line = "in\x1b[31m red\x1b]0;title\x07"
        r = launch(1, "-c", 'printf "error: %s\\n" "$1" >&2; exit 3', "sh", line,
                   program="sh", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        last = r.stderr.splitlines()[-1]
        self.assertEqual(last, "error: rank 0 exited with status 3: " + escaped(line))

    def test_inspect_prints_a_hostile_manifests_names_escaped(self):
        out = os.path.join(self.tmp, "m")
        shutil.copytree(os.path.dirname(self.manifest), out)
        path = os.path.join(out, "manifest.json")
        with open(path) as f:
            m = json.load(f)
        m["source"]["path"] = HOSTILE[0]
        m["inputs"][0]["name"] = HOSTILE[1]
        for stage in m["stages"]:
            if stage.get("modules"):
                stage["modules"][0] = HOSTILE[2]
            for o in stage["outputs"]:
                o["label"] = HOSTILE[0]
        with open(path, "w") as f:
            json.dump(m, f)
        dot = os.path.join(self.tmp, "g.dot")
        proc = ppc("inspect", path, "--dot", dot, check=False)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertClean(proc.stdout + proc.stderr)
        # The source path, module names and output labels, each escaped.
        self.assertIn("model: " + escaped(HOSTILE[0]) + " (", proc.stdout)
        self.assertIn("  stage 0: " + escaped(HOSTILE[2]) + ", ", proc.stdout)
        self.assertIn("model outputs: stage 1.0 (" + escaped(HOSTILE[0]) + ")", proc.stdout)
        # The graph's labels too (a model input's name is shown there only).
        with open(dot) as f:
            graph = f.read()
        self.assertClean(graph)
        self.assertIn(escaped(HOSTILE[1]).replace("\\", "\\\\"), graph)


if __name__ == "__main__":
    main()
