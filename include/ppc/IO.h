//===- ppc/IO.h - Inputs and outputs as torch.save files --------*- C++ -*-===//
//
// Part of libppc_runtime's public API (ppc/ppc.h). Reads and writes the
// files a Python user exchanges with ppc: what torch.save wrote and what
// torch.load reads back, exactly as `ppc run --input/--output` and `ppc
// train --data` read and write them (docs/runtime.md, docs/training.md).
// Every function throws ppc::api::Error (ppc/Error.h) on failure.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PUBLIC_IO_H
#define PPC_PUBLIC_IO_H

#include "ppc/Error.h"

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ppc::api {

/// Reads a model's inputs from a file torch.save wrote: a tensor (one
/// input) or a tuple/list of tensors (one per input, in the model's
/// order), ready for Pipeline::run. The file is untrusted and checked as
/// `ppc run --input` checks it. Throws: the file cannot be read ("cannot
/// read input 'x.pt': No such file or directory"), it holds something else
/// ("input 'x.pt' holds a dict; expected a tensor or a tuple/list of
/// tensors (one per model input)"), a tensor in it is malformed.
std::vector<c10::IValue> loadInputs(const std::string &path);
/// The same for a model whose inputs are `names` (Pipeline::inputNames()),
/// where the file may also hold a dict of them by name (returned in the
/// model's order). Throws, too: "input 'x.pt' names 'ids', which the model
/// does not take (its inputs: input_ids, cache_position)", "input 'x.pt'
/// lacks model input 'cache_position'".
std::vector<c10::IValue> loadInputs(const std::string &path,
                                    const std::vector<std::string> &names);

/// Writes a model's outputs (Pipeline::run's result) atomically, as `ppc
/// run --output` does, so that Python's torch.load (weights_only=True
/// included) reads them: a tuple when `asTuple` (pass
/// Pipeline::outputIsTuple()), else the single output itself. Throws: the
/// file cannot be written; `asTuple` false with other than one output.
void saveOutputs(const std::string &path,
                 const std::vector<c10::IValue> &outputs, bool asTuple);

/// One batch of training data.
struct TrainingBatch {
  /// The model inputs, in the model's order, batch along dim 0.
  std::vector<c10::IValue> inputs;
  /// The loss's target, batch along dim 0.
  at::Tensor target;
};

/// Reads training data as `ppc train --data` does: one (input, target)
/// pair written by torch.save, or a list of them (one per step), for a
/// model with `modelInputs` inputs (Trainer::modelInputCount()). Throws:
/// loadInputs's file errors; other contents ("data 'd.pt' holds a tensor;
/// expected an (input, target) pair or a list of them", "data 'd.pt' batch
/// 0: input 0 has 8 rows, the target 6").
std::vector<TrainingBatch> loadTrainingData(const std::string &path,
                                            size_t modelInputs);
/// The same where a batch's input may also be a dict from input name to
/// tensor, for a model whose inputs are `inputNames`
/// (Trainer::modelInputNames()).
std::vector<TrainingBatch>
loadTrainingData(const std::string &path,
                 const std::vector<std::string> &inputNames);

} // namespace ppc::api

#endif // PPC_PUBLIC_IO_H
