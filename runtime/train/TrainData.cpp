//===- runtime/train/TrainData.cpp - Training data from torch.save files --===//
//
// This file implements loadTrainingData() (see TrainData.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/TrainData.h"

#include "lib/Error.h"
#include "lib/TensorIO.h"

#include "llvm/Support/FormatVariadic.h"

namespace ppc {

/// The elements of a tuple or list; nullopt for anything else.
static std::optional<std::vector<c10::IValue>>
elementsOf(const c10::IValue &v) {
  if (v.isTuple())
    return v.toTupleRef().elements().vec();
  if (v.isList())
    return v.toList().vec();
  return std::nullopt;
}

/// Whether `v` is an (input, target) pair: two elements, a tensor second.
static bool isPair(const c10::IValue &v) {
  auto items = elementsOf(v);
  return items && items->size() == 2 && (*items)[1].isTensor();
}

llvm::Expected<std::vector<TrainingBatch>>
loadTrainingData(llvm::StringRef path, size_t modelInputs,
                 llvm::ArrayRef<std::string> inputNames) {
  // A list of pairs whose inputs are tuples nests three levels deep.
  auto data = loadTensorTree(path, "data", 3);
  if (!data)
    return data.takeError();
  std::string name = ("data '" + path + "'").str();
  std::vector<c10::IValue> pairs;
  if (isPair(*data)) {
    pairs.push_back(*data);
  } else if (auto items = elementsOf(*data)) {
    pairs = std::move(*items);
    if (pairs.empty())
      return makeError(name + " is an empty " +
                       (data->isTuple() ? "tuple" : "list"));
  } else {
    return makeError(name + " holds a " + data->tagKind() +
                     "; expected an (input, target) pair or a list of them");
  }
  std::vector<TrainingBatch> out;
  for (size_t b = 0; b < pairs.size(); ++b) {
    std::string where = llvm::formatv("{0} batch {1}", name, b).str();
    if (!isPair(pairs[b]))
      return makeError(where + " is a " + pairs[b].tagKind() +
                       "; expected an (input, target) pair");
    std::vector<c10::IValue> pair = *elementsOf(pairs[b]);
    TrainingBatch batch;
    if (pair[0].isTensor()) {
      batch.inputs.push_back(pair[0]);
    } else if (pair[0].isGenericDict()) {
      if (inputNames.empty())
        return makeError(where + ": the inputs are a dict, and the model's "
                                 "inputs have no names");
      auto named = inputsByName(pair[0].toGenericDict(), inputNames,
                                where + ": the input dict");
      if (!named)
        return named.takeError();
      batch.inputs = std::move(*named);
    } else {
      batch.inputs = *elementsOf(pair[0]);
    }
    if (batch.inputs.size() != modelInputs)
      return makeError(llvm::formatv("{0}: the model takes {1} input{2}, "
                                     "got {3}",
                                     where, modelInputs,
                                     modelInputs == 1 ? "" : "s",
                                     batch.inputs.size())
                           .str());
    batch.target = pair[1].toTensor();
    if (batch.target.dim() == 0)
      return makeError(where + ": the target has no batch dimension");
    for (size_t i = 0; i < batch.inputs.size(); ++i) {
      if (!batch.inputs[i].isTensor())
        return makeError(llvm::formatv("{0}: input {1} is a {2}; expected a "
                                       "tensor",
                                       where, i, batch.inputs[i].tagKind())
                             .str());
      const at::Tensor &t = batch.inputs[i].toTensor();
      if (t.dim() == 0)
        return makeError(
            llvm::formatv("{0}: input {1} has no batch dimension", where, i)
                .str());
      if (t.size(0) != batch.target.size(0))
        return makeError(llvm::formatv("{0}: input {1} has {2} rows, the "
                                       "target {3}",
                                       where, i, t.size(0),
                                       batch.target.size(0))
                             .str());
    }
    out.push_back(std::move(batch));
  }
  return out;
}

} // namespace ppc
