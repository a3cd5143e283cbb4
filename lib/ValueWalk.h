//===- lib/ValueWalk.h - Boundary values by kind ----------------*- C++ -*-===//
//
// The one place that knows how a boundary value of each ValueKind holds its
// tensors, and the one rule for when a stage gets its own copy of an input.
// hasKind(), the runtime's metadata capture and wire conversion, and the
// copies of both runSequentially() (verify) and the pipeline runtime use it,
// so they cannot disagree on, say, a generic list of tensors.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_VALUEWALK_H
#define PPC_LIB_VALUEWALK_H

#include "lib/Manifest.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <map>
#include <utility>
#include <vector>

namespace ppc {

/// Whether kind `kind` carries tensors (Tensor, Tensor[], Tuple[Tensor]).
bool isTensorKind(ValueKind kind);

/// Calls `fn` on each tensor of `value` read as kind `kind`, in order: one
/// for a Tensor, the elements of a Tensor[] (a typed or a generic list
/// whose elements are all tensors) or of a Tuple[Tensor], none for int,
/// float, bool and int[]. Returns false, before calling `fn`, when `value`
/// is not of kind `kind`.
bool forEachTensor(const c10::IValue &value, ValueKind kind,
                   llvm::function_ref<void(const at::Tensor &)> fn);

/// The tensors forEachTensor visits; empty when `value` is not of `kind`.
std::vector<at::Tensor> tensorsOf(const c10::IValue &value, ValueKind kind);

/// The value of tensor kind `kind` that holds `tensors` (the inverse of
/// forEachTensor; a Tensor[] becomes a typed list). `kind` must be a tensor
/// kind and a Tensor needs exactly one tensor.
c10::IValue valueOfTensors(ValueKind kind, std::vector<at::Tensor> tensors);

/// A deep copy of `value` (of kind `kind`): every tensor is cloned; ints,
/// floats, bools and int lists are immutable or copied. Errors: LibTorch
/// fails to allocate ("cannot copy a Tensor: ...").
llvm::Expected<c10::IValue> cloneValue(const c10::IValue &value,
                                       ValueKind kind);

/// How many times each stage output (stage, output) is used in `manifest`:
/// the stage input slots that read it plus the model outputs that name it.
std::map<std::pair<int, int>, int> outputUses(const Manifest &manifest);

/// The copy rule. A stage input the manifest marks `mutated` is written in
/// place by its stage, so the stage gets its own deep copy when anything
/// else can see the value: it is a model input (the caller's tensor, or a
/// microbatch view of it), or the producing stage's output has another use
/// (`otherUses`: another input slot, another stage, a pending send, a model
/// output). Otherwise the value is handed over as is. Errors: cloneValue's.
llvm::Expected<c10::IValue> stageArgument(const StageInput &input,
                                          c10::IValue value, bool otherUses);

} // namespace ppc

#endif // PPC_LIB_VALUEWALK_H
