"""Export an example model with torch.export, as a ppc user would.

Usage: python examples/export_model.py OUTDIR

Writes into OUTDIR:
  resnet18.pt2           a torchvision resnet18 (random weights, eval mode) exported with
                         torch.export.export, its batch dimension dynamic, and saved with
                         torch.export.save: what `ppc split` takes.
  resnet18.input.pt      a batch of 6 images, 3x64x64 (torch.save).
  resnet18.expected.pt   the exported program's output on it: what the pipeline must give.
Without torchvision it exports a torch.nn.TransformerEncoder instead (transformer.*, a batch
of 6 sequences of 16 tokens of width 64). It prints the .pt2's path last.
"""
import os
import sys

import torch


def resnet18():
    import torchvision

    model = torchvision.models.resnet18(num_classes=10).eval()
    return "resnet18", model, torch.randn(6, 3, 64, 64)


def transformer():
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False).eval()
    return "transformer", model, torch.randn(6, 16, 64)


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    try:
        name, model, x = resnet18()
    except ImportError:
        name, model, x = transformer()
    batch = torch.export.Dim("batch", min=1)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    with torch.no_grad():
        expected = program.module()(x)
    base = os.path.join(outdir, name)
    torch.export.save(program, base + ".pt2")
    torch.save(x, base + ".input.pt")
    torch.save(expected, base + ".expected.pt")
    print(base + ".pt2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
