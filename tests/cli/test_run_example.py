#!/usr/bin/python3
"""Tests the example program that links libppc_runtime, and the installed
CMake package: `find_package(ppc)` + `ppc::runtime` in a fresh project.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models), PPC_BUILD_DIR
(the build tree: bin/pipeline_infer, and what `cmake --install` installs).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BUILD, PPC, ROOT, expected_output, main, model_path, ppc  # noqa: E402


class RunExampleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ppc-run-example-")
        cls.manifest = os.path.join(cls.tmp, "mlp", "manifest.json")
        ppc("split", model_path("mlp"), "-o", os.path.dirname(cls.manifest), "--stages", "2")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def run_example(self, program):
        r = subprocess.run([PPC, "launch", "--nproc-per-node", "2", "--master-port", "0",
                            "--", program, self.manifest, model_path("mlp", ".input.pt"), "3"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        expected = expected_output("mlp")
        line = [l for l in r.stdout.splitlines() if "output 0:" in l]
        self.assertEqual(len(line), 1, r.stdout)
        self.assertIn("[rank 1] output 0: shape [5,10] sum ", line[0])
        total = float(line[0].split(" sum ")[1])
        self.assertAlmostEqual(total, expected.sum().item(), places=4)

    def test_example_program(self):
        self.run_example(os.path.join(BUILD, "bin", "pipeline_infer"))

    def run_training_example(self, program):
        """train_pipeline: 3 Adam steps on 2 ranks give the losses of the
        unsplit model trained in Python with the same microbatches."""
        from training import reference, write_data
        data = os.path.join(self.tmp, "mlp.mse.data.pt")
        inputs, target = write_data(data, "mlp", "mse")
        losses, _ = reference("mlp", inputs, target, 3, 2, "mse", "adam", 1e-3)
        r = subprocess.run([PPC, "launch", "--nproc-per-node", "2", "--master-port", "0",
                            "--", program, self.manifest, data, "3", "2"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        got = [float(l.split(" loss ")[1]) for l in r.stdout.splitlines() if " loss " in l]
        self.assertEqual(len(got), 3, r.stdout)
        for a, b in zip(got, losses):
            self.assertLessEqual(abs(a - b), 1e-4 * abs(b), (got, losses))
        self.assertIn("[rank 0] rank 0: ", r.stdout)

    def test_training_example(self):
        self.run_training_example(os.path.join(BUILD, "bin", "train_pipeline"))

    def test_find_package(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        project = os.path.join(self.tmp, "user")
        os.makedirs(project)
        for example in ("pipeline_infer.cpp", "train_pipeline.cpp"):
            shutil.copy(os.path.join(ROOT, "examples", example), project)
        with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.18)\n"
                    "project(user C CXX)\n"
                    "set(CMAKE_CXX_STANDARD 17)\n"
                    "find_package(ppc REQUIRED)\n"
                    "add_executable(pipeline_infer pipeline_infer.cpp)\n"
                    "target_link_libraries(pipeline_infer PRIVATE ppc::runtime)\n"
                    "add_executable(train_pipeline train_pipeline.cpp)\n"
                    "target_link_libraries(train_pipeline PRIVATE ppc::runtime)\n")
        build = os.path.join(project, "build")
        r = subprocess.run(["cmake", "-S", project, "-B", build, "-G", "Ninja",
                            "-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_BUILD_TYPE=Release"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run(["cmake", "--build", build, "-j2"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.run_example(os.path.join(build, "pipeline_infer"))
        self.run_training_example(os.path.join(build, "train_pipeline"))


if __name__ == "__main__":
    main()
