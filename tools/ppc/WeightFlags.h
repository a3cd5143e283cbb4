//===- tools/ppc/WeightFlags.h - The --weights options ----------*- C++ -*-===//
//
// The options that name a checkpoint to bind a program's weights from
// (lib/WeightBinding.h): `ppc split` takes them to write stages that carry
// their weights, and `ppc run`, `verify`, `train` and `generate` to give each
// rank its own stage's tensors. Declared once, here.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_WEIGHTFLAGS_H
#define PPC_TOOLS_PPC_WEIGHTFLAGS_H

#include "lib/WeightBinding.h"

#include <CLI/CLI.hpp>

namespace ppc {

/// Adds --weights, --weights-prefix, --weights-extra and --weights-tied to
/// `app`, filling `options` as they parse.
void addWeightFlags(CLI::App &app, WeightOptions &options);

} // namespace ppc

#endif // PPC_TOOLS_PPC_WEIGHTFLAGS_H
