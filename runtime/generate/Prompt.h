//===- runtime/generate/Prompt.h - Checks of a decoding prompt --*- C++ -*-===//
//
// The checks of a prompt before any decoding work: its dtype, rank and
// size against the program's static batch, and its token ids against the
// vocabulary. The messages name no flag or file: the caller adds that
// context (withContext, lib/Error.h), e.g. optionName(Option::Prompt)
// (lib/OptionName.h).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_GENERATE_PROMPT_H
#define PPC_RUNTIME_GENERATE_PROMPT_H

#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ppc {

/// Checks that `prompt` is token ids [B, P] for a program of static batch
/// `batch` (at least 1): B groups of `batch` rows. Errors, in this order:
///   "expected a tensor of token ids, got none" (an undefined tensor)
///   "expected int64 token ids, got float32"
///   "expected a [batch, length] tensor, got int64[2,3,4]"
///   "expected at least one row and one token, got int64[0,5]"
///   "5 rows are not a multiple of the program's batch size 2" ("1 row is
///   not ...")
llvm::Error checkPrompt(const at::Tensor &prompt, int64_t batch);

/// Checks that every id of `tokens` (int64 [B, P], as checkPrompt accepts)
/// is in 0..vocab-1 (vocab at least 1). The first one that is not, in row
/// order: "token id 500 at row 3, position 2 is outside the vocabulary
/// (0..127)", row and position counted from 0.
llvm::Error checkTokenRange(const at::Tensor &tokens, int64_t vocab);

} // namespace ppc

#endif // PPC_RUNTIME_GENERATE_PROMPT_H
