//===- runtime/generate/Prompt.cpp - Checks of a decoding prompt ----------===//
//
// This file implements checkPrompt and checkTokenRange (see Prompt.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/generate/Prompt.h"

#include "lib/Error.h"
#include "runtime/exec/TensorMeta.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <cassert>

namespace ppc {

llvm::Error checkPrompt(const at::Tensor &prompt, int64_t batch) {
  assert(batch >= 1 && "a program's batch is at least 1");
  if (!prompt.defined())
    return makeError("expected a tensor of token ids, got none");
  if (prompt.scalar_type() != at::kLong)
    return makeError("expected int64 token ids, got " +
                     dtypeName(prompt.scalar_type()));
  std::string shape = TensorMeta::of(prompt).str();
  if (prompt.dim() != 2)
    return makeError("expected a [batch, length] tensor, got " + shape);
  int64_t rows = prompt.size(0);
  if (rows == 0 || prompt.size(1) == 0)
    return makeError("expected at least one row and one token, got " + shape);
  if (rows % batch != 0)
    return makeError(llvm::formatv("{0} {1} not a multiple of the program's "
                                   "batch size {2}",
                                   rows, rows == 1 ? "row is" : "rows are",
                                   batch)
                         .str());
  return llvm::Error::success();
}

llvm::Error checkTokenRange(const at::Tensor &tokens, int64_t vocab) {
  assert(tokens.scalar_type() == at::kLong && tokens.dim() == 2);
  at::Tensor ids = tokens.to(at::kCPU).contiguous();
  int64_t rows = ids.size(0), length = ids.size(1);
  const int64_t *data = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows * length; ++i)
    if (data[i] < 0 || data[i] >= vocab)
      return makeError(llvm::formatv("token id {0} at row {1}, position {2} "
                                     "is outside the vocabulary (0..{3})",
                                     data[i], i / length, i % length, vocab - 1)
                           .str());
  return llvm::Error::success();
}

} // namespace ppc
