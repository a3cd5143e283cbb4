#!/usr/bin/env bash
# Configures and builds ppc into build/ (Release, Ninja, ccache when available).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PPC_BUILD_DIR:-$root/build}
launcher=()
# Paths relative to the checkout let ccache reuse objects across clones (CI).
export CCACHE_BASEDIR=$root
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${PPC_BUILD_TYPE:-Release} "${launcher[@]}" "$@"
fi
cmake --build "$build" -j "${PPC_JOBS:-$(nproc)}"
