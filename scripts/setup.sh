#!/usr/bin/env bash
# Installs the Debian 12 packages ppc needs, skipping what is already there.
#
#   scripts/setup.sh [pytorch2|system|all]     (default: all, what the test suite needs)
#
# pytorch2 (the PyTorch 2.x configuration, scripts/quickstart.sh): the compilers and build tools,
# LLVM 14 Support with FileCheck and lit (llvm-14-dev, llvm-14-tools), CLI11, GoogleTest, Google
# Benchmark, cpp-httplib and prometheus-cpp (ppc serve's HTTP and metrics, found by pkg-config
# and CMake), nlohmann-json3-dev (which PyTorch's generated .pt2 schema types,
# torch/csrc/utils/generated_serialization_types.h, include), libgloo-dev (Gloo's headers, which
# c10d's ProcessGroupGloo.hpp includes: the wheel ships Gloo's library, not its headers) and
# python3-venv for the venv that scripts/python.sh makes when no python3 here has torch 2.x.
# The torch itself comes from PyPI.
# system adds Debian's LibTorch 1.13 (libtorch-dev), OpenBLAS (without it that LibTorch falls
# back to the reference BLAS, about 60x slower) and python3-torch/torchvision, its Python.
# all adds clang 14 with its sanitizer and libFuzzer runtimes (libclang-rt-14-dev) for the test
# suite's sanitizer and fuzz stages.
set -euo pipefail
config=${1:-all}

common=(
  build-essential cmake ninja-build ccache git iproute2
  llvm-14-dev llvm-14-tools libcli11-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  pkg-config libcpp-httplib-dev prometheus-cpp-dev
)
pytorch2=(python3-venv nlohmann-json3-dev libgloo-dev)
system=(libtorch-dev libgloo-dev libopenblas0-pthread python3-torch python3-torchvision)
tests=(clang-14 libclang-rt-14-dev)
case $config in
pytorch2) packages=("${common[@]}" "${pytorch2[@]}") ;;
system) packages=("${common[@]}" "${system[@]}") ;;
all) packages=("${common[@]}" "${pytorch2[@]}" "${system[@]}" "${tests[@]}") ;;
*)
  echo "setup.sh: unknown configuration '$config' (pytorch2, system or all)" >&2
  exit 2
  ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
