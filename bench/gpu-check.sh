#!/usr/bin/env bash
# The GPU check of issue #8: on a machine with an NVIDIA GPU and a CUDA PyTorch 2.x, build ppc
# against that PyTorch, run the GPU-labelled tests, and a short benchmark. About 5-8 minutes on
# 16 cores (most of it the build); everything lands in one JSON file.
#
#   bench/gpu-check.sh [RESULTS.json]        (default: $PPC_GPU_BUILD_DIR/gpu-check.json)
#
# Environment:
#   PPC_GPU_PYTHON     the Python whose torch (2.x, with CUDA) ppc is built against
#                      (default: python3)
#   PPC_GPU_BUILD_DIR  build directory (default: build-gpu/)
#   CUDACXX            nvcc (default: /usr/local/cuda/bin/nvcc, else the one on PATH); the
#                      CMake config of a CUDA torch needs the CUDA toolkit
#   PPC_GPU_PREBUILT=1 skip the build: PPC_GPU_BUILD_DIR/bin already holds ppc and plain_forward,
#                      built on another machine against the same torch version (a GPU machine
#                      without LLVM, CLI11 and the other build dependencies); its libraries are
#                      then taken from this torch (LD_LIBRARY_PATH) and the versions must match.
#                      Built, for a GPU machine whose torch is 2.11.0, by
#                        python3 -m venv V && V/bin/pip install torch==2.11.0 numpy
#                        PPC_PYTHON=V/bin/python PPC_BUILD_DIR=build-gpu \
#                          scripts/build.sh pytorch2 ppc plain_forward
#                      (PyPI's torch 2.11.0 is the CUDA 13.0 build); build-gpu/bin and
#                      build-gpu/lib then travel to that machine.
#
# Steps:
#   1. checks: an NVIDIA GPU (nvidia-smi -L), a torch >= 2 whose torch.cuda sees it, nvcc;
#      otherwise one "gpu-check: error: ..." line and exit 2, before anything is built.
#   2. builds ppc and bench/plain_forward against that torch into PPC_GPU_BUILD_DIR, configured
#      as scripts/build.sh configures the PyTorch 2.x build (CMAKE_PREFIX_PATH = the torch
#      package directory; cmake/Torch.cmake does the rest), and checks that `ppc --version` says
#      CUDA: yes and NCCL: yes.
#   3. runs the GPU-labelled tests (tests/cli/test_gpu.py's test_cuda_* methods, labelled gpu
#      in tests/CMakeLists.txt) with that Python, which reads the outputs back. With one GPU,
#      the pipeline runs as one rank holding every stage: NCCL refuses two ranks of a
#      communicator on one device, so ranks cannot share a GPU; the two-rank NCCL test needs two
#      GPUs and skips otherwise (the skip is recorded). The tests need the test models: the
#      PyTorch 2.x build's build/models if present, else tests/models/make_models.py
#      (torchvision) run by that Python.
#   4. benchmark (figures as ratios within this run), models made here by that Python:
#      - per-microbatch overhead: tiny stages (4 x Linear(16,16)+ReLU), 256 microbatches of one
#        row; ppc run --device cuda with 1 stage and with 4 stages on 1 rank, against the plain
#        forward (bench/plain_forward on cuda:0, the same microbatching, synchronized by moving
#        the output to the CPU, as ppc run does). kernel_us = the plain forward's time per
#        microbatch (its kernels and their launches); overhead_us = (ppc - plain) per
#        microbatch per stage.
#      - 1 stage against a plain forward: heavy stages (16 x Linear(1024,1024)+ReLU, 4096 rows,
#        8 microbatches): ppc 1-stage batch time / plain forward batch time.
#      A ppc batch's steady-state time is (total_ms(--repeat 85) - total_ms(--repeat 5)) / 80
#      (total_ms times a launch's whole batch loop; the difference drops start-up and the
#      first batches), the median of 3 such pairs; the plain forward's is its median warm batch.
#      - from the trace (--trace, one batch of the tiny stages after a warm batch): per stage and
#        microbatch, the host's time inside F (launching the stage's kernels) and outside it
#        (host_overhead_us: ppc's executor, transport and waits; issue #21 target 7: <= 20 us),
#        against kernel_us / stages; with 2 or more GPUs, 2 stages on 2 ranks over NCCL: the
#        share of microbatches whose send (SEND_F on rank 0 to the end of RECV_F on rank 1, one
#        host clock) overlaps rank 0's next F, i.e. a send did not hold back the next compute
#        ("overlap": at least 90% of them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PPC_GPU_BUILD_DIR:-$root/build-gpu}
python=${PPC_GPU_PYTHON:-python3}
results=${1:-$build/gpu-check.json}
start=$SECONDS

fail() {
  echo "gpu-check: error: $*" >&2
  exit 2
}

# 1. Checks.
command -v nvidia-smi >/dev/null || fail "no NVIDIA GPU here (nvidia-smi not found)"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "$gpus" -ge 1 ] || fail "no NVIDIA GPU here (nvidia-smi -L lists none)"
command -v "$python" >/dev/null || fail "no Python '$python' (set PPC_GPU_PYTHON)"
probe='
import importlib.util, torch
major = int(torch.__version__.split(".")[0])
if major < 2:
    raise SystemExit("torch %s is not 2.x" % torch.__version__)
if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
    raise SystemExit("torch %s sees no GPU (CUDA %s)" % (torch.__version__, torch.version.cuda))
print(importlib.util.find_spec("torch").submodule_search_locations[0])
print(torch.__version__)
print(torch.cuda.get_device_name(0))
'
torch_info=$("$python" -c "$probe" 2>&1) || fail "$python: $(tail -n 1 <<<"$torch_info")"
torch_dir=$(sed -n 1p <<<"$torch_info")
torch_version=$(sed -n 2p <<<"$torch_info")
gpu_name=$(sed -n 3p <<<"$torch_info")
echo "gpu-check: $gpus GPU(s), $gpu_name; torch $torch_version at $torch_dir"
mkdir -p "$build"

# 2. Build: configured as scripts/build.sh configures the PyTorch 2.x build (cmake/Torch.cmake
# puts the torch wheel's nccl.h first and links its NVIDIA libraries), only the two programs
# needed here.
build_start=$SECONDS
ppc=$build/bin/ppc
if [ -n "${PPC_GPU_PREBUILT:-}" ]; then
  [ -x "$ppc" ] && [ -x "$build/bin/plain_forward" ] ||
    fail "PPC_GPU_PREBUILT is set but $build/bin holds no ppc and plain_forward"
  # The prebuilt programs find their runtime library and this torch's libraries (their
  # RPATH names the build machine's).
  export LD_LIBRARY_PATH="$build/lib:$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  built_with=$("$ppc" --version 2>&1 | grep -o 'LibTorch [0-9.]*' || true)
  [ "$built_with" = "LibTorch ${torch_version%%+*}" ] ||
    fail "$ppc was built against '${built_with:-an unknown LibTorch}', this torch is $torch_version"
else
  nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  [ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
  [ -n "$nvcc" ] || fail "no nvcc (set CUDACXX): the CMake config of a CUDA torch needs the CUDA toolkit"
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  {
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      -DCMAKE_PREFIX_PATH="$torch_dir" -DPPC_TORCH_PYTHON="$(command -v "$python")" \
      -DCMAKE_CUDA_COMPILER="$nvcc" &&
      cmake --build "$build" -j "$(nproc)" --target ppc plain_forward
  } >"$build/gpu-check.build.log" 2>&1 ||
    { tail -n 30 "$build/gpu-check.build.log" >&2; fail "the build failed; see $build/gpu-check.build.log"; }
fi
build_s=$((SECONDS - build_start))
[ -x "$ppc" ] || fail "the build made no $ppc; see $build/gpu-check.build.log"
version=$("$ppc" --version | tr '\n' ' ')
grep -q "CUDA: yes" <<<"$version" && grep -q "NCCL: yes" <<<"$version" ||
  fail "$ppc is built without CUDA or NCCL ($version); see $build/gpu-check.build.log"
echo "gpu-check: built in ${build_s} s: $version"

# 3. GPU-labelled tests.
models=$build/models
if [ ! -d "$models" ]; then
  if [ -d "$root/build/models" ]; then
    cp -a "$root/build/models" "$models"
  else
    "$python" "$root/tests/models/make_models.py" "$models" >"$build/gpu-check.models.log" 2>&1 ||
      fail "cannot make the test models (torchvision?); see $build/gpu-check.models.log"
  fi
fi
tests_start=$SECONDS
set +e
PPC=$ppc PPC_MODELS_DIR=$models PPC_BUILD_DIR=$build timeout 300 \
  "$python" "$root/tests/cli/test_gpu.py" -v -k 'test_cuda_' >"$build/gpu-check.tests.log" 2>&1
tests_rc=$?
set -e
tests_s=$((SECONDS - tests_start))
echo "gpu-check: GPU tests exited $tests_rc in ${tests_s} s ($build/gpu-check.tests.log)"

# 4. Benchmark, and the results file.
PPC=$ppc PLAIN=$build/bin/plain_forward WORK=$build/gpu-bench RESULTS=$results \
  GPUS=$gpus GPU_NAME=$gpu_name TORCH_VERSION=$torch_version BUILD_S=$build_s \
  TESTS_RC=$tests_rc TESTS_S=$tests_s TESTS_LOG=$build/gpu-check.tests.log \
  "$python" - <<'EOF'
import json, os, re, socket, statistics, subprocess, time
import torch

E = os.environ
PPC, PLAIN, WORK = E["PPC"], E["PLAIN"], E["WORK"]
# cuda; cpu only to try this part of the script on a machine without a GPU.
DEVICE = E.get("GPU_CHECK_DEVICE", "cuda")
os.makedirs(WORK, exist_ok=True)


def port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(cmd, env=None):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                       timeout=300)
    if r.returncode != 0:
        raise SystemExit("gpu-check: error: %s failed:\n%s%s" % (" ".join(map(str, cmd)),
                                                                 r.stdout, r.stderr))
    return r.stdout


def mlp(name, width, layers, rows):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.jit.script(torch.nn.Sequential(*mods).eval())
    path = os.path.join(WORK, name + ".pt")
    model.save(path)
    torch.manual_seed(1)
    inp = os.path.join(WORK, name + ".input.pt")
    torch.save(torch.randn(rows, width), inp)
    return path, inp


def split(model, stages):
    out = os.path.join(WORK, "%s.%d" % (os.path.basename(model)[:-3], stages))
    sh([PPC, "split", model, "-o", out, "--stages", stages])
    return os.path.join(out, "manifest.json")


STATS = re.compile(r"stats: rank=0 .*total_ms=([\d.]+)")


def ppc_total_ms(manifest, inp, mb, repeat):
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port()))
    out = sh([PPC, "run", manifest, "--input", inp, "--output", os.path.join(WORK, "out.pt"),
              "--device", DEVICE, "--microbatches", mb, "--repeat", repeat, "--stats"], env)
    return float(STATS.search(out).group(1))


def ppc_batch_ms(manifest, inp, mb, pairs=3, r1=5, r2=85):
    """Steady-state ms per batch: the difference of two launches' batch loops."""
    ppc_total_ms(manifest, inp, mb, 1)  # writes the meta cache
    samples = [(ppc_total_ms(manifest, inp, mb, r2) - ppc_total_ms(manifest, inp, mb, r1))
               / (r2 - r1) for _ in range(pairs)]
    return statistics.median(samples), samples


def plain_batch_ms(model, inp, mb, reps=40):
    out = sh([PLAIN, model, inp, mb, 1, 0, 5, reps, DEVICE + ":0" if DEVICE == "cuda" else DEVICE])
    warm = json.loads(out.strip().splitlines()[-1])["warm_ms"]
    return statistics.median(warm), warm


bench = {}
tiny, tiny_in = mlp("tiny", 16, 4, 256)
M = 256
plain, plain_s = plain_batch_ms(tiny, tiny_in, M)
kernel_us = 1000 * plain / M
rows = {}
for stages in (1, 4):
    t, ts = ppc_batch_ms(split(tiny, stages), tiny_in, M)
    rows["%d stage%s / 1 rank" % (stages, "" if stages == 1 else "s")] = {
        "ppc_batch_ms": t, "ppc_samples_ms": ts,
        "overhead_us_per_microbatch_per_stage": 1000 * (t - plain) / (M * stages),
        "overhead_over_kernel": (t - plain) / (M * stages) / (plain / M)}
bench["per_microbatch_overhead"] = {
    "model": "4 x (Linear(16,16)+ReLU), 256 rows, 256 microbatches",
    "plain_batch_ms": plain, "plain_samples_ms": plain_s,
    "kernel_us_per_microbatch": kernel_us, "runs": rows}

wide, wide_in = mlp("wide", 1024, 16, 4096)
M = 8
plain, plain_s = plain_batch_ms(wide, wide_in, M, reps=20)
t, ts = ppc_batch_ms(split(wide, 1), wide_in, M)
bench["one_stage_vs_plain"] = {
    "model": "16 x (Linear(1024,1024)+ReLU), 4096 rows, 8 microbatches",
    "ppc_batch_ms": t, "ppc_samples_ms": ts, "plain_batch_ms": plain,
    "plain_samples_ms": plain_s, "ratio": t / plain}

def traced(manifest, inp, mb, ranks):
    """The trace events of one warm batch (ranks > 1: under ppc launch)."""
    path = os.path.join(WORK, "trace.json")
    args = ["run", manifest, "--input", inp, "--output", os.path.join(WORK, "out.pt"),
            "--device", DEVICE, "--microbatches", mb, "--repeat", 2, "--trace", path]
    if ranks == 1:
        env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port()))
        sh([PPC, *args], env)
    else:
        sh([PPC, "launch", "--nproc-per-node", ranks, "--master-port", 0, "--", PPC, *args])
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    # The last batch mark of each rank bounds its warm batch.
    last = {}
    for e in events:
        if e["name"] == "batch":
            last[e["pid"]] = max(last.get(e["pid"], e["ts"]), e["ts"])
    return [e for e in events if e["name"] != "batch" and e["ts"] >= last.get(e["pid"], 0)]


def host_split(events, mb, stages):
    """(us in F, us outside F) per microbatch per stage, from rank 0's events."""
    ev = [e for e in events if e["pid"] == 0]
    span = max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)
    in_f = sum(e["dur"] for e in ev if e["name"] == "F")
    return in_f / (mb * stages), (span - in_f) / (mb * stages)


M = 256
manifest4 = split(tiny, 4)
in_f, outside = host_split(traced(manifest4, tiny_in, M, 1), M, 4)
trace = {"model": "4 x (Linear(16,16)+ReLU), 4 stages on 1 rank, 256 microbatches",
         "f_host_us_per_microbatch_per_stage": in_f, "host_overhead_us": outside,
         "kernel_us_per_microbatch_per_stage": kernel_us / 4,
         "host_overhead_over_kernel": outside / (kernel_us / 4),
         "target_host_overhead_us": 20, "met": outside <= 20}
if int(E["GPUS"]) >= 2:
    events = traced(split(tiny, 2), tiny_in, M, 2)
    by = {(e["pid"], e["name"], e["args"]["microbatch"]): e for e in events}
    overlapped = total = 0
    for m in range(M - 1):
        send, recv, nxt = by.get((0, "SEND_F", m)), by.get((1, "RECV_F", m)), by.get((0, "F", m + 1))
        if send and recv and nxt:
            total += 1
            overlapped += nxt["ts"] < recv["ts"] + recv["dur"] and nxt["ts"] + nxt["dur"] > send["ts"]
    in_f2, outside2 = host_split(events, M, 1)
    trace["two_ranks"] = {"model": "the same, 2 stages on 2 ranks over NCCL",
                          "f_host_us_per_microbatch": in_f2, "host_overhead_us": outside2,
                          "sends_overlapping_next_compute": overlapped, "sends": total,
                          "overlap": total > 0 and overlapped >= 0.9 * total}
else:
    trace["two_ranks"] = "skipped: one GPU (NCCL puts no two ranks of a group on one device)"
bench["trace"] = trace

with open(E["TESTS_LOG"]) as f:
    log = f.read()
results = {
    "gpu": E["GPU_NAME"], "gpus": int(E["GPUS"]), "torch": E["TORCH_VERSION"],
    "ppc_version": subprocess.run([PPC, "--version"], capture_output=True,
                                  text=True).stdout.strip(),
    "build_s": int(E["BUILD_S"]),
    "tests": {"exit": int(E["TESTS_RC"]), "seconds": int(E["TESTS_S"]),
              "results": re.findall(r"^(test_cuda_\w+) .*\.\.\. (ok|FAIL|ERROR|skipped.*)$",
                                    log, re.M),
              "log_tail": log[-4000:]},
    "benchmark": bench,
}
tmp = E["RESULTS"] + ".tmp"
with open(tmp, "w") as f:
    json.dump(results, f, indent=1)
os.replace(tmp, E["RESULTS"])
o = bench["per_microbatch_overhead"]
print("gpu-check: kernel time per microbatch (plain forward) %.1f us" % o["kernel_us_per_microbatch"])
for name, r in o["runs"].items():
    print("gpu-check: %s: overhead %.1f us per microbatch per stage (%.2fx the kernel time)"
          % (name, r["overhead_us_per_microbatch_per_stage"], r["overhead_over_kernel"]))
t = bench["trace"]
print("gpu-check: trace, 4 stages: host %.1f us in F and %.1f us outside it per microbatch per "
      "stage, against %.1f us of kernel time (target <= 20 us: %s)"
      % (t["f_host_us_per_microbatch_per_stage"], t["host_overhead_us"],
         t["kernel_us_per_microbatch_per_stage"], "met" if t["met"] else "missed"))
if isinstance(t["two_ranks"], dict):
    r = t["two_ranks"]
    print("gpu-check: trace, 2 ranks: %d of %d sends overlap the next F; host overhead %.1f us"
          % (r["sends_overlapping_next_compute"], r["sends"], r["host_overhead_us"]))
else:
    print("gpu-check: trace, 2 ranks: " + t["two_ranks"])
w = bench["one_stage_vs_plain"]
print("gpu-check: 1 stage %.2f ms per batch vs plain forward %.2f ms: %.3fx"
      % (w["ppc_batch_ms"], w["plain_batch_ms"], w["ratio"]))
EOF
echo "gpu-check: results in $results ($((SECONDS - start)) s in all)"
[ "$tests_rc" -eq 0 ] || fail "GPU tests failed; see $build/gpu-check.tests.log"
