#!/usr/bin/python3
"""Tests streaming in `ppc run`: the batches of one launch (a list, a
directory, --repeat) run in windows of --stream-window microbatches, one
execution of the schedule each, in the background while the next window is
queued, so the pipeline does not drain between batches.

Streamed outputs must equal those of one execution per batch
(--stream-window 0) bitwise, in order, with batches of different signatures
mixed in a window, for a one-input and a two-input model, on 2, 3 and 4
ranks, gpipe and 1f1b (where a test streams under both, one unstreamed run,
gpipe's, is the base of both: inference runs every microbatch's forwards
the same way under either, so their outputs are the same bits, which the
comparison asserts); the meta cache written by a streamed launch serves
the next; and the trace of a streamed launch shows batch b+1's first F on
stage 0 starting before batch b's last F on the last stage, within a window
and across windows.

Env: PPC (the ppc binary), PPC_MODELS_DIR (generated models).
"""
import os
import re
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, assert_identical, assert_outputs_close, class_tmpdir,  # noqa: E402
                    launch, main, model_path, parse_stats, save_tensor, split_at, tmpdir,
                    unsplit_output)
from trace_format import assert_valid_trace  # noqa: E402

BATCHES = re.compile(r"stats: rank=(\d+) .* cache_written=\d(?: [a-z_]+=\S+)* batches=(\d+)$", re.M)


class StreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = class_tmpdir(cls)
        cls.mlp2 = split_at("mlp", 2, os.path.join(d, "mlp2"))
        cls.mlp3 = split_at("mlp", 3, os.path.join(d, "mlp3"))
        cls.mlp4 = split_at("mlp", 4, os.path.join(d, "mlp4"))
        cls.two_io3 = split_at("two_io", 3, os.path.join(d, "two_io3"))

    def setUp(self):
        self.tmp = tmpdir(self)
        self.x = torch.load(model_path("mlp", ".input.pt"))  # 5 x 64

    def ppc_run(self, ranks, manifest, inp, out, *extra):
        """`ppc run` on `ranks` ranks with --stats; returns {rank: batches}
        and the stats."""
        r = launch(ranks, "run", manifest, "--input", inp, "--output", out, "--stats",
                   "--timeout", 60, *extra)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        counts = {int(k): int(n) for k, n in BATCHES.findall(r.stdout)}
        self.assertEqual(sorted(counts), list(range(ranks)), r.stdout)
        return counts, parse_stats(r.stdout)

    def compare(self, ranks, manifest, inp, *extra, windows=("4", "256"), batches=None,
                schedules=(None,)):
        """The outputs of `inp` with each --stream-window in `windows`, under
        each --schedule in `schedules` (None: the default), equal those of
        --stream-window 0 under the first schedule, bitwise; returns the
        latter's path."""
        ext = "" if os.path.isdir(inp) else ".pt"
        base = os.path.join(self.tmp, "base" + ext)

        def schedule(s):
            return ("--schedule", s) if s else ()

        counts, _ = self.ppc_run(ranks, manifest, inp, base, "--stream-window", 0,
                                 "--no-meta-cache", *extra, *schedule(schedules[0]))
        if batches is not None:
            self.assertEqual(set(counts.values()), {batches})
        for s, w in ((s, w) for s in schedules for w in windows):
            with self.subTest(schedule=s, window=w):
                self.compare_window(ranks, manifest, inp, base, counts, w,
                                    *extra, *schedule(s))
        return base

    def compare_window(self, ranks, manifest, inp, base, counts, w, *extra):
        """compare()'s run with --stream-window W: the batch counts COUNTS
        and the outputs of BASE, bitwise."""
        ext = "" if os.path.isdir(inp) else ".pt"
        out = os.path.join(self.tmp, "w%s%s" % (w, ext))
        got, _ = self.ppc_run(ranks, manifest, inp, out, "--stream-window", w,
                              "--no-meta-cache", *extra)
        self.assertEqual(got, counts)
        if ext:
            a, b = torch.load(base), torch.load(out)
            if isinstance(a, list):
                self.assertIsInstance(b, list)
                self.assertEqual(len(a), len(b))
                for k, (x, y) in enumerate(zip(a, b)):
                    with self.subTest(window=w, batch=k):
                        assert_identical(self, x, y)
            else:
                assert_identical(self, a, b)
        else:
            self.assertEqual(sorted(os.listdir(base)), sorted(os.listdir(out)))
            for name in os.listdir(base):
                with self.subTest(window=w, file=name):
                    assert_identical(self, torch.load(os.path.join(base, name)),
                                     torch.load(os.path.join(out, name)))

    def mixed(self):
        """Six batches of three signatures (rows 5, 4, 3), in no order."""
        x = self.x
        return [x, x[:4] * 2, x.flip(0), x[:3] - 1, x * 3, x[1:]]

    # --- outputs ------------------------------------------------------------

    def test_list_of_mixed_signatures_2_ranks(self):
        # gpipe; 1f1b (the default) streams the same six batches, and five
        # more, in test_background_windows_over_many_batches.
        batches = self.mixed()
        inp = save_tensor(self.tmp, batches, "list.pt")
        base = self.compare(2, self.mlp2, inp, "--microbatches", 2, batches=6,
                            schedules=("gpipe",))
        got = torch.load(base)
        for b, g in zip(batches, got):
            assert_outputs_close(self, unsplit_output("mlp", b), g)

    def test_four_stages_on_2_ranks(self):
        inp = save_tensor(self.tmp, self.mixed(), "list.pt")
        # Windows of 1 (3 < M), 2 and all 6 batches.
        self.compare(2, self.mlp4, inp, "--microbatches", 3, windows=("3", "7", "18"),
                     batches=6, schedules=("gpipe", "1f1b"))

    def test_two_inputs_on_3_and_4_ranks(self):
        x, y = torch.load(model_path("two_io", ".input.pt"))
        batches = [(x, y), (x[:4] * 2, y[:4]), (x.flip(0), y.flip(0)), (x[:2], y[:2] + 1)]
        inp = save_tensor(self.tmp, batches, "list.pt")
        base = self.compare(3, self.two_io3, inp, "--microbatches", 2, batches=4,
                            schedules=("gpipe", "1f1b"))
        for b, g in zip(batches, torch.load(base)):
            self.assertIsInstance(g, tuple)
            assert_outputs_close(self, unsplit_output("two_io", b), g)
        inp = save_tensor(self.tmp, self.mixed(), "mlp.pt")
        self.compare(4, self.mlp4, inp, "--microbatches", 2, windows=("6",), batches=6)

    def test_background_windows_over_many_batches(self):
        # 11 batches of three signatures in windows of 2 and 3 batches, each
        # run in the background while the next is queued, the last window
        # partial (1 and 2 batches), and all 11 in one window: bitwise the
        # outputs of a window per batch, themselves run()'s
        # (PipelineStreamTest.StreamedEqualsRunBitwise). 1f1b, the default:
        # the first six are test_list_of_mixed_signatures_2_ranks's batches.
        batches = (self.mixed() * 2)[:11]
        inp = save_tensor(self.tmp, batches, "many.pt")
        base = self.compare(2, self.mlp2, inp, "--microbatches", 2, windows=("4", "6", "256"),
                            batches=11)
        for b, g in zip(batches, torch.load(base)):
            assert_outputs_close(self, unsplit_output("mlp", b), g)

    def test_repeat_streams_every_batch_alike(self):
        inp = save_tensor(self.tmp, self.x, "x.pt")
        self.compare(2, self.mlp2, inp, "--microbatches", 2, "--repeat", 5,
                     windows=("4", "5", "256"), batches=5)

    def test_directory_of_batch_files(self):
        inp = os.path.join(self.tmp, "in")
        os.mkdir(inp)
        for k, b in enumerate(self.mixed()):
            torch.save(b, os.path.join(inp, "%d.pt" % k))
        base = self.compare(2, self.mlp2, inp, "--microbatches", 2, "--repeat", 2, batches=12)
        self.assertEqual(sorted(os.listdir(base)), ["%d.pt" % k for k in range(6)])

    # --- metadata ------------------------------------------------------------

    def test_meta_cache_serves_a_second_streamed_run(self):
        inp = save_tensor(self.tmp, self.mixed(), "list.pt")
        cache = os.path.join(self.tmp, "cache")
        os.mkdir(cache)
        outs = []
        for k in range(2):
            outs.append(os.path.join(self.tmp, "out%d.pt" % k))
            _, stats = self.ppc_run(2, self.mlp2, inp, outs[-1], "--microbatches", 2,
                                "--meta-cache", cache)
            meta = {s[0] for s in stats.values()}
            sent = sum(int(s[1]) for s in stats.values())
            if k == 0:
                self.assertEqual(meta, {"inferred"})
                self.assertGreater(sent, 0)
            else:
                self.assertEqual(meta, {"cache"})
                self.assertEqual(sent, 0)
        a, b = torch.load(outs[0]), torch.load(outs[1])
        for x, y in zip(a, b):
            assert_identical(self, x, y)

    # --- the trace -----------------------------------------------------------

    def trace_events(self, window, batches=4, *extra):
        inp = save_tensor(self.tmp, [self.x * (b + 1) for b in range(batches)], "list.pt")
        trace = os.path.join(self.tmp, "trace%s.json" % window)
        self.ppc_run(3, self.mlp3, inp, os.path.join(self.tmp, "o.pt"),
            "--microbatches", 2, "--schedule", "gpipe", "--no-meta-cache",
            "--stream-window", window, "--trace", trace, *extra)
        data = assert_valid_trace(self, trace)
        events = data["traceEvents"] if isinstance(data, dict) else data
        return [e for e in events if e.get("ph") == "X"]

    def test_trace_shows_the_next_batch_entering_before_the_last_leaves(self):
        m = 2
        # One window of 4 batches: one execution, whose microbatches count
        # 0..7 over the window. Batch b+1's first F on stage 0 starts before
        # batch b's last F on stage 2 does.
        events = self.trace_events(8)
        fs = {(e["args"]["stage"], e["args"]["microbatch"]): e
              for e in events if e["name"] == "F"}
        self.assertEqual(len(fs), 3 * 4 * m)
        for b in range(3):
            enter = fs[(0, (b + 1) * m)]["ts"]
            leave = fs[(2, b * m + m - 1)]["ts"]
            self.assertLess(enter, leave, "batch %d" % b)
        # Every rank has one batch mark per batch, in order, not overlapping.
        for rank in range(3):
            marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                           if e["pid"] == rank and e["name"] == "batch")
            self.assertEqual(len(marks), 4)
            for (_, end), (start, _) in zip(marks, marks[1:]):
                self.assertLessEqual(end, start)
            # They tile the window: every action of the rank lies in one.
            for e in events:
                if e["pid"] == rank and e["name"] != "batch":
                    self.assertTrue([m for m in marks if m[0] <= e["ts"]
                                     and e["ts"] + e["dur"] <= m[1]], e)
            # The rank's one run of the executor ends with one flush, in
            # the last batch's mark.
            flushes = [e for e in events if e["pid"] == rank and e["name"] == "flush"]
            self.assertEqual(len(flushes), 1)
            self.assertGreaterEqual(flushes[0]["ts"], marks[-1][0])

    def test_trace_shows_the_next_window_entering_before_the_last_leaves(self):
        # Twelve windows of one batch (M = 2), run in the background on 3
        # ranks over Gloo (whose sends complete only once the receiver
        # asks): at window boundaries stage 0 starts the next
        # window without waiting for stage 2 to finish the previous one
        # (which one-execution-per-call streaming never did over Gloo: the
        # signature broadcast waited for every rank). Tiny stages make the
        # margin small, so only some boundaries must show it.
        m, batches = 2, 12
        events = self.trace_events(0, batches, "--link", "gloo")
        fs = {}
        for e in sorted((e for e in events if e["name"] == "F"), key=lambda e: e["ts"]):
            fs.setdefault(e["args"]["stage"], []).append(e)
        self.assertEqual([len(fs[s]) for s in range(3)], [batches * m] * 3)
        overlapped = [b for b in range(1, batches)
                      if fs[0][b * m]["ts"] < fs[2][b * m - 1]["ts"] + fs[2][b * m - 1]["dur"]]
        self.assertTrue(overlapped, "no window boundary overlapped")

    # --- the library ----------------------------------------------------------

    def test_library_example_streams(self):
        """examples/pipeline_infer with BATCHES: submit/next/flush over the
        public API, against `ppc run` of the same batches one per run."""
        program = os.path.join(BUILD, "bin", "pipeline_infer")
        out = os.path.join(self.tmp, "lib.pt")
        r = launch(2, self.mlp2, model_path("mlp", ".input.pt"), "2", out, "5", program=program)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("[rank 1] streamed 5 batches in windows of 128", r.stdout)
        self.assertIn("[rank 0] streamed 5 batches in windows of 128", r.stdout)
        batches = [self.x[:5 - b % 2] * (b + 1) for b in range(5)]
        base = os.path.join(self.tmp, "base.pt")
        self.ppc_run(2, self.mlp2, save_tensor(self.tmp, batches, "list.pt"), base,
                     "--microbatches", 2,
                 "--stream-window", 0, "--no-meta-cache")
        for b, want in enumerate(torch.load(base)):
            with self.subTest(batch=b):
                assert_identical(self, want, torch.load("%s.%d" % (out, b)))

    # --- errors --------------------------------------------------------------

    def failing_directory(self, batches, bad):
        """A directory whose file k.pt holds BATCHES[k], but the fifth, 4.pt,
        which holds BAD; returns its path and an --output path beside it."""
        inp = os.path.join(self.tmp, "in")
        os.mkdir(inp)
        for k in range(len(batches)):
            torch.save(bad if k == 4 else batches[k], os.path.join(inp, "%d.pt" % k))
        return inp, os.path.join(self.tmp, "out")

    def test_a_failure_on_the_output_rank_keeps_every_earlier_window(self):
        # two_io's y enters only its last stage, on the output rank (2 of 3):
        # the fifth batch's y of the wrong width fails there, in the third
        # window of 2 batches, after the output rank's own thread finished
        # the first two windows.
        x, y = torch.randn(5, 16), torch.randn(5, 8)
        inp, out = self.failing_directory([(x, y)] * 6, (x, torch.randn(5, 9)))
        r = launch(3, "run", self.two_io3, "--input", inp, "--output", out, "--microbatches", 2,
                   "--stream-window", 4, "--no-meta-cache", "--timeout", 10)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"\[rank 2\] error: batch 4 \('4.pt'\): stage 2 failed: ")
        # The first two windows were written whole; nothing of the third.
        self.assertEqual(sorted(os.listdir(out)), ["0.pt", "1.pt", "2.pt", "3.pt"])
        for k in range(4):
            assert_outputs_close(self, unsplit_output("two_io", (x, y)),
                                 torch.load(os.path.join(out, "%d.pt" % k)))

    def test_a_failure_upstream_names_its_batch_and_keeps_whole_files(self):
        # The fifth file holds a batch of the wrong width: stage 0 fails on
        # it, on rank 0, in the third window of 2 batches. The output rank
        # may still be finishing the windows before when the launcher stops
        # it, so what it kept is the first batches' whole files, in order,
        # and nothing of the failed window.
        inp, out = self.failing_directory([self.x] * 6, torch.randn(5, 7))
        r = launch(2, "run", self.mlp2, "--input", inp, "--output", out, "--microbatches", 2,
                   "--stream-window", 4, "--no-meta-cache", "--timeout", 10)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"\[rank 0\] error: batch 4 \('4.pt'\): stage 0 failed: ")
        kept = sorted(os.listdir(out))
        self.assertEqual(kept, ["%d.pt" % k for k in range(len(kept))])
        self.assertLessEqual(len(kept), 4)
        for name in kept:
            assert_outputs_close(self, unsplit_output("mlp", self.x),
                                 torch.load(os.path.join(out, name)))

    def test_a_list_of_one_batch_still_names_it(self):
        inp = save_tensor(self.tmp, [(torch.randn(5, 7),)], "one.pt")
        r = launch(2, "run", self.mlp2, "--input", inp, "--output",
                   os.path.join(self.tmp, "o.pt"), "--microbatches", 2, "--no-meta-cache",
                   "--timeout", 10)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"\[rank 0\] error: batch 0: stage 0 failed: ")

    def test_stream_window_out_of_range(self):
        r = launch(1, "run", self.mlp2, "--input", model_path("mlp", ".input.pt"),
                   "--output", os.path.join(self.tmp, "o.pt"), "--stream-window", 65537)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--stream-window", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "o.pt")))


if __name__ == "__main__":
    main()
