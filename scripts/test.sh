#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite in both build configurations; CI runs this
# (.ci/run). Four stages:
#   1. pytorch2: the PyTorch 2.x configuration (scripts/build.sh pytorch2: build/, its Python from
#      scripts/python.sh, -Werror) and ctest there, over Gloo (PPC_LINK=gloo: the system stage
#      runs the same suite over the shared-memory link, so both links pass it); then fuzz_pt2 (the
#      .pt2 reader) in a small sanitized clang build of its own against that LibTorch. It needs
#      PyPI and about 8 GB of disk when no python3 here has torch 2.x (the venv is 5.7 GB); with
#      less than PPC_WHEEL_MIN_FREE_GB (default 10) free it is skipped, and the summary says so.
#   2. system: the system LibTorch configuration (Debian's 1.13, build-system/) and ctest there;
#      its tests compare with Debian's /usr/bin/python3, and test_wheel.py and test_pt2.py check
#      that it refuses what PyTorch 2.x makes (with stage 1's Python: PPC_PT2_PYTHON).
#   3. sanitize: one clang build with AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer
#      coverage against the system LibTorch (build-sanitize/), running the unit tests, a two-rank
#      pipeline run compared with the model's expected output, and the fuzz regression inputs;
#   4. fuzz: each fuzz target from the seeds, a fixed number of inputs with a fixed seed (so CI
#      fuzzes exactly what was fuzzed before the submission), or, with PPC_FUZZ_SECONDS=N, for
#      N seconds each with a random seed (exploration).
# Every stage runs even when an earlier one failed; the last line is "N passed, N failed".
#
#   scripts/test.sh [CTEST ARGS...]       e.g. -R cli_ to run part of stages 1 and 2 only
#   PPC_TEST_STAGES="pytorch2 system sanitize fuzz" (default) picks stages;
#   PPC_FUZZ_SECONDS=600 fuzzes longer (see README, "Tests").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PPC_BUILD_DIR:-$root/build}
system_build=${PPC_SYSTEM_BUILD_DIR:-$root/build-system}
sanitize_build=${PPC_SANITIZE_BUILD_DIR:-$root/build-sanitize}
stages=${PPC_TEST_STAGES:-pytorch2 system sanitize fuzz}
fuzz_seconds=${PPC_FUZZ_SECONDS:-}
jobs=${PPC_JOBS:-$(nproc)}
export CCACHE_BASEDIR=$root

"$root/scripts/setup.sh" all || exit 2

# Runtime options for sanitized programs. The stages look for memory errors and undefined
# behaviour; LeakSanitizer is off until its reports on the multi-process runs (Gloo threads,
# uninstrumented LibTorch) have been sorted into ppc's and LibTorch's own.
# detect_odr_violation=1: libppc_lib is a static library linked both into libppc_runtime.so
# and into each program, so its globals (the error types' IDs, lib/Error.h) exist twice with
# the same size, and the dynamic linker binds both to the program's copy; level 1 still
# reports two definitions of one name that differ in size.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:detect_odr_violation=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

passed=0 failed=0 skipped=0 summary=()
# step NAME COMMAND...: runs one step, records its result and time.
step() {
  local name=$1 start=$SECONDS rc
  shift
  echo "=== $name"
  "$@"
  rc=$?
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)) summary+=("PASS  $name ($((SECONDS - start)) s)")
  else
    failed=$((failed + 1)) summary+=("FAIL  $name ($((SECONDS - start)) s, exit $rc)")
  fi
  return $rc
}

# The two configurations' builds; PPC_WERROR turns warnings into errors (root CMakeLists.txt).
pytorch2_build() { PPC_WERROR=ON PPC_BUILD_DIR=$build "$root/scripts/build.sh" pytorch2; }
system_build() { PPC_WERROR=ON PPC_SYSTEM_BUILD_DIR=$system_build "$root/scripts/build.sh" system; }
# The PyTorch 2.x configuration's Python (scripts/python.sh: made by pytorch2_build).
pytorch2_python() { "$root/scripts/python.sh" "$build" 2>/dev/null | tail -n 1; }

sanitize_build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  # -O1 keeps sanitized code fast enough; line tables make the reports name file:line.
  cmake -S "$root" -B "$sanitize_build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_SANITIZE="-O1" \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 "${launcher[@]}" \
    -DPPC_SANITIZE=address,undefined -DPPC_FUZZ=ON -DPPC_SEED_BUILD_DIR="$system_build" \
    -DPPC_MODELS_DIR="$system_build/models" >/dev/null &&
    cmake --build "$sanitize_build" -j "$jobs" --target ppc ppc_unit_tests \
      fuzz_manifest fuzz_meta_cache fuzz_user_meta fuzz_meta_header fuzz_tensor_file fuzz_schedule_csv fuzz_trace \
      fuzz_checkpoint fuzz_safetensors fuzz_completion \
      make_header_seeds
}

# A two-rank run of the mlp test model under the sanitizers, twice: the first infers the
# boundary metadata and writes the meta caches, the second reads them. Both outputs must
# match the unsplit model's output.
sanitize_pipeline() {
  local ppc=$sanitize_build/bin/ppc models=$system_build/models tmp rc=0
  tmp=$(mktemp -d) || return 2
  "$ppc" split "$models/mlp.pt" -o "$tmp/split" --stages 2 || rc=1
  for run in infer cached; do
    [ $rc -eq 0 ] || break
    "$ppc" launch --nproc-per-node 2 --master-port 0 --timeout 300 -- \
      "$ppc" run "$tmp/split/manifest.json" --input "$models/mlp.input.pt" \
      --output "$tmp/$run.pt" --microbatches 2 --stats || rc=1
    [ $rc -eq 0 ] && /usr/bin/python3 - "$tmp/$run.pt" "$models/mlp.expected.pt" <<'PY' || rc=1
import sys, torch
got, want = torch.load(sys.argv[1]), torch.load(sys.argv[2])
if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
    sys.exit("output differs from the unsplit model: max abs diff %g" % (got - want).abs().max())
print("output matches the unsplit model")
PY
  done
  # Training: 2 steps of every backward action kind (zb-h1 has I and W, 1f1b B) on 4
  # stages over 2 ranks, the losses checked against a run without sanitizers (--quiet:
  # the loss lines without their timing).
  [ $rc -eq 0 ] && "$ppc" split "$models/mlp.pt" -o "$tmp/split4" --stages 4 || rc=1
  [ $rc -eq 0 ] && /usr/bin/python3 -c "
import torch; x = torch.load('$models/mlp.input.pt')
torch.save((x, torch.arange(x.shape[0]) % 10), '$tmp/data.pt')" || rc=1
  for schedule in zb-h1 1f1b; do
    [ $rc -eq 0 ] || break
    for bin in "$ppc" "$system_build/bin/ppc"; do
      "$bin" launch --nproc-per-node 2 --master-port 0 --timeout 300 -- \
        "$bin" train "$tmp/split4/manifest.json" --data "$tmp/data.pt" --loss cross_entropy \
        --steps 2 --microbatches 3 --schedule $schedule --no-meta-cache --quiet \
        >"$tmp/train.out" || rc=1
      grep "loss" "$tmp/train.out" >>"$tmp/losses.$schedule"
    done
    # 2 steps from each build, every line twice.
    [ $rc -eq 0 ] && { [ "$(grep -c ' loss ' "$tmp/losses.$schedule")" -eq 4 ] &&
      sort "$tmp/losses.$schedule" | uniq -c | awk '$1 != 2 {exit 1}' ||
      { echo "sanitized training losses differ:"; cat "$tmp/losses.$schedule"; rc=1; }; }
  done
  [ $rc -eq 0 ] && echo "sanitized training matches the system LibTorch build"
  rm -rf "$tmp"
  return $rc
}

# fuzz_target NAME RUNS [BUILD]: RUNS inputs from seed 1 (CI's fixed budget, 3 to 15 s each
# here), or PPC_FUZZ_SECONDS seconds from a random seed (exploration); BUILD is the fuzz build (build-sanitize/).
fuzz_target() {
  local sanitize_build=${3:-$sanitize_build}
  local name=$1 corpus=$sanitize_build/fuzz-corpus/$1 artifacts=$sanitize_build/fuzz-artifacts/$1/
  local budget=(-seed=1 -runs="$2")
  [ -n "$fuzz_seconds" ] && budget=(-max_total_time="$fuzz_seconds")
  # A fixed-seed run starts from the seeds alone, so it is the same run every time.
  [ -n "$fuzz_seconds" ] || rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  # The first directory collects new inputs; seeds and regressions are only read.
  "$sanitize_build/bin/fuzz_$name" "${budget[@]}" -timeout=20 -rss_limit_mb=4096 -malloc_limit_mb=1024 \
    -artifact_prefix="$artifacts" -print_final_stats=1 \
    "$corpus" "$sanitize_build/fuzz-seeds/$name" "$root/fuzz/regressions/$name" 2>&1 | tail -n 25
  local rc=${PIPESTATUS[0]}
  [ $rc -eq 0 ] || echo "fuzz_$name failed; the input is in $artifacts (add it to fuzz/regressions/$name/)"
  return $rc
}

# The pt2 fuzz build (stage 1, after the PyTorch 2.x build): fuzz_pt2 needs LibTorch 2.x, so it
# gets a small clang build of its own against that LibTorch, as scripts/build.sh points CMake at
# it, with the sanitizers and coverage of build-sanitize/; only fuzz_pt2 is built (it compiles
# the few lib/ sources it reads, fuzz/CMakeLists.txt).
pt2_fuzz_build=${PPC_PT2_FUZZ_BUILD_DIR:-$root/build-pt2-fuzz}
pt2_fuzz_build() {
  local torch_dir nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc} cuda=() launcher=() python
  python=$(pytorch2_python) || return 2
  torch_dir=$("$python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])') ||
    return 2
  [ -x "$nvcc" ] && cuda=(-DCMAKE_CUDA_COMPILER="$nvcc")
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  mkdir -p "$pt2_fuzz_build"
  cmake -S "$root" -B "$pt2_fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_SANITIZE="-O1" \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 "${launcher[@]}" \
    -DPPC_SANITIZE=address,undefined -DPPC_FUZZ=ON -DBUILD_TESTING=OFF \
    -DCMAKE_PREFIX_PATH="$torch_dir" -DPPC_TORCH_PYTHON="$python" "${cuda[@]}" \
    >"$pt2_fuzz_build/cmake.log" 2>&1 ||
    { tail -n 30 "$pt2_fuzz_build/cmake.log"; echo "configuring $pt2_fuzz_build failed; see $pt2_fuzz_build/cmake.log"; return 2; }
  grep -q "^-- ppc: torch.export programs (.pt2): ON" "$pt2_fuzz_build/cmake.log" ||
    { echo "$pt2_fuzz_build: this LibTorch has no torch.export schema (see $pt2_fuzz_build/cmake.log)"; return 2; }
  cmake --build "$pt2_fuzz_build" -j "$jobs" --target fuzz_pt2
}

# Seeds of fuzz_pt2: the five generated .pt2 models (tests/models/make_pt2_models.py, which
# keeps up-to-date ones) and the stage files of a 2-stage split of two of them by the PyTorch
# 2.x build's ppc.
pt2_fuzz_seeds() {
  local models=$build/pt2-models seeds=$pt2_fuzz_build/fuzz-seeds/pt2 name
  "$(pytorch2_python)" -W ignore "$root/tests/models/make_pt2_models.py" "$models" >/dev/null || return 2
  rm -rf "$seeds" && mkdir -p "$seeds" && cp "$models"/*.pt2 "$seeds/" || return 2
  for name in pt2_mlp pt2_two_io; do
    "$build/bin/ppc" split "$models/$name.pt2" --stages 2 -o "$seeds/$name.split" >/dev/null || return 2
    for f in "$seeds/$name.split"/stage_*.pt2; do mv "$f" "$seeds/$name.$(basename "$f")"; done
    rm -rf "$seeds/$name.split"
  done
  ls "$seeds"
}

# (In fuzz/: this build has BUILD_TESTING off, so the top directory lists no tests; ctest
# --no-tests=error makes a missing replay a failure, not a pass.)
pt2_fuzz_regressions() {
  (cd "$pt2_fuzz_build/fuzz" && ctest --output-on-failure --no-tests=error -R '^fuzz_regressions_pt2$')
}

# ctest_in DIR [CTEST ARGS...]: the suite in one configuration's build directory.
ctest_in() {
  local dir=$1
  shift
  (cd "$dir" && ctest --output-on-failure -j "${PPC_TEST_JOBS:-2}" "$@")
}
# The PyTorch 2.x suite over Gloo (see the top).
pytorch2_ctest() { PPC_LINK=gloo ctest_in "$build" "$@"; }
# The system LibTorch suite; test_wheel.py and test_pt2.py make their 2.x models with
# PPC_PT2_PYTHON, stage 1's Python (they skip without one).
system_ctest() {
  local python
  python=$(pytorch2_python) || python=
  PPC_PT2_PYTHON=$python ctest_in "$system_build" "$@"
}
# enough_disk_for_pytorch2: whether the filesystem of build/ has room for the venv and the
# build; when it has not, records the stage as skipped, with the reason.
enough_disk_for_pytorch2() {
  local dir=$build need=${PPC_WHEEL_MIN_FREE_GB:-10} free
  # An existing venv is most of what the stage needs, and a python3 with torch 2.x all of it.
  [ -f "$dir/venv/.ppc-torch" ] && need=3
  [ -n "${PPC_PYTHON:-${PPC_WHEEL_PYTHON:-}}" ] && need=3
  while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
  free=$(df -P -k "$dir" | awk 'NR == 2 {print int($4 / 1048576)}')
  [ "$free" -ge "$need" ] && return 0
  echo "=== pytorch2: skipped, $free GB free under $dir, needs $need GB"
  summary+=("SKIP  pytorch2 ($free GB free under $dir, needs $need GB: PPC_WHEEL_MIN_FREE_GB)")
  return 1
}

fuzz_regressions() { (cd "$sanitize_build" && ctest --output-on-failure -R '^fuzz_regressions_'); }

sanitize_built=no
for stage in $stages; do
  case $stage in
  pytorch2)
    if ! enough_disk_for_pytorch2; then
      skipped=$((skipped + 1))
      continue
    fi
    if step "PyTorch 2.x build" pytorch2_build; then
      step "PyTorch 2.x ctest" pytorch2_ctest "$@"
      # fuzz_pt2 (the .pt2 reader) in its own build against this LibTorch.
      if step "pt2 fuzz build" pt2_fuzz_build; then
        step "pt2 fuzz regressions" pt2_fuzz_regressions
        step "pt2 fuzz seeds" pt2_fuzz_seeds && step "fuzz pt2" fuzz_target pt2 8000 "$pt2_fuzz_build"
      fi
    fi
    ;;
  system)
    step "system LibTorch build" system_build && step "system LibTorch ctest" system_ctest "$@"
    ;;
  sanitize | fuzz)
    if [ $sanitize_built = no ]; then
      step "sanitizer build" sanitize_build && sanitize_built=yes || sanitize_built=failed
    fi
    [ $sanitize_built = yes ] || continue
    if [ "$stage" = sanitize ]; then
      step "unit tests (asan+ubsan)" "$sanitize_build/bin/ppc_unit_tests" --gtest_brief=1
      step "two-rank run (asan+ubsan)" sanitize_pipeline
      step "fuzz regressions" fuzz_regressions
    elif step "fuzz seeds" cmake --build "$sanitize_build" --target fuzz_seeds; then
      for target in manifest:15000 meta_cache:20000 user_meta:100000 meta_header:100000 tensor_file:40000 \
        schedule_csv:50000 trace:10000 checkpoint:6000 safetensors:30000 completion:50000; do
        step "fuzz ${target%%:*}" fuzz_target "${target%%:*}" "${target##*:}"
      done
    fi
    ;;
  *) echo "test.sh: unknown stage '$stage' (pytorch2, system, sanitize, fuzz)"; exit 2 ;;
  esac
done

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed$([ $skipped -eq 0 ] || echo ", $skipped stage(s) skipped")"
[ $failed -eq 0 ]
