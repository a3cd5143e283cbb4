//===- lib/ValueWalk.cpp - Boundary values by kind, and the copy rule -----===//
#include "lib/ValueWalk.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"

#include <ATen/ATen.h>

namespace ppc {

bool isTensorKind(ValueKind kind) {
  return kind == ValueKind::Tensor || kind == ValueKind::TensorList ||
         kind == ValueKind::TensorTuple;
}

/// Whether every element of `elems` is a tensor.
template <typename Range> static bool allTensors(const Range &elems) {
  return llvm::all_of(elems, [](const c10::IValue &e) { return e.isTensor(); });
}

bool forEachTensor(const c10::IValue &value, ValueKind kind,
                   llvm::function_ref<void(const at::Tensor &)> fn) {
  switch (kind) {
  case ValueKind::Tensor:
    if (!value.isTensor())
      return false;
    fn(value.toTensor());
    return true;
  case ValueKind::TensorList:
    // A typed Tensor[] and a generic list holding only tensors are the same
    // value to a stage.
    if (!value.isList() || !allTensors(value.toListRef()))
      return false;
    for (const c10::IValue &e : value.toListRef())
      fn(e.toTensor());
    return true;
  case ValueKind::TensorTuple:
    if (!value.isTuple() || !allTensors(value.toTupleRef().elements()))
      return false;
    for (const c10::IValue &e : value.toTupleRef().elements())
      fn(e.toTensor());
    return true;
  case ValueKind::Int:
    return value.isInt();
  case ValueKind::Float:
    return value.isDouble();
  case ValueKind::Bool:
    return value.isBool();
  case ValueKind::IntList:
    return value.isIntList();
  }
  return false;
}

std::vector<at::Tensor> tensorsOf(const c10::IValue &value, ValueKind kind) {
  std::vector<at::Tensor> out;
  forEachTensor(value, kind, [&](const at::Tensor &t) { out.push_back(t); });
  return out;
}

c10::IValue valueOfTensors(ValueKind kind, std::vector<at::Tensor> tensors) {
  switch (kind) {
  case ValueKind::Tensor:
    return tensors.at(0);
  case ValueKind::TensorList:
    return c10::List<at::Tensor>(tensors);
  case ValueKind::TensorTuple: {
    std::vector<c10::IValue> elems(tensors.begin(), tensors.end());
    return c10::ivalue::Tuple::create(std::move(elems));
  }
  default:
    return {};
  }
}

llvm::Expected<c10::IValue> cloneValue(const c10::IValue &value,
                                       ValueKind kind) {
  return torchCall("cannot copy a " + kindName(kind), [&]() -> c10::IValue {
    if (kind == ValueKind::IntList)
      return c10::List<int64_t>(value.toIntList().vec());
    if (!isTensorKind(kind))
      return value; // int, float and bool are immutable
    std::vector<at::Tensor> tensors = tensorsOf(value, kind);
    for (at::Tensor &t : tensors)
      t = t.clone();
    return valueOfTensors(kind, std::move(tensors));
  });
}

std::map<std::pair<int, int>, int> outputUses(const Manifest &manifest) {
  std::map<std::pair<int, int>, int> uses;
  for (const StageInfo &s : manifest.stages)
    for (const StageInput &in : s.inputs)
      if (!in.source.isModelInput())
        ++uses[{in.source.stage, in.source.output}];
  for (const ValueRef &ref : manifest.modelOutputs)
    ++uses[{ref.stage, ref.output}];
  return uses;
}

llvm::Expected<c10::IValue> stageArgument(const StageInput &input,
                                          c10::IValue value, bool otherUses) {
  if (input.mutated && (input.source.isModelInput() || otherUses))
    return cloneValue(value, input.kind);
  return value;
}

} // namespace ppc
