//===- runtime/train/TrainData.h - Training data from torch.save files ----===//
//
// `ppc train --data DATA` reads what a Python user writes with torch.save:
// one (input, target) pair, or a list of them (one per step, cycled). An
// input is a tensor, or a tuple of tensors for a model with several inputs;
// a target is a tensor. docs/training.md shows an example.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_TRAINDATA_H
#define PPC_RUNTIME_TRAIN_TRAINDATA_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

namespace ppc {

struct TrainingBatch {
  /// The model inputs, in manifest order, batch along dim 0.
  std::vector<c10::IValue> inputs;
  at::Tensor target;
};

/// Reads DATA for a model with `modelInputs` inputs, named `inputNames`
/// when known (the manifest's). The file is untrusted and read like an
/// input file (loadTensorTree). A top-level pair whose second element is a
/// tensor is one batch; anything else must be a list of pairs. A batch's
/// input is a tensor, a tuple or list of them, or a dict from input name
/// to tensor (every input of `inputNames`, no other: inputsByName's
/// errors, after "data 'd.pt' batch 0: the input dict"). Errors:
/// loadTensorTree's; "data 'd.pt' holds a tensor; expected an (input, target)
/// pair or a list of them"; "data 'd.pt' is an empty list" (or "tuple"); "data
/// 'd.pt' batch 1 is a tensor; expected an (input, target) pair"; "data 'd.pt'
/// batch 0: the model takes 2 inputs, got 1"; "data 'd.pt' batch 0: the target
/// is a tuple; expected a tensor"; "data 'd.pt' batch 0: input 0 has 8 rows,
/// the target 6".
llvm::Expected<std::vector<TrainingBatch>>
loadTrainingData(llvm::StringRef path, size_t modelInputs,
                 llvm::ArrayRef<std::string> inputNames = {});

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_TRAINDATA_H
