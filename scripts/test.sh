#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite; CI runs this (.ci/run). Four stages:
#   1. default build (gcc, -Werror) and ctest: unit, golden IR, CLI and model tests;
#   2. sanitizers: one clang build with AddressSanitizer + UndefinedBehaviorSanitizer and
#      libFuzzer coverage (build-sanitize/), running the unit tests, a two-rank pipeline
#      run compared with the model's expected output, and the fuzz regression inputs;
#   3. fuzzing: each fuzz target from the seeds, a fixed number of inputs with a fixed seed
#      (so CI fuzzes exactly what was fuzzed before the submission), or, with
#      PPC_FUZZ_SECONDS=N, for N seconds each with a random seed (exploration).
#   4. wheel: the second build configuration, ppc against the LibTorch inside PyPI's torch
#      wheel (scripts/wheel.sh: venv in build-wheel/venv, build in build-wheel/, the same
#      ctest suite there), then the default build's test_wheel.py, which needs the wheel's
#      python to script PyTorch 2.x models (docs/build.md). It needs PyPI and about 8 GB of
#      disk (the venv is 5.3 GB); with less than PPC_WHEEL_MIN_FREE_GB (default 10) free it
#      is skipped, and the summary says so.
# Every stage runs even when an earlier one failed; the last line is "N passed, N failed".
#
#   scripts/test.sh [CTEST ARGS...]       e.g. -R cli_ to run part of stage 1 (and 4) only
#   PPC_TEST_STAGES="default sanitize fuzz wheel" (default) picks stages;
#   PPC_FUZZ_SECONDS=600 fuzzes longer (see README, "Tests").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PPC_BUILD_DIR:-$root/build}
sanitize_build=${PPC_SANITIZE_BUILD_DIR:-$root/build-sanitize}
stages=${PPC_TEST_STAGES:-default sanitize fuzz wheel}
fuzz_seconds=${PPC_FUZZ_SECONDS:-}
jobs=${PPC_JOBS:-$(nproc)}
export CCACHE_BASEDIR=$root

"$root/scripts/setup.sh" || exit 2

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

default_build() {
  # PPC_WERROR turns warnings into errors (root CMakeLists.txt). The explicit configure
  # applies it to an existing build directory too.
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${PPC_BUILD_TYPE:-Release} "${launcher[@]}" \
    -DPPC_WERROR=ON >/dev/null && PPC_BUILD_DIR=$build "$root/scripts/build.sh"
}

sanitize_build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  # -O1 keeps sanitized code fast enough; line tables make the reports name file:line.
  cmake -S "$root" -B "$sanitize_build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_SANITIZE="-O1" \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 "${launcher[@]}" \
    -DPPC_SANITIZE=address,undefined -DPPC_FUZZ=ON -DPPC_SEED_BUILD_DIR="$build" \
    -DPPC_MODELS_DIR="$build/models" >/dev/null &&
    cmake --build "$sanitize_build" -j "$jobs" --target ppc ppc_unit_tests \
      fuzz_manifest fuzz_meta_cache fuzz_user_meta fuzz_meta_header fuzz_tensor_file fuzz_schedule_csv fuzz_trace \
      make_header_seeds
}

# A two-rank run of the mlp test model under the sanitizers, twice: the first infers the
# boundary metadata and writes the meta caches, the second reads them. Both outputs must
# match the unsplit model's output.
sanitize_pipeline() {
  local ppc=$sanitize_build/bin/ppc models=$build/models tmp rc=0
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
    for bin in "$ppc" "$build/bin/ppc"; do
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
  [ $rc -eq 0 ] && echo "sanitized training matches the default build"
  rm -rf "$tmp"
  return $rc
}

# fuzz_target NAME RUNS [BUILD]: RUNS inputs from seed 1 (about 45 s each here), or
# PPC_FUZZ_SECONDS seconds from a random seed; BUILD is the fuzz build (build-sanitize/).
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

# The pt2 fuzz build (stage 4, after the wheel build): fuzz_pt2 needs LibTorch 2.x, so it gets
# a small clang build of its own against the wheel's LibTorch, as scripts/wheel.sh points CMake
# at it, with the sanitizers and coverage of build-sanitize/; only fuzz_pt2 is built (it
# compiles the few lib/ sources it reads, fuzz/CMakeLists.txt).
wheel_build=${PPC_WHEEL_BUILD_DIR:-$root/build-wheel}
wheel_fuzz_build=${PPC_WHEEL_FUZZ_BUILD_DIR:-$root/build-wheel-fuzz}
wheel_python=${PPC_WHEEL_PYTHON:-$wheel_build/venv/bin/python}
wheel_fuzz_build() {
  local torch_dir nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc} cuda=() launcher=()
  torch_dir=$("$wheel_python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])') ||
    return 2
  [ -x "$nvcc" ] && cuda=(-DCMAKE_CUDA_COMPILER="$nvcc")
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  mkdir -p "$wheel_fuzz_build"
  cmake -S "$root" -B "$wheel_fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_SANITIZE="-O1" \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 "${launcher[@]}" \
    -DPPC_SANITIZE=address,undefined -DPPC_FUZZ=ON -DBUILD_TESTING=OFF \
    -DCMAKE_PREFIX_PATH="$torch_dir" -DPPC_TORCH_PYTHON="$wheel_python" "${cuda[@]}" \
    >"$wheel_fuzz_build/cmake.log" 2>&1 ||
    { tail -n 30 "$wheel_fuzz_build/cmake.log"; echo "configuring $wheel_fuzz_build failed; see $wheel_fuzz_build/cmake.log"; return 2; }
  grep -q "^-- ppc: torch.export programs (.pt2): ON" "$wheel_fuzz_build/cmake.log" ||
    { echo "$wheel_fuzz_build: this LibTorch has no torch.export schema (see $wheel_fuzz_build/cmake.log)"; return 2; }
  cmake --build "$wheel_fuzz_build" -j "$jobs" --target fuzz_pt2
}

# Seeds of fuzz_pt2: the five generated .pt2 models (tests/models/make_pt2_models.py, which
# keeps up-to-date ones) and the stage files of a 2-stage split of two of them by the wheel
# build's ppc.
wheel_fuzz_seeds() {
  local models=$wheel_build/pt2-models seeds=$wheel_fuzz_build/fuzz-seeds/pt2 name
  "$wheel_python" -W ignore "$root/tests/models/make_pt2_models.py" "$models" >/dev/null || return 2
  rm -rf "$seeds" && mkdir -p "$seeds" && cp "$models"/*.pt2 "$seeds/" || return 2
  for name in pt2_mlp pt2_two_io; do
    "$wheel_build/bin/ppc" split "$models/$name.pt2" --stages 2 -o "$seeds/$name.split" >/dev/null || return 2
    for f in "$seeds/$name.split"/stage_*.pt2; do mv "$f" "$seeds/$name.$(basename "$f")"; done
    rm -rf "$seeds/$name.split"
  done
  ls "$seeds"
}

# (In fuzz/: this build has BUILD_TESTING off, so the top directory lists no tests; ctest
# --no-tests=error makes a missing replay a failure, not a pass.)
wheel_fuzz_regressions() {
  (cd "$wheel_fuzz_build/fuzz" && ctest --output-on-failure --no-tests=error -R '^fuzz_regressions_pt2$')
}

run_ctest() { (cd "$build" && ctest --output-on-failure -j "${PPC_TEST_JOBS:-2}" "$@"); }
# enough_disk_for_wheel: whether the filesystem of the wheel's build directory has room for
# the venv and the build; when it has not, records the stage as skipped, with the reason.
enough_disk_for_wheel() {
  local dir=${PPC_WHEEL_BUILD_DIR:-$root/build-wheel} need=${PPC_WHEEL_MIN_FREE_GB:-10} free
  # An existing venv is most of what the stage needs; count it as free.
  [ -f "$dir/venv/.ppc-torch" ] && need=3
  while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
  free=$(df -P -k "$dir" | awk 'NR == 2 {print int($4 / 1048576)}')
  [ "$free" -ge "$need" ] && return 0
  echo "=== wheel: skipped, $free GB free under $dir, needs $need GB"
  summary+=("SKIP  wheel ($free GB free under $dir, needs $need GB: PPC_WHEEL_MIN_FREE_GB)")
  return 1
}

fuzz_regressions() { (cd "$sanitize_build" && ctest --output-on-failure -R '^fuzz_regressions_'); }

sanitize_built=no
for stage in $stages; do
  case $stage in
  default)
    step "default build" default_build && step "ctest" run_ctest "$@"
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
      for target in manifest:60000 meta_cache:80000 user_meta:400000 meta_header:400000 tensor_file:80000 \
        schedule_csv:200000 trace:20000; do
        step "fuzz ${target%%:*}" fuzz_target "${target%%:*}" "${target##*:}"
      done
    fi
    ;;
  wheel)
    if ! enough_disk_for_wheel; then
      skipped=$((skipped + 1))
      continue
    fi
    if step "wheel venv" "$root/scripts/wheel.sh" venv && step "wheel build" "$root/scripts/wheel.sh" build; then
      step "wheel ctest" "$root/scripts/wheel.sh" test "$@"
      # fuzz_pt2 (the .pt2 reader) in its own build against the wheel's LibTorch.
      if step "pt2 fuzz build" wheel_fuzz_build; then
        step "pt2 fuzz regressions" wheel_fuzz_regressions
        step "pt2 fuzz seeds" wheel_fuzz_seeds && step "fuzz pt2" fuzz_target pt2 8000 "$wheel_fuzz_build"
      fi
      # The 1.13 build's side of test_wheel.py and test_pt2.py: it refuses the 2.x-scripted
      # models and the .pt2 programs that the wheel's Python makes.
      [ -x "$build/bin/ppc" ] && step "default build: test_wheel, test_pt2" run_ctest -R '^cli_test_(wheel|pt2)\.'
    fi
    ;;
  *) echo "test.sh: unknown stage '$stage' (default, sanitize, fuzz, wheel)"; exit 2 ;;
  esac
done

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed$([ $skipped -eq 0 ] || echo ", $skipped stage(s) skipped")"
[ $failed -eq 0 ]
