"""Shared helpers for the Python-driven CLI tests (run by ctest)."""
import copy
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import typing
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("PPC_BUILD_DIR", os.path.join(ROOT, "build"))
PPC = os.environ.get("PPC", os.path.join(BUILD, "bin", "ppc"))
MODELS = os.environ.get("PPC_MODELS_DIR", os.path.join(BUILD, "models"))

# The real models of tests/models/make_models.py (its `values` and `inplace`
# models exist for the runtime tests of non-tensor and in-place values).
MODEL_NAMES = ["mlp", "resnet18", "mobilenet_v3_small", "vit", "unet", "decoder", "two_io"]

# The exit status of a test file all of whose tests were skipped: ctest's
# SKIP_RETURN_CODE in tests/CMakeLists.txt, so ctest reports "Skipped".
SKIP_RETURN_CODE = 77

# Tolerance of pipeline outputs against the unsplit model's.
RTOL = ATOL = 1e-5


def use_job_secret(environ=os.environ):
    """Gives ranks started without `ppc launch` (and `ppc launch --nnodes N`)
    the per-job secret that `ppc launch` generates otherwise
    (docs/security.md), unless one is set: one per test process. Returns it."""
    import secrets
    return environ.setdefault("PPC_JOB_SECRET", secrets.token_hex(32))


use_job_secret()


def ppc(*args, check=True, timeout=300, env=None, binary=None):
    """Runs ppc (BINARY: another ppc, e.g. an installed one); returns the
    CompletedProcess (text mode)."""
    proc = subprocess.run([binary or PPC, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"ppc {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


@functools.lru_cache(maxsize=None)
def version_text():
    """`ppc --version` of the ppc under test, run once per test process."""
    return ppc("--version").stdout


def pin_blas_kernel():
    """Runs every ppc of the suite on the best OpenBLAS kernel for this CPU
    (`ppc --version` names it), as its start-up warning tells a user to, when
    OpenBLAS picks a lower one by itself and OPENBLAS_CORETYPE is not set:
    otherwise every rank would print that warning and `ppc launch` its note,
    in front of the output the tests read (runtime/platform/Blas.h). test_blas.py takes
    OPENBLAS_CORETYPE out of its environments again to test those."""
    if "OPENBLAS_CORETYPE" in os.environ or not os.path.exists(PPC):
        return
    text = version_text()
    loaded = re.search(r"^blas: openblas \S+ (\w+)", text, re.M)
    best = re.search(r"\(best OpenBLAS core type: (\w+)\)$", text, re.M)
    if loaded and best and loaded.group(1) != best.group(1):
        os.environ["OPENBLAS_CORETYPE"] = best.group(1)
        # The references a test computes in its own process must come from
        # the same kernel as ppc's ranks (OpenBLAS's kernels round apart:
        # resnet18's gradients differed by 1e-5 between Prescott and
        # Cooperlake). OpenBLAS reads the variable once, when it loads: a
        # process that imported torch before this module starts again with it.
        if "torch" in sys.modules:
            sys.stdout.flush()
            sys.stderr.flush()
            os.execv(sys.executable, [sys.executable] + sys.argv)


pin_blas_kernel()


def libtorch_major():
    """The major version of the LibTorch the ppc under test was built with
    (from `ppc --version`): a few errors are LibTorch's own words, which
    differ between 1.x and 2.x."""
    out = version_text()
    m = re.search(r"^LibTorch (\d+)\.", out, re.M)
    if not m:
        raise AssertionError("ppc --version names no LibTorch version:\n" + out)
    return int(m.group(1))


def pytorch2_python():
    """A Python with torch 2.x, to export .pt2 programs and script 2.x models:
    the configuration's own in the PyTorch 2.x build (PPC_TORCH_PYTHON, which
    tests/CMakeLists.txt sets), else PPC_PT2_PYTHON (scripts/test.sh gives the
    system LibTorch build the PyTorch 2.x build's), else the venv that
    scripts/python.sh makes in build/. The path may not exist: callers skip."""
    return (os.environ.get("PPC_TORCH_PYTHON") or os.environ.get("PPC_PT2_PYTHON")
            or os.path.join(ROOT, "build", "venv", "bin", "python"))


def model_path(name, suffix=".pt"):
    return os.path.join(MODELS, name + suffix)


def model_meta(name, models=None):
    """NAME.json of the test models, or of a generator's folder MODELS."""
    with open(os.path.join(models or MODELS, name + ".json")) as f:
        return json.load(f)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def save_tensor(folder, value, name):
    """torch.save(VALUE) to FOLDER/NAME; returns the path."""
    import torch
    path = os.path.join(folder, name)
    torch.save(value, path)
    return path


def tensor_meta(*sizes):
    """One float32 tensor in docs/runtime.md's user metadata form; -1 is the
    microbatch's row count, strides are left out (contiguous)."""
    return {"kind": "Tensor", "tensors": [{"dtype": "float32", "sizes": list(sizes)}]}


def child_pids(pid):
    """The pids of PID's children (Linux /proc): the workers of a ppc launch."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


class Split(typing.NamedTuple):
    """One `ppc split`: the manifest's path, its folder and the process
    (None when split() found the folder already split)."""
    manifest: str
    dir: str
    proc: typing.Optional[subprocess.CompletedProcess]

    def load(self):
        """The manifest, parsed."""
        return load_manifest(self.dir)


def split(model, outdir, *args, at=None, once=False, env=None, binary=None):
    """Runs `ppc split MODEL -o OUTDIR [--split-at PATHS] ARGS...`; returns a
    Split. A failing split fails the test. MODEL is a test model's name
    (MODELS/NAME.pt) or a path. AT=N splits at the paths NAME.json lists
    for N stages; ONCE splits only when OUTDIR holds no manifest yet; ENV
    and BINARY as for ppc()."""
    manifest = os.path.join(outdir, "manifest.json")
    if once and os.path.exists(manifest):
        return Split(manifest, outdir, None)
    where = ("--split-at", ",".join(model_meta(model)["split_at"][str(at)])) if at else ()
    path = model if os.sep in model else model_path(model)
    if at and not args and env is None and binary is None and os.sep not in model \
            and os.environ.get("PPC_TEST_SPLIT_CACHE") != "0" \
            and not (os.path.exists(outdir) and os.listdir(outdir)):
        shutil.copytree(cached_split(path, where), outdir, dirs_exist_ok=True)
        return Split(manifest, outdir, None)
    proc = ppc("split", path, "-o", outdir, *where, *args, env=env, binary=binary)
    return Split(manifest, outdir, proc)


def cached_split(path, where, made=None):
    """The folder of `ppc split PATH -o DIR WHERE...` (a test model at the
    paths its NAME.json lists), split once per build of ppc and model file
    for every test process of the suite: under BUILD/test-splits/ID/, ID
    naming the ppc under test (its binary, its runtime library and `ppc
    --version`), the entry named by the model file and WHERE. Callers copy
    it (they may write beside the manifest). Splitting itself is tested by
    test_split_models.py and the other test_split_*.py, which run ppc split
    themselves; every other test reads a split as ppc writes it, the same
    bytes from the cache as from its own ppc split (1 to 2 s each; the
    suite asks for the same few dozen splits over and over). An entry
    appears whole (a rename) or not at all; a test process making one that
    another made first keeps the other's. A new build of ppc removes the
    entries of the others. PPC_TEST_SPLIT_CACHE=0 turns the cache off
    (split() runs ppc split each time). MADE: a folder that holds that
    split already (publish_split()), copied in instead of splitting."""
    def identity(*files):
        h = hashlib.sha256()
        for f in files:
            st = os.stat(f)
            h.update(("%s %d %d\n" % (os.path.realpath(f), st.st_size, st.st_mtime_ns)).encode())
        return h

    binary = os.path.realpath(PPC)
    runtime = os.path.join(os.path.dirname(os.path.dirname(binary)), "lib", "libppc_runtime.so")
    ident = identity(binary, *([runtime] if os.path.exists(runtime) else ()))
    ident.update(version_text().encode())
    base = os.path.join(BUILD, "test-splits")
    root = os.path.join(base, ident.hexdigest()[:16])
    if not os.path.isdir(root):
        os.makedirs(root, exist_ok=True)
        for other in os.listdir(base):  # entries of earlier builds
            if os.path.join(base, other) != root:
                shutil.rmtree(os.path.join(base, other), ignore_errors=True)
    key = identity(path)
    key.update("\0".join(map(str, where)).encode())
    entry = os.path.join(root, "%s.%s" % (os.path.basename(path), key.hexdigest()[:16]))
    if not os.path.isdir(entry):
        staging = tempfile.mkdtemp(prefix=".staging-", dir=root)
        try:
            if made:
                shutil.copytree(made, os.path.join(staging, "split"))
            else:
                ppc("split", path, "-o", os.path.join(staging, "split"), *where)
            try:
                os.rename(os.path.join(staging, "split"), entry)
            except OSError:  # another test process made it first
                if not os.path.isdir(entry):
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return entry


def publish_split(name, where, outdir):
    """Gives cached_split() the split of test model NAME under OUTDIR, made
    by `ppc split MODELS/NAME.pt -o OUTDIR WHERE...` (test_split_models.py,
    after checking it), unless it holds that split already."""
    if os.environ.get("PPC_TEST_SPLIT_CACHE") != "0":
        cached_split(model_path(name), tuple(map(str, where)), made=outdir)


def class_splits(cls, name, stages=(2, 3, 4)):
    """{N: Split} of test model NAME at the paths NAME.json lists for N
    stages, for each N in STAGES, in a folder of test class CLS (from
    setUpClass)."""
    shared = class_tmpdir(cls)
    return {n: split(name, os.path.join(shared, "s%d" % n), at=n) for n in stages}


def split_at(name, stages, outdir, *extra):
    """Splits model NAME at the paths NAME.json lists for `stages` stages
    into `outdir`; returns the manifest's path. A failing split fails the test."""
    return split(name, outdir, *extra, at=stages).manifest


def expect_error(test, args, message=None, quiet=False):
    """Runs `ppc ARGS...` and asserts exit status 2 with one `error:` line on
    stderr: exactly "error: MESSAGE" when MESSAGE is given. QUIET also
    asserts nothing went to stdout. Returns the process."""
    proc = ppc(*args, check=False)
    test.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
    if quiet:
        test.assertEqual(proc.stdout, "")
    if message is None:
        test.assertTrue(proc.stderr.startswith("error: "), proc.stderr)
        test.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)
    else:
        test.assertEqual(proc.stderr, f"error: {message}\n")
    return proc


def expected_output(name):
    """The unsplit model's output on NAME.input.pt (NAME.expected.pt)."""
    import torch
    return torch.load(model_path(name, ".expected.pt"))


def unsplit_output(name, inputs):
    """The unsplit model NAME's output on `inputs` (a tensor or a tuple),
    computed on a copy, since a model may write its inputs in place."""
    import torch
    model = torch.jit.load(model_path(name))
    args = copy.deepcopy(inputs)
    with torch.no_grad():
        return model(*args) if isinstance(args, tuple) else model(args)


def assert_outputs_close(test, expected, got, rtol=RTOL, atol=ATOL):
    """Asserts the same number of outputs, equal shapes and dtypes, and
    allclose values; returns the largest absolute difference."""
    import torch
    expected, got = as_tuple(expected), as_tuple(got)
    test.assertEqual(len(expected), len(got), "number of outputs")
    worst = 0.0
    for i, (e, g) in enumerate(zip(expected, got)):
        test.assertEqual(e.shape, g.shape, "output %d" % i)
        test.assertEqual(e.dtype, g.dtype, "output %d" % i)
        diff = (e.double() - g.double()).abs().max().item() if e.numel() else 0.0
        test.assertTrue(torch.allclose(e, g, rtol=rtol, atol=atol),
                        "output %d: max abs diff %g" % (i, diff))
        worst = max(worst, diff)
    return worst


def assert_identical(test, a, b):
    """Asserts two outputs are bit-identical (same shapes, dtypes, values)."""
    import torch
    a, b = as_tuple(a), as_tuple(b)
    test.assertEqual(len(a), len(b), "number of outputs")
    for i, (x, y) in enumerate(zip(a, b)):
        test.assertEqual((x.shape, x.dtype), (y.shape, y.dtype), "output %d" % i)
        test.assertTrue(torch.equal(x, y), "output %d: max abs diff %g"
                        % (i, (x.double() - y.double()).abs().max().item()))


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_manifest(outdir):
    with open(os.path.join(outdir, "manifest.json")) as f:
        return json.load(f)


def assert_rank_error(test, output, message, ranks):
    """OUTPUT (a launch's stdout and stderr) holds MESSAGE as exactly one
    rank's error line, from one of RANKS: ppc launch forwards an error that
    several ranks print only from the rank that printed it first."""
    lines = [l for l in output.splitlines() if l.endswith("] error: " + message)]
    test.assertEqual(len(lines), 1, output)
    test.assertIn(lines[0], ["[rank %d] error: %s" % (r, message) for r in ranks], output)


def tmpdir(test):
    d = tempfile.TemporaryDirectory(prefix="ppc-test-")
    test.addCleanup(d.cleanup)
    return d.name


def class_tmpdir(cls):
    """A temporary folder for a test class (from setUpClass), removed after it."""
    d = tempfile.TemporaryDirectory(prefix="ppc-test-")
    cls.addClassCleanup(d.cleanup)
    return d.name


class ClassTmpTest(unittest.TestCase):
    """A test class whose tests share one temporary folder, cls.tmp
    (class_tmpdir()), made before the first and removed after the last."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = class_tmpdir(cls)

    def tmp_path(self, *parts):
        return os.path.join(self.tmp, *parts)


class ReportingTest(ClassTmpTest):
    """A ClassTmpTest whose tests add lines to cls.results (numbers worth
    reading, e.g. how close a run came to its reference); they are printed
    to stderr after the class's last test."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.results = []
        cls.addClassCleanup(cls.print_results)

    @classmethod
    def print_results(cls):
        for line in cls.results:
            print(line, file=sys.stderr)


def as_tuple(v):
    """A model output as a tuple (a single tensor becomes a 1-tuple)."""
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def stamped(outdir, names, suffixes, tag):
    """Whether OUTDIR holds NAME+SUFFIX for every name and suffix and each
    NAME.stamp reads TAG: a model generator writes its stamp last, so the
    set is complete and was made by a generator whose stamp() is TAG."""
    for name in names:
        base = os.path.join(outdir, name)
        if not all(os.path.exists(base + s) for s in suffixes):
            return False
        try:
            with open(base + ".stamp") as f:
                if f.read().strip() != tag:
                    return False
        except OSError:
            return False
    return True


def generator_up_to_date(generator, outdir, names, suffixes):
    """Whether OUTDIR holds NAME+SUFFIX of every name and suffix with the
    stamp this Python would write (the stamp() of GENERATOR, a
    tests/models/make_*.py): running the generator would change nothing."""
    sys.path.insert(0, os.path.dirname(generator))
    import importlib
    gen = importlib.import_module(os.path.splitext(os.path.basename(generator))[0])
    return stamped(outdir, names, suffixes, gen.stamp())


def run_generator(generator, outdir, names, suffixes, python=sys.executable, timeout=600):
    """Runs GENERATOR (a tests/models/make_*.py, which caches: a model with a
    current stamp is kept) into OUTDIR with PYTHON; skipped when PYTHON is
    this one and generator_up_to_date() (starting it costs seconds).
    Returns a CompletedProcess (the caller checks returncode)."""
    # (abspath, not realpath: a venv's python is a link to the system one.)
    if os.path.abspath(python) == os.path.abspath(sys.executable) and \
            generator_up_to_date(generator, outdir, names, suffixes):
        return subprocess.CompletedProcess([python, generator, outdir], 0, "up to date\n", "")
    return subprocess.run([python, "-W", "ignore", generator, outdir], capture_output=True,
                          text=True, timeout=timeout)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nproc, *args, timeout=300, env=None, launcher=(), program=None, binary=None):
    """Runs `ppc launch --nproc-per-node NPROC --master-port 0 LAUNCHER... --
    PROGRAM ARGS...`: PROGRAM is ppc unless given; BINARY is the ppc that
    launches (another ppc, e.g. an installed one); ENV the whole environment."""
    cmd = [binary or PPC, "launch", "--nproc-per-node", str(nproc), "--master-port", "0",
           *map(str, launcher), "--", program or PPC, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


class Ran(typing.NamedTuple):
    """One run_pipeline(): the launch's process, its --stats by rank
    (parse_stats) and the output it wrote (None when not loaded)."""
    proc: subprocess.CompletedProcess
    stats: dict
    output: object


def run_pipeline(test, manifest, ranks, inp, out, *extra, micro=3, rank_timeout=60,
                 expected=None, check=True, fails=False, status=None, stale=None,
                 rtol=RTOL, atol=ATOL, **launch_kw):
    """Runs `ppc run MANIFEST --input INP --output OUT --microbatches MICRO
    --stats --timeout RANK_TIMEOUT EXTRA...` on RANKS ranks under launch()
    (LAUNCH_KW: its timeout, env, launcher), the file STALE (default OUT)
    removed first. With CHECK, asserts that it succeeded on every rank (its
    --stats from each) and, when EXPECTED is given, that the output is
    close to it; or with FAILS, that it wrote no output (and exited STATUS,
    when given). Returns a Ran."""
    stale = stale or out
    if os.path.exists(stale):
        os.remove(stale)
    r = launch(ranks, "run", manifest, "--input", inp, "--output", out, "--microbatches", micro,
               "--stats", "--timeout", rank_timeout, *extra, **launch_kw)
    stats = parse_stats(r.stdout)
    if not check:
        return Ran(r, stats, None)
    if fails:
        if status is not None:
            test.assertEqual(r.returncode, status, r.stdout + r.stderr)
        test.assertFalse(os.path.exists(out), "a failed run wrote its output")
        return Ran(r, stats, None)
    test.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    test.assertEqual(sorted(stats), list(range(ranks)), r.stdout)
    import torch
    got = torch.load(out)
    if expected is not None:
        assert_outputs_close(test, expected, got, rtol, atol)
    return Ran(r, stats, got)


def rank_env(rank, world, port, **extra):
    """The torchrun-style environment of one rank on this host."""
    return dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                **extra)


def start_ranks(world, args, port=None, env=None, rank_args=None):
    """Starts `ppc run ARGS` once per rank, without a launcher; returns the Popens.
    `env`, if given, maps a rank to extra environment variables; `rank_args`
    maps a rank to extra arguments appended to its ARGS."""
    port = port or free_port()
    procs = []
    for rank in range(world):
        extra = (env or {}).get(rank, {})
        more = (rank_args or {}).get(rank, [])
        procs.append(subprocess.Popen([PPC, "run", *map(str, args), *map(str, more)],
                                      env=rank_env(rank, world, port, **extra),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs, timeout=60):
    """Waits for each process (killing it after `timeout`); returns [(rc, out, err)]."""
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
        out.append((p.returncode, o, e))
    return out


# `ppc run --stats` lines: rank, meta source, meta messages, messages, first output ms,
# total ms, cache written.
STATS = re.compile(r"stats: rank=(\d+) meta=(\w+) meta_messages_sent=(\d+) "
                   r"messages_sent=(\d+) first_output_ms=([\d.]+) total_ms=([\d.]+) "
                   r"cache_written=(\d)")


def parse_stats(text):
    """{rank: (meta, meta_messages_sent, messages_sent, first_output_ms,
    total_ms, cache_written)} from `--stats` lines, as strings."""
    return {int(m.group(1)): m.groups()[1:] for m in STATS.finditer(text)}


def main(module="__main__", argv=None):
    """unittest.main() for a CLI test file, for ctest: prints each skipped
    test with its reason and exits SKIP_RETURN_CODE when every test that ran
    was skipped (0 when all passed, 1 when one failed or none ran)."""
    prog = unittest.main(module=module, argv=argv, exit=False)
    result = prog.result
    for test, reason in result.skipped:
        print("SKIPPED %s: %s" % (test.id(), reason), file=sys.stderr)
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun == 0:
        print("error: no test ran", file=sys.stderr)
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(SKIP_RETURN_CODE)
    sys.exit(0)
