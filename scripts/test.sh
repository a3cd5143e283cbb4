#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit, golden IR, CLI and model tests) with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${PPC_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${PPC_TEST_JOBS:-2}" "$@"
