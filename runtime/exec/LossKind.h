//===- runtime/exec/LossKind.h - The training losses by name ---*- C++ -*-===//
//
// The losses `ppc train` and Trainer offer, listed in LossKinds.def. Part of
// libppc_runtime's public API (TrainOptions names one); the executor
// computes them, so they live apart from the trainer.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_LOSSKIND_H
#define PPC_RUNTIME_EXEC_LOSSKIND_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace ppc {

/// torch::nn::functional's mse_loss and cross_entropy, and transformers'
/// causal-LM loss (runtime/exec/Loss.h says how each reduces).
enum class LossKind {
#define PPC_LOSS(Kind, Name) Kind,
#include "runtime/exec/LossKinds.def"
};

/// Every loss, in LossKinds.def's order.
inline constexpr LossKind kAllLossKinds[] = {
#define PPC_LOSS(Kind, Name) LossKind::Kind,
#include "runtime/exec/LossKinds.def"
};

/// "mse" / "cross_entropy" / "causal_lm".
inline llvm::StringRef lossName(LossKind kind) {
  switch (kind) {
#define PPC_LOSS(Kind, Name)                                                   \
  case LossKind::Kind:                                                         \
    return Name;
#include "runtime/exec/LossKinds.def"
  }
  return "";
}

/// The loss named `name`; nullopt for anything else.
inline std::optional<LossKind> parseLossName(llvm::StringRef name) {
  for (LossKind kind : kAllLossKinds)
    if (lossName(kind) == name)
      return kind;
  return std::nullopt;
}

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_LOSSKIND_H
