#!/usr/bin/python3
"""Tests the installed ppc as a user meets it: `cmake --install` into a fresh
prefix, the installed `ppc` started with no LD_LIBRARY_PATH (its RPATH finds
libppc_runtime), and examples/ configured on its own against the prefix (a
CXX-only project, find_package(ppc)), built without LLVM's headers on its
include path, and run under the installed `ppc launch`, its outputs checked
against the unsplit model's.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models), PPC_BUILD_DIR
(the build tree `cmake --install` installs from).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BUILD, ROOT, class_tmpdir, main, split  # noqa: E402
from test_run_example import check_example_training, check_infer  # noqa: E402


def run_captured(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.prefix = os.path.join(cls.tmp, "prefix")
        cls.installed = run_captured(["cmake", "--install", BUILD, "--prefix", cls.prefix])
        cls.ppc = os.path.join(cls.prefix, "bin", "ppc")
        # Nothing may reach the installed ppc or the examples through the
        # environment: no LD_LIBRARY_PATH, no LLVM or ppc include path.
        cls.env = {k: v for k, v in os.environ.items()
                   if k not in ("LD_LIBRARY_PATH", "CPATH", "CPLUS_INCLUDE_PATH")}
        cls.build = os.path.join(cls.tmp, "examples")
        launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
        cls.configured = run_captured(["cmake", "-S", os.path.join(ROOT, "examples"), "-B",
                                       cls.build,
                              "-G", "Ninja", "-DCMAKE_PREFIX_PATH=" + cls.prefix,
                              "-DCMAKE_BUILD_TYPE=Release", *launcher], env=cls.env)
        cls.built = None
        if cls.configured.returncode == 0:
            cls.built = run_captured(["cmake", "--build", cls.build, "-j2"], env=cls.env)

    def setUp(self):
        self.assertEqual(self.installed.returncode, 0,
                         self.installed.stdout + self.installed.stderr)

    def test_install_ships_only_the_public_headers(self):
        """Public headers under include/ppc/, the internal ones not at all."""
        include = os.path.join(self.prefix, "include")
        self.assertEqual(sorted(os.listdir(include)), ["ppc"])
        self.assertEqual(sorted(os.listdir(os.path.join(include, "ppc"))),
                         ["Error.h", "Generator.h", "IO.h", "Pipeline.h", "Trainer.h", "ppc.h"])
        for name in os.listdir(os.path.join(include, "ppc")):
            with open(os.path.join(include, "ppc", name)) as f:
                text = f.read()
            self.assertNotRegex(text, r'#include\s*[<"](llvm|runtime|lib)/|llvm::', name)
        config = os.path.join(self.prefix, "lib", "cmake", "ppc", "ppcConfig.cmake")
        with open(config) as f:
            text = f.read()
        self.assertNotIn("find_dependency(LLVM", text)
        self.assertNotIn("LLVM_INCLUDE_DIRS", text)

    def test_installed_ppc_finds_its_library(self):
        r = run_captured([self.ppc, "--version"], env=self.env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(r.stdout.startswith("ppc 0.1.0\n"), r.stdout)
        r = run_captured(["readelf", "-d", self.ppc])
        self.assertIn("[$ORIGIN/../lib", r.stdout)
        # Every other entry is a directory that exists (PyTorch's MKL config
        # once added /lib/intel64_win and /lib/win-x64).
        (path,) = re.findall(r"R(?:UN)?PATH\)\s+Library r(?:un)?path: \[(.*)\]", r.stdout)
        for entry in filter(None, path.split(":")):
            if not entry.startswith("$ORIGIN"):
                self.assertTrue(os.path.isdir(entry), "RUNPATH entry %s: %s" % (entry, path))

    def test_examples_build_without_llvm(self):
        """A CXX-only project configures (LLVM's package, which needs C, is not
        looked for), and nothing it compiles sees LLVM's headers."""
        self.assertEqual(self.configured.returncode, 0,
                         self.configured.stdout + self.configured.stderr)
        self.assertEqual(self.built.returncode, 0, self.built.stdout + self.built.stderr)
        with open(os.path.join(self.build, "compile_commands.json")) as f:
            commands = json.load(f)
        self.assertEqual(sorted(os.path.basename(c["file"]) for c in commands),
                         ["generate.cpp", "pipeline_infer.cpp", "train_pipeline.cpp"])
        for c in commands:
            self.assertNotIn("llvm", c["command"].lower(), c["command"])
            self.assertIn("-isystem " + os.path.join(self.prefix, "include"), c["command"])

    def test_installed_examples_build_and_run(self):
        self.assertEqual(self.built and self.built.returncode, 0, "examples not built")
        manifest = split("mlp", os.path.join(self.tmp, "mlp"), "--stages", "2", env=self.env,
                         binary=self.ppc).manifest
        check_infer(self, self.ppc, os.path.join(self.build, "pipeline_infer"), manifest,
                    os.path.join(self.tmp, "out.pt"))
        check_example_training(self, self.ppc, os.path.join(self.build, "train_pipeline"), manifest,
                               self.tmp)


if __name__ == "__main__":
    main()
