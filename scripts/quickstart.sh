#!/usr/bin/env bash
# The first command for a newcomer: installs what is missing, builds ppc against PyTorch 2.x
# into build/ (only the ppc program: no tests), exports an example model with torch.export (a
# torchvision resnet18), splits it into 2 stages, verifies the stages against the program, runs
# the 2-stage pipeline on 2 ranks with `ppc launch`, and checks the output from Python.
#
#   scripts/quickstart.sh            PyTorch 2.x: build/, a .pt2 program
#   scripts/quickstart.sh system     the system LibTorch (Debian's 1.13): build-system/, a
#                                    TorchScript resnet18 scripted by Debian's torch
#
# The torch is yours when `python3` imports torch 2.x, else PyPI's in a venv (scripts/python.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
config=${1:-pytorch2}
case $config in pytorch2 | system) ;; *)
  echo "quickstart.sh: unknown configuration '$config' (pytorch2 or system)" >&2
  exit 2
  ;;
esac
start=$SECONDS

"$root/scripts/setup.sh" "$config"
if [ "$config" = pytorch2 ]; then
  build=${PPC_BUILD_DIR:-$root/build}
  "$root/scripts/build.sh" pytorch2 ppc
  python=$("$root/scripts/python.sh" "$build" 2>/dev/null | tail -n 1)
  echo "== exporting the example model with torch.export ($python)"
  model=$(OMP_NUM_THREADS=2 "$python" -W ignore "$root/examples/export_model.py" "$build/example" | tail -n 1)
else
  build=${PPC_SYSTEM_BUILD_DIR:-$root/build-system}
  "$root/scripts/build.sh" system ppc
  python=/usr/bin/python3
  echo "== scripting the example model with torch.jit.script ($python)"
  "$python" "$root/tests/models/make_models.py" "$build/models" --only resnet18
  mkdir -p "$build/example"
  cp "$build/models/resnet18.pt" "$build/models/resnet18.input.pt" "$build/example/"
  cp "$build/models/resnet18.expected.pt" "$build/example/"
  model=$build/example/resnet18.pt
fi
ppc=$build/bin/ppc
base=${model%.*}
split=$base.split
"$ppc" --version

echo "== ppc split: 2 stages balanced by parameter bytes"
"$ppc" split "$model" -o "$split" --stages 2
"$ppc" inspect "$split/manifest.json"

echo "== ppc verify: the stages, run one after the other, against the unsplit model"
"$ppc" verify "$model" "$split/manifest.json" --input "$base.input.pt"

echo "== ppc run on 2 ranks (one process each, on this machine), 3 microbatches"
"$ppc" launch --nproc-per-node 2 --master-port 0 -- \
  "$ppc" run "$split/manifest.json" --input "$base.input.pt" \
  --output "$base.out.pt" --microbatches 3 --stats

"$python" - "$base.out.pt" "$base.expected.pt" "$((SECONDS - start))" <<'PY'
import sys, torch
out, expected = torch.load(sys.argv[1]), torch.load(sys.argv[2])
diff = (out - expected).abs().max().item()
print(f"== output written to {sys.argv[1]} (torch.load reads it): shape {tuple(out.shape)}, "
      f"max abs diff to the unsplit model {diff:.3g}; done in {sys.argv[3]} s")
sys.exit(0 if diff <= 1e-5 else 1)
PY
