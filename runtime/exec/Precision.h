//===- runtime/exec/Precision.h - Training precision and its autocast -----===//
//
// `ppc train --precision fp32|bf16` (docs/training.md, "bf16 and activation
// recompute"). bf16 runs every stage forward (and its recompute) under
// LibTorch's autocast to bfloat16 on the stages' device (CPU or CUDA):
// autocast's op lists decide what runs in bf16 (matmul, linear, conv) and
// what stays fp32; the parameters, their gradients and the optimizer state
// stay float32 (autocast casts the weights per op, so the gradients flow
// back into the fp32 parameters); boundary values are whatever autocast
// produced (bf16 out of a linear layer) and travel as such; the loss is
// computed in fp32 from the loss output cast to float (ExecutorCompute.cpp).
//
// Autocast state is thread-local: AutocastGuard is taken in the thread that
// runs the stage (the executor's). While a guard is held, TorchScript's own
// autocast pass (torch::jit::setAutocastMode) is on, as it is by default: it
// writes autocast's casts into the graph the executor optimizes, so that the
// executor's autodiff (DifferentiableGraph) differentiates through them.
// Without it the dispatcher still casts, but the graph's symbolic backward
// does not know, and fails ("expected scalar type BFloat16 but found Float"
// in the decoder's backward, in Python too). The casts it inserts are of
// autocast's own op lists, so the dispatcher's second look casts nothing
// again. The Python reference of the tests runs the same way
// (tests/cli/training.py, reference_bf16).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_PRECISION_H
#define PPC_RUNTIME_EXEC_PRECISION_H

#include "llvm/ADT/StringRef.h"

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>

namespace ppc {

enum class Precision { FP32, BF16 };

inline constexpr Precision kAllPrecisions[] = {Precision::FP32,
                                               Precision::BF16};

/// "fp32" / "bf16".
llvm::StringRef precisionName(Precision precision);
/// The precision named `name`; nullopt for anything else.
std::optional<Precision> parsePrecision(llvm::StringRef name);

/// While alive, this thread's stage forwards on `device` run under
/// autocast to bf16 (Precision::BF16) or as they are (FP32: the guard does
/// nothing). Restores the previous autocast state, dtype and JIT autocast
/// mode when destroyed; the outermost guard clears autocast's cast cache
/// (as torch.autocast's exit does), so casts of the weights are not kept
/// across the optimizer step.
class AutocastGuard {
public:
  AutocastGuard(Precision precision, c10::Device device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard &) = delete;
  AutocastGuard &operator=(const AutocastGuard &) = delete;

private:
  bool active = false;
  c10::DeviceType type = c10::DeviceType::CPU;
  bool wasEnabled = false;
  c10::ScalarType oldDtype = c10::ScalarType::Float;
  bool oldJitMode = false;
};

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_PRECISION_H
