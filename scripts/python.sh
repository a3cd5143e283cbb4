#!/usr/bin/env bash
# The Python of the PyTorch 2.x configuration: the torch whose LibTorch ppc links, and the one that
# exports the example and test models and computes the references the tests compare with.
#
#   scripts/python.sh BUILD_DIR      prints that Python's absolute path as the last line of stdout
#
# The first that applies:
#   1. PPC_PYTHON (or its older name PPC_WHEEL_PYTHON): that Python; it must import torch 2.x.
#   2. `python3` on PATH, when it imports torch 2.x: the torch you already have. (Debian's
#      /usr/bin/python3 has torch 1.13: that is the system LibTorch configuration's Python.)
#   3. A venv in BUILD_DIR/venv (Debian's python3 -m venv) with PyPI's newest torch, numpy,
#      torchvision, transformers, accelerate and timm: about 3 minutes and 5.7 GB the first
#      time, skipped when it has them already. torchvision makes the example and test models;
#      transformers exports the decoders of tests/cli/test_generate.py, accelerate
#      (init_empty_weights) those without weights of tests/cli/test_weights.py, and timm the
#      ViT of docs/export.md's recipe (tests/cli/test_docs_literal.py).
#
# Environment: PPC_WHEEL_TORCH, PPC_WHEEL_TRANSFORMERS (pip requirements, default the newest),
# PPC_WHEEL_PIP_TIMEOUT (seconds pip may take in all, default 1200).
set -euo pipefail
[ $# -eq 1 ] || {
  echo "usage: scripts/python.sh BUILD_DIR" >&2
  exit 2
}
# Absolute, so that the printed path works outside the checkout too.
build=$(realpath -m -- "$1")
venv=$build/venv

fail() {
  echo "python.sh: $*" >&2
  exit 2
}
# torch_major PYTHON: the major version of PYTHON's torch, or nothing.
torch_major() { "$1" -c 'import torch; print(torch.__version__.split(".")[0])' 2>/dev/null || true; }
# note_missing PYTHON: says which of the optional packages PYTHON lacks and what skips without them.
note_missing() {
  "$1" -c 'import torchvision' 2>/dev/null ||
    echo "python.sh: note: $1 has no torchvision: the quickstart exports a torch.nn Transformer instead of resnet18, and the test models need it" >&2
  "$1" -c 'import transformers' 2>/dev/null ||
    echo "python.sh: note: $1 has no transformers; tests/cli/test_generate.py will skip" >&2
}

given=${PPC_PYTHON:-${PPC_WHEEL_PYTHON:-}}
if [ -n "$given" ]; then
  [[ $given != */* ]] || given=$(realpath -s -- "$given")
  major=$(torch_major "$given")
  [ -n "$major" ] || fail "PPC_PYTHON=$given cannot import torch"
  [ "$major" -ge 2 ] || fail "PPC_PYTHON=$given has torch $major.x; the PyTorch 2.x configuration needs 2.x"
  note_missing "$given"
  echo "$given"
  exit 0
fi

path=$(command -v python3 || true)
major=$([ -z "$path" ] || torch_major "$path")
if [ -n "$major" ] && [ "$major" -ge 2 ]; then
  echo "python.sh: using the torch of $path ($("$path" -c 'import torch; print(torch.__version__)'))" >&2
  note_missing "$path"
  echo "$path"
  exit 0
fi

requirement=${PPC_WHEEL_TORCH:-torch}
packages=("$requirement" numpy torchvision "${PPC_WHEEL_TRANSFORMERS:-transformers}" accelerate timm)
python=$venv/bin/python
# The marker names the requirements the venv was made for; it is written last. One made for
# other requirements (an older script's list) makes pip install what is missing.
marker=$venv/.ppc-torch
if [ -f "$marker" ] && [ "$(cat "$marker")" = "${packages[*]}" ] &&
  "$python" -c 'import torch, numpy, torchvision, transformers, accelerate, timm' 2>/dev/null; then
  echo "python.sh: $venv has ${packages[*]} already" >&2
  echo "$python"
  exit 0
fi
rm -f "$marker"
mkdir -p "$build"
[ -x "$python" ] || /usr/bin/python3 -m venv "$venv" >&2 || fail "cannot create $venv (python3-venv)"
start=$SECONDS log=$build/pip.log
echo "python.sh: no python3 with torch 2.x here; pip install ${packages[*]} into $venv (log: $log)" >&2
# Per-request timeout and retries, and a bound on the whole install: without a network pip
# fails instead of waiting forever. No download cache: it would hold another 3 GB.
if ! timeout "${PPC_WHEEL_PIP_TIMEOUT:-1200}" "$venv/bin/pip" install --disable-pip-version-check --no-cache-dir \
  --timeout 60 --retries 2 "${packages[@]}" >"$log" 2>&1; then
  tail -n 5 "$log" >&2
  fail "pip could not install ${packages[*]} within ${PPC_WHEEL_PIP_TIMEOUT:-1200} s (no network, or PyPI unreachable?); see $log"
fi
echo "${packages[*]}" >"$marker"
echo "python.sh: installed $("$python" -c 'import torch, transformers as t; print("torch", torch.__version__, "and transformers", t.__version__)') in $((SECONDS - start)) s" >&2
echo "$python"
