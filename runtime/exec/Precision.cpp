//===- runtime/exec/Precision.cpp - Training precision and its autocast ---===//
//
// This file implements precisionName, parsePrecision and AutocastGuard (see
// Precision.h) over the autocast shims of TorchCompat.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Precision.h"

#include "runtime/platform/TorchCompat.h"

#include <torch/csrc/jit/passes/autocast.h>

namespace ppc {

llvm::StringRef precisionName(Precision precision) {
  return precision == Precision::BF16 ? "bf16" : "fp32";
}

std::optional<Precision> parsePrecision(llvm::StringRef name) {
  for (Precision p : kAllPrecisions)
    if (precisionName(p) == name)
      return p;
  return std::nullopt;
}

AutocastGuard::AutocastGuard(Precision precision, c10::Device device)
    : type(device.type()) {
  if (precision != Precision::BF16)
    return;
  active = true;
  wasEnabled = compat::autocastEnabled(type);
  oldDtype = compat::autocastDtype(type);
  oldJitMode = torch::jit::setAutocastMode(true);
  compat::setAutocastEnabled(type, true);
  compat::setAutocastDtype(type, c10::ScalarType::BFloat16);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active)
    return;
  if (at::autocast::decrement_nesting() == 0)
    at::autocast::clear_cache();
  compat::setAutocastEnabled(type, wasEnabled);
  compat::setAutocastDtype(type, oldDtype);
  torch::jit::setAutocastMode(oldJitMode);
}

} // namespace ppc
