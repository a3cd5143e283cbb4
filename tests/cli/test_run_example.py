#!/usr/bin/python3
"""Tests the example programs on libppc_runtime's public API (<ppc/ppc.h>),
built in the tree: their outputs against the unsplit model's, and the errors
the API throws (ppc::api::Error) as the examples print them.
tests/cli/test_install.py builds the same examples against an installed ppc
and reuses the checks here.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models), PPC_BUILD_DIR
(the build tree: bin/pipeline_infer, bin/train_pipeline).
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, PPC, assert_outputs_close, class_tmpdir, expected_output,  # noqa: E402
                    launch, main, model_path, split)


def check_infer(test, launcher, program, manifest, output):
    """pipeline_infer on 2 ranks with 3 microbatches: the output rank prints
    the output's shape and sum, and the file it saves holds the unsplit
    model's output."""
    import torch
    r = launch(2, manifest, model_path("mlp", ".input.pt"), "3", output, program=program,
               binary=launcher)
    test.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    expected = expected_output("mlp")
    line = [l for l in r.stdout.splitlines() if "output 0:" in l]
    test.assertEqual(len(line), 1, r.stdout)
    test.assertIn("[rank 1] output 0: shape [5,10] sum ", line[0])
    total = float(line[0].split(" sum ")[1])
    test.assertAlmostEqual(total, expected.sum().item(), places=4)
    test.assertIn("[rank 1] stats: rank=1 meta=inferred ", r.stdout)
    assert_outputs_close(test, expected, torch.load(output))


def check_example_training(test, launcher, program, manifest, tmp):
    """train_pipeline: 3 Adam steps on 2 ranks give the losses of the
    unsplit model trained in Python with the same microbatches."""
    from training import reference, write_data
    data = os.path.join(tmp, "mlp.mse.data.pt")
    inputs, target = write_data(data, "mlp", "mse")
    losses, _ = reference("mlp", inputs, target, 3, 2, "mse", "adam", 1e-3)
    r = launch(2, manifest, data, "3", "2", program=program, binary=launcher)
    test.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    got = [float(l.split(" loss ")[1]) for l in r.stdout.splitlines() if " loss " in l]
    test.assertEqual(len(got), 3, r.stdout)
    for a, b in zip(got, losses):
        test.assertLessEqual(abs(a - b), 1e-4 * abs(b), (got, losses))
    test.assertIn("[rank 0] rank 0: ", r.stdout)


class RunExampleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.manifest = split("mlp", os.path.join(cls.tmp, "mlp"), "--stages", "2").manifest
        cls.infer = os.path.join(BUILD, "bin", "pipeline_infer")

    def test_pipeline_infer_example_matches_the_unsplit_model(self):
        check_infer(self, PPC, self.infer, self.manifest, os.path.join(self.tmp, "out.pt"))

    def test_train_pipeline_example_matches_python_losses(self):
        check_example_training(self, PPC, os.path.join(BUILD, "bin", "train_pipeline"),
                               self.manifest, self.tmp)

    def run_example_rank(self, *args, env=None):
        """pipeline_infer run directly, as rank 0 of 1 unless `env` is given."""
        if env is None:
            env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT="1")
        return subprocess.run([self.infer, *args], capture_output=True, text=True,
                              timeout=120, env=env)

    def test_errors_are_one_line(self):
        """ppc::api::Error carries the message ppc run prints, options named by
        their RunOptions field; the example prints it and exits 2."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        cases = [
            (("m.json", "in.pt"), env,
             "error: RANK is not set; start each rank under ppc launch or torchrun\n"),
            ((self.manifest, "in.pt", "0"), None,
             "error: microbatches 0 is not an integer in 1..65536\n"),
        ]
        for args, case_env, message in cases:
            r = self.run_example_rank(*args, env=case_env)
            self.assertEqual((r.returncode, r.stderr), (2, message), r.stdout)
        r = self.run_example_rank()
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage: pipeline_infer MANIFEST INPUT.pt", r.stderr)

    def test_missing_input_fails_on_its_rank(self):
        missing = os.path.join(self.tmp, "missing.pt")
        r = launch(2, self.manifest, missing, "2", program=self.infer,
                   launcher=("--timeout", "120"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("[rank 0] error: cannot read input '%s': No such file or directory\n"
                      % missing, r.stderr)


if __name__ == "__main__":
    main()
