//===- runtime/train/OptimizerKind.h - The training optimizers --*- C++ -*-===//
//
// The optimizers `ppc train` and Trainer offer, listed in OptimizerKinds.def.
// Part of libppc_runtime's public API (TrainOptions names one).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_OPTIMIZERKIND_H
#define PPC_RUNTIME_TRAIN_OPTIMIZERKIND_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace ppc {

/// torch::optim's SGD, Adam and AdamW.
enum class OptimizerKind {
#define PPC_OPTIMIZER(Kind, Name) Kind,
#include "runtime/train/OptimizerKinds.def"
};

/// Every optimizer, in OptimizerKinds.def's order.
inline constexpr OptimizerKind kAllOptimizerKinds[] = {
#define PPC_OPTIMIZER(Kind, Name) OptimizerKind::Kind,
#include "runtime/train/OptimizerKinds.def"
};

/// "sgd" / "adam" / "adamw".
inline llvm::StringRef optimizerName(OptimizerKind kind) {
  switch (kind) {
#define PPC_OPTIMIZER(Kind, Name)                                              \
  case OptimizerKind::Kind:                                                    \
    return Name;
#include "runtime/train/OptimizerKinds.def"
  }
  return "";
}

/// The optimizer named `name`; nullopt for anything else.
inline std::optional<OptimizerKind> parseOptimizerName(llvm::StringRef name) {
  for (OptimizerKind kind : kAllOptimizerKinds)
    if (optimizerName(kind) == name)
      return kind;
  return std::nullopt;
}

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_OPTIMIZERKIND_H
