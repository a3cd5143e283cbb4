//===- runtime/Microbatch.h - Splitting batches into microbatches -*- C++
//-*-===//
//
// Model inputs are split along dim 0 into M microbatches with
// torch.tensor_split semantics: with batch B, the first B % M microbatches
// have ceil(B / M) rows and the rest floor(B / M). Outputs are concatenated
// back along dim 0. A microbatch's signature (dtypes and shapes of its
// inputs) keys its metadata: an uneven last microbatch has its own.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_MICROBATCH_H
#define PPC_RUNTIME_MICROBATCH_H

#include "lib/Manifest.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace ppc {

/// Splits `inputs` (the model inputs, each a tensor with the batch along dim
/// 0) into `count` microbatches with at::tensor_split; result[m][i] is
/// input i of microbatch m, a view of inputs[i].
/// Errors: "the model takes 2 inputs, got 1"; "input 1 is a int, not a
/// tensor"; "input 0 has no batch dimension (it is a 0-dim tensor)";
/// "model inputs have different batch sizes (5 and 4)"; "--microbatches 8
/// exceeds the batch size 5"; "--microbatches must be at least 1".
llvm::Expected<std::vector<std::vector<c10::IValue>>>
splitMicrobatches(llvm::ArrayRef<c10::IValue> inputs, size_t expectedInputs,
                  int count);

/// "float32[2,3,32,32];int64[2,12]": the dtypes and shapes of a
/// microbatch's inputs.
std::string microbatchSignature(llvm::ArrayRef<c10::IValue> inputs);

/// The size of dim 0 encoded in a signature (its first input's), or -1.
int64_t signatureBatchSize(llvm::StringRef signature);

/// Concatenates one output over the microbatches along dim 0: tensors
/// directly, lists/tuples element by element. Errors: "model output 0 is an
/// int; only tensors (and lists/tuples of tensors) can be concatenated".
llvm::Expected<c10::IValue>
concatMicrobatches(llvm::ArrayRef<c10::IValue> parts, ValueKind kind,
                   int outputIndex);

} // namespace ppc

#endif // PPC_RUNTIME_MICROBATCH_H
