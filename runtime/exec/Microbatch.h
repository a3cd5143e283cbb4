//===- runtime/exec/Microbatch.h - Splitting batches into microbatches ----===//
//
// Model inputs are split along dim 0 into M microbatches with
// torch.tensor_split semantics: with batch B, the first B % M microbatches
// have ceil(B / M) rows and the rest floor(B / M). Outputs are concatenated
// back along dim 0. A microbatch's signature (dtypes and shapes of its
// inputs) keys its metadata: an uneven last microbatch has its own.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_MICROBATCH_H
#define PPC_RUNTIME_EXEC_MICROBATCH_H

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
/// "model inputs have different batch sizes (5 and 4)"; "microbatches 8
/// exceeds the batch size 5"; "microbatches 0 is not an integer in
/// 1..65536" (OptionErrors: the CLI names the flag instead).
llvm::Expected<std::vector<std::vector<c10::IValue>>>
splitMicrobatches(llvm::ArrayRef<c10::IValue> inputs, size_t expectedInputs,
                  int count);

/// A microbatch's signature: the dtypes and shapes of its inputs, which
/// key its boundary metadata (runtime/exec/MetaSettle.h), and its rows.
struct Signature {
  /// "float32[2,3,32,32];int64[2,12]".
  std::string text;
  /// The size of dim 0 of its first input; -1 when the text names none.
  int64_t rows = -1;

  /// The signature of a microbatch's inputs.
  static Signature of(llvm::ArrayRef<c10::IValue> inputs);
  /// A signature as another rank shared it: the rows are read from the
  /// text (-1 when it names none; the text itself is only ever compared).
  static Signature parse(llvm::StringRef text);

  bool operator==(const Signature &o) const { return text == o.text; }
  bool operator!=(const Signature &o) const { return text != o.text; }
};

/// Concatenates one output over the microbatches along dim 0: tensors
/// directly, lists/tuples element by element. Errors: "model output 0 is an
/// int; only tensors (and lists/tuples of tensors) can be concatenated".
llvm::Expected<c10::IValue>
concatMicrobatches(llvm::ArrayRef<c10::IValue> parts, ValueKind kind,
                   int outputIndex);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_MICROBATCH_H
