"""Tests that ppc schedule prints a training schedule's grid (one row per
rank, a peak-activations line) and its simulated bubble, per-rank peak
activations and messages (with --costs, or a manifest's costs), compares
every schedule (--compare), writes and reads PyTorch pipelining's
compute_only and compute_comms CSVs, and reports bad arguments and bad
schedules as one `error:` line with exit status 2."""
import csv
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (ROOT, class_tmpdir, expect_error, free_port, main,  # noqa: E402
                    model_path, ppc, rank_env, tmpdir)

FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "schedule")
CELL = re.compile(r"^\d+[FBIW]\d+$")
KINDS = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "looped-bfs", "interleaved-zb"]
V_KINDS = ["zbv", "dualpipev"]
ALL_KINDS = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "looped-bfs", "interleaved-zb",
             "zbv", "dualpipev"]


def grid_rows(stdout):
    """The rows of a printed grid: {rank: [cell, ...]}."""
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"^rank (\d+): (.*)$", line)
        if m:
            rows[int(m.group(1))] = m.group(2).split()
    return rows


def line(stdout, prefix):
    """The output line that starts with `prefix`."""
    found = [s for s in stdout.splitlines() if s.startswith(prefix)]
    assert len(found) == 1, stdout
    return found[0]


def v_rank(stage, ranks):
    return stage if stage < ranks else 2 * ranks - 1 - stage


class ScheduleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = class_tmpdir(cls)
        cls.four_on_two = {}

    def schedule_fails(self, args, message=None):
        return expect_error(self, ["schedule", *args], message, quiet=True)

    def four_stages_on_2_ranks(self, kind):
        """`ppc schedule --schedule KIND --stages 4 --ranks 2 --microbatches 4
        --csv FILE --csv-format compute_comms`, run once per class: its
        output and FILE. test_compare_lists_every_schedule reads its bubble and makespan,
        test_compute_comms_csv its grid and FILE (one run of each kind, not
        one per test)."""
        if kind not in self.four_on_two:
            path = os.path.join(self.tmp, kind + ".compute_comms.csv")
            out = ppc("schedule", "--schedule", kind, "--stages", 4, "--ranks", 2,
                      "--microbatches", 4, "--csv", path, "--csv-format", "compute_comms").stdout
            self.four_on_two[kind] = out, path
        return self.four_on_two[kind]

    def test_prints_one_row_per_rank(self):
        # (ppc starts in about a second: a few cases, each kind at least once.)
        cases = [("gpipe", 4, 2, 3), ("1f1b", 4, 4, 8), ("1f1b", 6, 3, 1),
                 ("interleaved-1f1b", 4, 2, 5), ("interleaved-1f1b", 3, 1, 2),
                 ("zb-h1", 4, 4, 8), ("zb-h1", 2, 2, 1), ("looped-bfs", 4, 2, 3),
                 ("interleaved-zb", 4, 2, 4), ("zbv", 4, 2, 3), ("dualpipev", 4, 2, 4),
                 ("zbv", 8, 4, 8)]
        self.assertEqual({case[0] for case in cases}, set(ALL_KINDS))
        for kind, stages, ranks, micro in cases:
            with self.subTest(kind=kind, stages=stages, ranks=ranks, micro=micro):
                out = ppc("schedule", "--schedule", kind, "--stages", stages,
                          "--ranks", ranks, "--microbatches", micro).stdout
                lines = out.splitlines()
                self.assertTrue(lines[0].startswith(
                    f"{kind}: {stages} stages on {ranks} ranks, {micro} microbatches, "),
                    lines[0])
                rows = grid_rows(out)
                self.assertEqual(sorted(rows), list(range(ranks)))
                self.assertEqual(len(lines), ranks + 5)
                self.assertTrue(lines[ranks + 1].startswith("peak activations: stage0="))
                self.assertTrue(lines[ranks + 2].startswith("bubble: "), lines[ranks + 2])
                # Every column is a time step: the rows are equally long.
                self.assertEqual(len({len(r) for r in rows.values()}), 1)
                for r, cells in rows.items():
                    for cell in cells:
                        self.assertTrue(cell == "." or CELL.match(cell), cell)
                        if cell != ".":
                            stage = int(re.match(r"\d+", cell).group())
                            self.assertEqual(v_rank(stage, ranks) if kind in V_KINDS
                                             else stage % ranks, r, cell)

    def test_peak_activations_per_stage_by_schedule(self):
        def peak(kind, stages, micro):
            out = ppc("schedule", "--schedule", kind, "--stages", stages,
                      "--microbatches", micro).stdout
            return line(out, "peak activations: stage")
        self.assertEqual(peak("gpipe", 4, 8),
                         "peak activations: stage0=8 stage1=8 stage2=8 stage3=8")
        self.assertEqual(peak("1f1b", 4, 8),
                         "peak activations: stage0=4 stage1=3 stage2=2 stage3=1")
        self.assertEqual(peak("1f1b", 4, 2),
                         "peak activations: stage0=2 stage1=2 stage2=2 stage3=1")
        self.assertEqual(peak("zb-h1", 4, 8),
                         "peak activations: stage0=4 stage1=4 stage2=4 stage3=4")

    def test_csv_has_one_row_per_rank(self):
        d = tmpdir(self)
        for kind in KINDS:
            per_pair = 3 if kind in ("zb-h1", "interleaved-zb") else 2
            # interleaved-zb takes a multiple of its rounds (2 of 2 here).
            micro = 4 if kind == "interleaved-zb" else 5
            with self.subTest(kind=kind):
                path = os.path.join(d, kind + ".csv")
                out = ppc("schedule", "--schedule", kind, "--stages", 4, "--ranks", 2,
                          "--microbatches", micro, "--csv", path).stdout
                with open(path, newline="") as f:
                    rows = list(csv.reader(f))
                self.assertEqual(len(rows), 2)
                for r, row in enumerate(rows):
                    # Two stages per rank: F and B, or F, I and W, per microbatch.
                    self.assertEqual(len(row), 2 * micro * per_pair)
                    for cell in row:
                        self.assertRegex(cell, CELL)
                        self.assertEqual(int(re.match(r"\d+", cell).group()) % 2, r)
                    # The grid shows the same actions in the same order.
                    grid = [c for i, c in enumerate(grid_rows(out)[r])
                            if c != "." and (i == 0 or c != grid_rows(out)[r][i - 1])]
                    self.assertEqual(grid, row)
                with open(path, "rb") as f:
                    self.assertTrue(f.read().endswith(b"\r\n"))
                # Read back: the same grid.
                again = ppc("schedule", "--from-csv", path, "--stages", 4, "--ranks", 2,
                            "--microbatches", micro).stdout
                self.assertEqual(grid_rows(again), grid_rows(out))

    def test_reads_pytorch_dump(self):
        path = os.path.join(FIXTURES, "pytorch_2stages_4mb.csv")
        out = ppc("schedule", "--from-csv", path, "--stages", 2, "--microbatches", 4).stdout
        self.assertEqual(sorted(grid_rows(out)), [0, 1])
        self.assertEqual(line(out, "peak activations: stage"),
                         "peak activations: stage0=3 stage1=1")

    def test_errors_are_one_line(self):
        self.schedule_fails(["--schedule", "interleaved-1f1b", "--stages", 2, "--microbatches", 4],
                            "interleaved-1f1b needs at least 2 stages per rank "
                            "(2 stages on 2 ranks)")
        self.schedule_fails(["--schedule", "1f1b", "--stages", 4, "--ranks", 3,
                             "--microbatches", 4],
                            "--stages 4 is not a multiple of --ranks 3 "
                            "(stage k runs on rank k mod 3)")
        self.schedule_fails(["--schedule", "1f1b", "--stages", 2, "--ranks", 4,
                             "--microbatches", 4])
        for bad in ["0", "-1", "x", "100000"]:
            self.schedule_fails(["--schedule", "1f1b", "--stages", 4, "--microbatches", bad])
        self.schedule_fails(["--schedule", "zb", "--stages", 4, "--microbatches", 2],
                            "--schedule: must be gpipe, 1f1b, interleaved-1f1b, zb-h1, "
                            "looped-bfs, interleaved-zb, zbv or dualpipev "
                            "(got 'zb') (see ppc schedule --help)")
        self.schedule_fails(["--stages", 4, "--microbatches", 2],
                            "ppc schedule takes one of --schedule NAME, --from-csv FILE and "
                            "--compare")
        self.schedule_fails(["--schedule", "1f1b", "--microbatches", 2],
                            "ppc schedule needs --stages N or --manifest FILE")
        self.schedule_fails(["--schedule", "zbv", "--stages", 4, "--ranks", 4,
                             "--microbatches", 4],
                            "zbv needs exactly 2 stages per rank (4 stages on 4 ranks)")
        self.schedule_fails(["--schedule", "dualpipev", "--stages", 4, "--microbatches", 3],
                            "dualpipev needs at least as many microbatches as stages (4), got 3")

    def test_bad_csv_files(self):
        deadlock = os.path.join(FIXTURES, "deadlock.csv")
        self.schedule_fails(["--from-csv", deadlock, "--stages", 2, "--microbatches", 2],
                            f"schedule '{deadlock}' deadlocks: rank 0 waits at 0B0 for the "
                            "gradients of stage 0 -> 1 from rank 1; rank 1 waits at 1F1 for the "
                            "outputs of stage 0 -> 1 from rank 0")
        missing = os.path.join(FIXTURES, "missing.csv")
        self.schedule_fails(["--from-csv", missing, "--stages", 2, "--microbatches", 2],
                            f"schedule '{missing}' misses B stage=1 mb=1")
        d = tmpdir(self)
        bad = os.path.join(d, "bad.csv")
        with open(bad, "w", newline="") as f:
            f.write("0F0,0B0\r\n1F0,1B0,hello\r\n")
        self.schedule_fails(["--from-csv", bad, "--stages", 2, "--microbatches", 1],
                            f"schedule '{bad}' row 2 (rank 1), cell 3: 'hello' is not a compute "
                            "action like 0F1, 1B0, 0I3 or 0W3, nor a compute_comms action like "
                            "1RECV_F0 or 0SEND_B2")
        self.schedule_fails(["--from-csv", os.path.join(d, "none.csv"), "--stages", 2,
                             "--microbatches", 1])
        self.schedule_fails(["--from-csv", d, "--stages", 2, "--microbatches", 1])
        self.schedule_fails(["--from-csv", bad, "--schedule", "1f1b", "--stages", 2,
                             "--microbatches", 1],
                            "ppc schedule takes one of --schedule NAME, --from-csv FILE and "
                            "--compare")
        # compute_comms: a send without its wait, a receive of nothing.
        with open(bad, "w", newline="") as f:
            f.write("0F0,0SEND_F0,0RECV_B0,0B0\r\n1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\r\n")
        self.schedule_fails(["--from-csv", bad, "--stages", 2, "--microbatches", 1],
                            f"schedule '{bad}' row 1 (rank 0): 0SEND_F0 has no 0WAIT_SEND_F0 "
                            "after it")
        with open(bad, "w", newline="") as f:
            f.write("0F0,0SEND_F0,0RECV_F0,0B0,0WAIT_SEND_F0\r\n1RECV_F0,1F0,1B0\r\n")
        self.schedule_fails(["--from-csv", bad, "--stages", 2, "--microbatches", 1],
                            f"schedule '{bad}' row 1 (rank 0), cell 3: 0RECV_F0: stage 0 "
                            "receives no outputs from another rank")

    def test_bubble_activations_and_messages(self):
        # 1f1b, 4 stages on 4 ranks, 8 microbatches: (p-1)/(m+p-1) = 3/11.
        out = ppc("schedule", "--schedule", "1f1b", "--stages", 4, "--microbatches", 8).stdout
        self.assertEqual(line(out, "bubble:"),
                         "bubble: 27.3% (makespan 33, unit costs F=1 I=1 W=1)")
        self.assertEqual(line(out, "peak activations per rank:"),
                         "peak activations per rank: rank0=4 rank1=3 rank2=2 rank3=1")
        # Each rank sends its F outputs on (and B gradients back) once per microbatch.
        self.assertEqual(line(out, "messages per step:"),
                         "messages per step: rank0=8 rank1=16 rank2=16 rank3=8")
        # zb-h1: a third of 1f1b's idle time (3 of 9 per rank): 3/27.
        out = ppc("schedule", "--schedule", "zb-h1", "--stages", 4, "--microbatches", 8).stdout
        self.assertEqual(line(out, "bubble:"),
                         "bubble: 11.1% (makespan 27, unit costs F=1 I=1 W=1)")
        # Costs: the same for every stage, or one F,I,W per stage.
        out = ppc("schedule", "--schedule", "1f1b", "--stages", 2, "--microbatches", 2,
                  "--costs", "2,1,1").stdout
        self.assertEqual(line(out, "bubble:"),
                         "bubble: 33.3% (makespan 12, costs F,I,W = 2,1,1)")
        out = ppc("schedule", "--schedule", "1f1b", "--stages", 2, "--microbatches", 2,
                  "--costs", "1,1,1", "3,3,3").stdout
        self.assertTrue(line(out, "bubble:").endswith("costs F,I,W = 1,1,1 3,3,3)"))
        for bad, message in [(["1,1"], "'1,1' is not F,I,W"),
                             (["1,x,1"], "'1,x,1': 'x' is not a number in 0..1e+30"),
                             (["1,-1,1"], "'1,-1,1': -1 is not a number in 0..1e+30"),
                             (["1,1,1"] * 3, "takes one")]:
            with self.subTest(bad=bad):
                proc = self.schedule_fails(["--schedule", "1f1b", "--stages", 2,
                                            "--microbatches", 2, "--costs", *bad])
                self.assertIn("--costs " + message, proc.stderr)

    def test_compare_lists_every_schedule(self):
        out = ppc("schedule", "--compare", "--stages", 4, "--ranks", 2,
                  "--microbatches", 4).stdout
        lines = out.splitlines()
        self.assertEqual(lines[0], "4 stages on 2 ranks, 4 microbatches, unit costs F=1 I=1 W=1")
        rows = {s.split()[0]: s.split()[1:] for s in lines[2:]}
        self.assertEqual(sorted(rows), sorted(ALL_KINDS))
        # Every schedule applies to 4 stages on 2 ranks; the V ones on the V.
        self.assertEqual({k: v[0] for k, v in rows.items()},
                         {k: "v" if k in V_KINDS else "loop" for k in ALL_KINDS})
        for kind in ALL_KINDS:
            single, _ = self.four_stages_on_2_ranks(kind)
            bubble = re.match(r"bubble: ([\d.]+)% \(makespan (\d+),",
                              line(single, "bubble:")).groups()
            self.assertEqual((rows[kind][2], rows[kind][1]), (bubble[0] + "%", bubble[1]), kind)
        # What does not apply says why.
        out = ppc("schedule", "--compare", "--stages", 4, "--microbatches", 3).stdout
        self.assertIn("zbv               n/a: zbv needs exactly 2 stages per rank (4 stages on "
                      "4 ranks)", out)

    def test_manifest_costs_and_edges(self):
        d = tmpdir(self)
        ppc("split", model_path("mlp"), "-o", d, "--stages", 2)
        manifest = os.path.join(d, "manifest.json")
        out = ppc("schedule", "--schedule", "zbv", "--manifest", manifest,
                  "--microbatches", 4).stdout
        self.assertIn("zbv: 2 stages on 1 ranks", out)
        self.assertRegex(line(out, "bubble:"), r"the manifest's params stage costs \(estimates; "
                         r"ppc split --cost profile measures them\), in bytes, I = W = F per "
                         r"stage\)$")
        self.schedule_fails(["--schedule", "1f1b", "--manifest", manifest, "--stages", 3,
                             "--microbatches", 2],
                            f"--stages 3 but manifest '{manifest}' has 2 stages")

    def test_compute_comms_csv(self):
        for kind in ALL_KINDS:
            with self.subTest(kind=kind):
                out, path = self.four_stages_on_2_ranks(kind)
                with open(path, newline="") as f:
                    rows = list(csv.reader(f))
                cells = [c for row in rows for c in row]
                sends = [c for c in cells if re.match(r"^\d+SEND_[FB]\d+$", c)]
                waits = [c for c in cells if re.match(r"^\d+WAIT_SEND_[FB]\d+$", c)]
                self.assertTrue(sends)
                self.assertEqual(sorted(c.replace("WAIT_", "") for c in waits), sorted(sends))
                back = ppc("schedule", "--from-csv", path, "--stages", 4, "--ranks", 2,
                           "--microbatches", 4).stdout
                self.assertEqual(grid_rows(back), grid_rows(out))
        # PyTorch's own lowering of its ZBV order (fixtures/schedule/make_pytorch_csv.py).
        pytorch = os.path.join(FIXTURES, "pytorch_zbv_4s_2r_4mb.compute_comms.csv")
        theirs = ppc("schedule", "--from-csv", pytorch, "--stages", 4, "--ranks", 2,
                     "--microbatches", 4).stdout
        ours, _ = self.four_stages_on_2_ranks("zbv")
        self.assertEqual(grid_rows(theirs), grid_rows(ours))

    def test_v_placement_folds_the_stages_back(self):
        # --placement v puts stage k on rank k, then back from the last rank:
        # 4 stages on 2 ranks run 0 and 3 on rank 0, 1 and 2 on rank 1.
        d = tmpdir(self)
        path = os.path.join(d, "v.csv")
        out = ppc("schedule", "--schedule", "1f1b", "--stages", 4, "--ranks", 2,
                  "--placement", "v", "--microbatches", 3, "--csv", path).stdout
        rows = grid_rows(out)
        self.assertEqual({r: sorted({c[0] for c in cells if c != "."})
                          for r, cells in rows.items()}, {0: ["0", "3"], 1: ["1", "2"]})
        # --from-csv takes the placement from the file's rows.
        back = ppc("schedule", "--from-csv", path, "--stages", 4, "--ranks", 2,
                   "--microbatches", 3).stdout
        self.assertEqual(grid_rows(back), rows)
        for kind in ["gpipe", "zb-h1"]:
            with self.subTest(kind=kind):
                out = ppc("schedule", "--schedule", kind, "--stages", 6, "--ranks", 2,
                          "--placement", "v", "--microbatches", 4).stdout
                self.assertEqual(sorted(grid_rows(out)), [0, 1])
        self.assertEqual(ppc("schedule", "--schedule", "1f1b", "--stages", 4, "--ranks", 2,
                             "--placement", "loop", "--microbatches", 3).stdout,
                         ppc("schedule", "--schedule", "1f1b", "--stages", 4, "--ranks", 2,
                             "--microbatches", 3).stdout)
        self.schedule_fails(["--schedule", "interleaved-1f1b", "--stages", 4, "--ranks", 2,
                             "--placement", "v", "--microbatches", 4],
                            "interleaved-1f1b needs the loop placement, not placement v")
        self.schedule_fails(["--schedule", "1f1b", "--stages", 4, "--ranks", 2,
                             "--placement", "w", "--microbatches", 4])
        self.schedule_fails(["--from-csv", path, "--placement", "v", "--stages", 4, "--ranks", 2,
                             "--microbatches", 3],
                            "ppc schedule --from-csv places the stages as the file does; it "
                            "takes no --placement")
        bad = os.path.join(d, "two_rows.csv")
        with open(bad, "w", newline="") as f:
            f.write("0F0,0B0,1F0\r\n1B0\r\n")
        self.schedule_fails(["--from-csv", bad, "--stages", 2, "--microbatches", 1],
                            f"schedule '{bad}' row 2 (rank 1), cell 1: stage 1 already runs on "
                            "rank 0 (row 1)")
        help_text = ppc("schedule", "--help").stdout
        self.assertIn("--placement", help_text)
        self.assertIn("loop (stage k on rank k mod the rank count)", help_text)

    def test_csv_write_failures_leave_nothing(self):
        d = tmpdir(self)
        self.schedule_fails(["--schedule", "1f1b", "--stages", 2, "--microbatches", 2,
                             "--csv", os.path.join(d, "no", "such", "dir.csv")])
        self.schedule_fails(["--schedule", "1f1b", "--stages", 2, "--microbatches", 2,
                             "--csv", d])
        self.assertEqual(os.listdir(d), [])

    def test_run_refuses_training_schedules(self):
        # ppc run (inference) refuses the training names as it parses its
        # command line, in one line naming ppc train, before meeting any
        # other rank.
        d = tmpdir(self)
        ppc("split", model_path("mlp"), "-o", d, "--stages", 2)
        for kind in ["interleaved-1f1b", "zb-h1"]:
            with self.subTest(kind=kind):
                proc = ppc("run", os.path.join(d, "manifest.json"), "--input",
                           model_path("mlp", ".input.pt"), "--output", os.path.join(d, "out.pt"),
                           "--schedule", kind, check=False, env=rank_env(0, 1, free_port()))
                self.assertEqual((proc.returncode, proc.stdout), (2, ""))
                # Refused when the command line is parsed, as an unknown name.
                self.assertEqual(proc.stderr, "error: --schedule: must be gpipe, 1f1b or "
                                              f"looped-bfs (got '{kind}', a training schedule: "
                                              "ppc train runs it) (see ppc run --help)\n")
                self.assertFalse(os.path.exists(os.path.join(d, "out.pt")))


if __name__ == "__main__":
    main()
