#!/usr/bin/env bash
# Configures and builds ppc into build/ (Release, Ninja, ccache when available).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PPC_BUILD_DIR:-$root/build}
launcher=()
# Paths relative to the checkout let ccache reuse objects across clones (CI).
export CCACHE_BASEDIR=$root
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# PPC_WERROR=ON (CI) makes the project's own warnings errors; it is applied to an
# existing build directory too, so switching it needs no fresh configure.
werror=()
[ -n "${PPC_WERROR:-}" ] && werror=(-DPPC_WERROR="$PPC_WERROR")
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${PPC_BUILD_TYPE:-Release} "${launcher[@]}" "${werror[@]}" "$@"
elif [ ${#werror[@]} -gt 0 ]; then
  cmake "$build" "${werror[@]}" >/dev/null
fi
cmake --build "$build" -j "${PPC_JOBS:-$(nproc)}"
