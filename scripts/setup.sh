#!/usr/bin/env bash
# Installs what ppc needs to build and test on Debian 12, skipping what is already there.
#
# Everything comes from Debian's packages: LibTorch 1.13 (libtorch-dev), LLVM 14 Support with FileCheck
# and lit (llvm-14-dev, llvm-14-tools), CLI11, GoogleTest, Google Benchmark, OpenBLAS (without it LibTorch
# falls back to the reference BLAS, about 60x slower), python3-torch/torchvision to script test models, and
# clang 14 with its sanitizer and libFuzzer runtimes (libclang-rt-14-dev) for the sanitizer and fuzz stages,
# python3-venv for the wheel configuration's venv (scripts/wheel.sh), and nlohmann-json3-dev, which the
# wheel's generated .pt2 schema types (torch/csrc/utils/generated_serialization_types.h) include.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git
  libtorch-dev llvm-14-dev llvm-14-tools libcli11-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libopenblas0-pthread python3-torch python3-torchvision iproute2
  clang-14 libclang-rt-14-dev python3-venv nlohmann-json3-dev
)

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
