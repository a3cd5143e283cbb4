#!/usr/bin/env bash
# The first command for a newcomer: installs what is missing, builds ppc, makes
# an example model (a scripted torchvision resnet18), splits it into 2 stages,
# verifies the stages against the model, and runs the 2-stage pipeline on 2
# ranks with `ppc launch`, then checks the output from Python.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PPC_BUILD_DIR:-$root/build}
ppc=$build/bin/ppc
example=$build/example

"$root/scripts/setup.sh"
"$root/scripts/build.sh"

echo "== making the example model (resnet18, batch of 5 images)"
/usr/bin/python3 "$root/tests/models/make_models.py" "$build/models" --only resnet18
mkdir -p "$example"

echo "== ppc split: 2 stages balanced by parameter bytes"
"$ppc" split "$build/models/resnet18.pt" -o "$example/resnet18" --stages 2
"$ppc" inspect "$example/resnet18/manifest.json"

echo "== ppc verify: the stages, run one after the other, against the unsplit model"
"$ppc" verify "$build/models/resnet18.pt" "$example/resnet18/manifest.json" \
  --input "$build/models/resnet18.input.pt"

echo "== ppc run on 2 ranks (Gloo over loopback), 3 microbatches"
"$ppc" launch --nproc-per-node 2 --master-port 0 -- \
  "$ppc" run "$example/resnet18/manifest.json" --input "$build/models/resnet18.input.pt" \
  --output "$example/resnet18.out.pt" --microbatches 3 --stats

/usr/bin/python3 - "$example/resnet18.out.pt" "$build/models/resnet18.expected.pt" <<'PY'
import sys, torch
out, expected = torch.load(sys.argv[1]), torch.load(sys.argv[2])
diff = (out - expected).abs().max().item()
print(f"== output written to {sys.argv[1]}: shape {tuple(out.shape)}, "
      f"max abs diff to the unsplit model {diff:.3g}")
sys.exit(0 if diff <= 1e-5 else 1)
PY
