//===- runtime/LossKind.h - The training losses by name ---------*- C++ -*-===//
//
// The losses `ppc train` and Trainer offer. Part of libppc_runtime's public
// API (TrainOptions names one); the executor computes them, so they live
// apart from the trainer.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_LOSSKIND_H
#define PPC_RUNTIME_LOSSKIND_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace ppc {

/// torch::nn::functional's mse_loss and cross_entropy, mean reduction.
enum class LossKind { MSE, CrossEntropy };
/// "mse" / "cross_entropy".
llvm::StringRef lossName(LossKind kind);
/// The loss named `name`; nullopt for anything else.
std::optional<LossKind> parseLossName(llvm::StringRef name);

} // namespace ppc

#endif // PPC_RUNTIME_LOSSKIND_H
