#!/usr/bin/env bash
# The second build configuration: ppc against the LibTorch inside PyPI's torch wheel (2.x, CUDA,
# NCCL) instead of Debian's LibTorch 1.13 (docs/build.md). Three steps, all by default:
#
#   scripts/wheel.sh [venv|build|test|all] [CTEST ARGS...]
#
#   venv   creates build-wheel/venv (Debian's python3 -m venv) and pip-installs torch, numpy
#          and transformers into it (about 2 minutes and 5.6 GB; transformers, which exports the
#          decoders of tests/cli/test_generate.py, is about 16 s and 0.3 GB of that); skipped when
#          the venv already has them, as installed by this script for the same requirements (a
#          venv made for fewer packages gets the missing ones).
#   build  configures and builds ppc against that torch into build-wheel/ (Release, Ninja,
#          ccache, -Werror). The wheel's LibTorch needs the CUDA toolkit's nvcc (CUDACXX, else
#          /usr/local/cuda/bin/nvcc) even to build for CPU; cmake/Torch.cmake does the rest.
#   test   runs the test suite in build-wheel/ (ctest; arguments go to ctest, e.g. -R cli_test_wheel).
#          The tests script their models with Debian's /usr/bin/python3 (torch 1.13) as in the
#          default build; tests/cli/test_wheel.py adds models scripted by the wheel's torch.
#
# Environment:
#   PPC_WHEEL_BUILD_DIR   build directory (default build-wheel/)
#   PPC_WHEEL_PYTHON      use this Python's torch instead of creating the venv (your own torch 2.x;
#                         without transformers, test_generate.py skips)
#   PPC_WHEEL_TORCH       pip requirement for torch (default "torch": the newest)
#   PPC_WHEEL_TRANSFORMERS  pip requirement for transformers (default "transformers": the newest)
#   PPC_WHEEL_PIP_TIMEOUT seconds pip may take in all before the step fails (default 1200)
#   PPC_JOBS, PPC_TEST_JOBS  build and test parallelism (default: cores, 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PPC_WHEEL_BUILD_DIR:-$root/build-wheel}
venv=$build/venv
requirement=${PPC_WHEEL_TORCH:-torch}
# Everything the venv step installs; the marker records this list.
packages=("$requirement" numpy "${PPC_WHEEL_TRANSFORMERS:-transformers}")
pip_timeout=${PPC_WHEEL_PIP_TIMEOUT:-1200}
python=${PPC_WHEEL_PYTHON:-$venv/bin/python}
export CCACHE_BASEDIR=$root

step=${1:-all}
[ $# -gt 0 ] && shift
case $step in venv | build | test | all) ;; *)
  echo "wheel.sh: unknown step '$step' (venv, build, test or all)" >&2
  exit 2
  ;;
esac

fail() {
  echo "wheel.sh: $*" >&2
  exit 2
}

make_venv() {
  if [ -n "${PPC_WHEEL_PYTHON:-}" ]; then
    "$python" -c 'import torch' 2>/dev/null || fail "PPC_WHEEL_PYTHON=$python cannot import torch"
    "$python" -c 'import transformers' 2>/dev/null ||
      echo "wheel.sh: note: $python has no transformers; tests/cli/test_generate.py will skip"
    return 0
  fi
  # The marker names the requirements the venv was made for; it is written last. One written
  # for other requirements (an older script's "torch" alone) makes pip install what is missing.
  local marker=$venv/.ppc-torch
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "${packages[*]}" ] &&
    "$python" -c 'import torch, numpy, transformers' 2>/dev/null; then
    echo "wheel.sh: $venv has ${packages[*]} already"
    return 0
  fi
  rm -f "$marker"
  mkdir -p "$build"
  [ -x "$python" ] || /usr/bin/python3 -m venv "$venv" || fail "cannot create $venv (python3-venv)"
  local start=$SECONDS log=$build/pip.log
  echo "wheel.sh: pip install ${packages[*]} into $venv (log: $log)"
  # Per-request timeout and retries, and a bound on the whole install: without a network pip
  # fails instead of waiting forever. No download cache: it would hold another 3 GB.
  if ! timeout "$pip_timeout" "$venv/bin/pip" install --disable-pip-version-check --no-cache-dir --timeout 60 --retries 2 \
    "${packages[@]}" >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    fail "pip could not install ${packages[*]} within $pip_timeout s (no network, or PyPI unreachable?); see $log"
  fi
  echo "${packages[*]}" >"$marker"
  echo "wheel.sh: installed $("$python" -c 'import torch, transformers as t; print("torch", torch.__version__, "and transformers", t.__version__)') in $((SECONDS - start)) s"
}

build_ppc() {
  [ -x "$python" ] || fail "no $python: run 'scripts/wheel.sh venv' first"
  # The torch package directory itself: its share/cmake holds TorchConfig.cmake for the
  # wheel's own libtorch. (torch.utils.cmake_prefix_path is not enough: with Debian's
  # libtorch-dev installed it lets CMake pick /usr's libtorch.so, and ppc crashes at start.)
  local torch_dir
  torch_dir=$("$python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])') ||
    fail "$python has no torch"
  local nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  local cuda=()
  if [ -x "$nvcc" ]; then
    cuda=(-DCMAKE_CUDA_COMPILER="$nvcc")
  elif compgen -G "$torch_dir/lib/libtorch_cuda.so" >/dev/null; then
    fail "this torch has CUDA and its CMake config needs the CUDA toolkit: no nvcc at $nvcc (set CUDACXX)"
  fi
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${PPC_BUILD_TYPE:-Release} "${launcher[@]}" \
    -DPPC_WERROR=ON -DCMAKE_PREFIX_PATH="$torch_dir" -DPPC_TORCH_PYTHON="$python" "${cuda[@]}" >"$build/cmake.log" 2>&1 ||
    { tail -n 30 "$build/cmake.log" >&2; fail "configuring $build failed; see $build/cmake.log"; }
  grep "^-- ppc: LibTorch" "$build/cmake.log" || true
  cmake --build "$build" -j "${PPC_JOBS:-$(nproc)}"
}

test_ppc() {
  [ -x "$build/bin/ppc" ] || fail "no $build/bin/ppc: run 'scripts/wheel.sh build' first"
  # The suite's models come from Debian's torch whichever LibTorch ppc uses: reuse the default
  # build's (the generator's stamps redo any that are stale).
  if [ ! -d "$build/models" ] && [ -d "$root/build/models" ]; then
    cp -a "$root/build/models" "$build/models"
  fi
  # Every run and train test of the default build goes over shared memory (--link auto, ranks
  # on one host); this suite runs them over Gloo (PPC_LINK sets --link's default), so that both
  # links pass the whole suite. Tests that name --link themselves (test_shm_link) still cover
  # shared memory under this LibTorch.
  (cd "$build" && PPC_LINK=gloo ctest --output-on-failure -j "${PPC_TEST_JOBS:-2}" "$@")
}

case $step in
venv) make_venv ;;
build) build_ppc ;;
test) test_ppc "$@" ;;
all) make_venv && build_ppc && test_ppc "$@" ;;
esac
