#!/usr/bin/env bash
# Configures and builds ppc in one of its two configurations (docs/build.md):
#
#   scripts/build.sh [pytorch2|system] [TARGET...]
#
#   pytorch2  (the default) into build/: the LibTorch of PyTorch 2.x, the torch users have:
#             TorchScript and torch.export (.pt2) programs, CUDA and NCCL. Its Python comes
#             from scripts/python.sh (your python3's torch 2.x, or a venv in build/venv). The
#             wheel's LibTorch needs the CUDA toolkit's nvcc (CUDACXX, else
#             /usr/local/cuda/bin/nvcc) even to build for CPU; cmake/Torch.cmake does the rest.
#   system    into build-system/: Debian's LibTorch 1.13 (libtorch-dev), TorchScript only, CPU.
#
# TARGETs (e.g. ppc) build only those; none builds everything, tests included. Release, Ninja,
# ccache when available.
#
# Environment: PPC_BUILD_DIR, PPC_SYSTEM_BUILD_DIR (the two directories), PPC_BUILD_TYPE,
# PPC_JOBS (default: cores), PPC_WERROR=ON (CI: ppc's own warnings are errors).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
config=pytorch2
case ${1:-} in pytorch2 | system) config=$1 && shift ;; esac

fail() {
  echo "build.sh: $*" >&2
  exit 2
}

args=(-G Ninja -DCMAKE_BUILD_TYPE="${PPC_BUILD_TYPE:-Release}")
# Paths relative to the checkout let ccache reuse objects across clones (CI).
export CCACHE_BASEDIR=$root
command -v ccache >/dev/null && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
[ -n "${PPC_WERROR:-}" ] && args+=(-DPPC_WERROR="$PPC_WERROR")

if [ $config = pytorch2 ]; then
  build=${PPC_BUILD_DIR:-$root/build}
  # A build/ made before PyTorch 2.x became the default holds the system LibTorch; CMake
  # cannot switch a build directory's LibTorch.
  if [ -f "$build/CMakeCache.txt" ] && ! grep -q "^PPC_TORCH_PYTHON:.*=..*" "$build/CMakeCache.txt"; then
    fail "$build holds a system LibTorch build; move it to build-system/ (scripts/build.sh system) or remove it"
  fi
  python=$("$root/scripts/python.sh" "$build" | tail -n 1)
  # The torch package directory itself: its share/cmake holds TorchConfig.cmake for that
  # torch's own LibTorch. (torch.utils.cmake_prefix_path is not enough: with Debian's
  # libtorch-dev installed it lets CMake pick /usr's libtorch.so, and ppc crashes at start.)
  torch_dir=$("$python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])') ||
    fail "$python has no torch"
  nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  if [ -x "$nvcc" ]; then
    args+=(-DCMAKE_CUDA_COMPILER="$nvcc")
  elif compgen -G "$torch_dir/lib/libtorch_cuda.so" >/dev/null; then
    fail "this torch has CUDA and its CMake config needs the CUDA toolkit: no nvcc at $nvcc (set CUDACXX)"
  fi
  args+=(-DCMAKE_PREFIX_PATH="$torch_dir" -DPPC_TORCH_PYTHON="$python")
else
  build=${PPC_SYSTEM_BUILD_DIR:-$root/build-system}
  if [ -f "$build/CMakeCache.txt" ] && grep -q "^PPC_TORCH_PYTHON:.*=..*" "$build/CMakeCache.txt"; then
    fail "$build holds a PyTorch 2.x build; remove it or set PPC_SYSTEM_BUILD_DIR"
  fi
  compgen -G "/usr/lib/*/cmake/Torch/TorchConfig.cmake" >/dev/null ||
    fail "no system LibTorch (Debian's libtorch-dev): run scripts/setup.sh system"
fi

mkdir -p "$build"
# Configured every time (a no-op when nothing changed), so PPC_WERROR and a new Python apply to
# an existing directory too.
cmake -S "$root" -B "$build" "${args[@]}" >"$build/cmake.log" 2>&1 ||
  { tail -n 30 "$build/cmake.log" >&2; fail "configuring $build failed; see $build/cmake.log"; }
grep "^-- ppc: LibTorch" "$build/cmake.log" || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "${PPC_JOBS:-$(nproc)}" "${targets[@]}"
