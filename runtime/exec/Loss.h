//===- runtime/exec/Loss.h - A microbatch's loss ----------------*- C++ -*-===//
//
// The training losses of LossKinds.def over one microbatch, and how the
// microbatches' losses add up to their batch's. Two kinds of loss:
//
//  - Token losses: cross_entropy with class-index targets, and causal_lm.
//    A microbatch's loss is the sum over its labels that are not the ignore
//    index, and the trainer divides it by the count of such labels in the
//    whole batch (tokens()), so the batch's loss is the mean over all its
//    tokens wherever the padding falls, as transformers computes it for a
//    batch (and for gradient accumulation with num_items_in_batch).
//  - Row losses: mse, and cross_entropy with class probabilities. A
//    microbatch's loss is its mean, weighted by its rows over the batch's.
//
// cross_entropy reads class scores from the output's last dimension when
// the target is the output's shape without it (logits [B, T, V], labels
// [B, T], as transformers' loss does), else from dimension 1 as
// torch::nn::functional::cross_entropy does ([B, C] with [B]; [B, C, H, W]
// with [B, H, W]). causal_lm is transformers' ForCausalLMLoss: logits
// [B, T, V] and labels [B, T], position t scored against label t + 1 (the
// labels shifted left, the last position ignored). Every loss computes in
// float32 at least, whatever precision the stage ran in.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_LOSS_H
#define PPC_RUNTIME_EXEC_LOSS_H

#include "runtime/exec/LossKind.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ppc {

/// transformers' padding label (and torch's cross_entropy default).
inline constexpr int64_t kDefaultIgnoreIndex = -100;

struct LossFunction {
  LossKind kind = LossKind::MSE;
  /// Labels equal to it count for nothing (token losses only).
  int64_t ignoreIndex = kDefaultIgnoreIndex;

  /// Whether `target` makes this a token loss (class indices: an integer
  /// tensor, with cross_entropy or causal_lm).
  bool sumsTokens(const at::Tensor &target) const;
  /// The labels of `target` that count (not ignoreIndex; causal_lm: after
  /// the shift, so each row's first label never counts). For a token loss.
  int64_t tokens(const at::Tensor &target) const;
  /// How many terms the batch mean over `target` averages, which weigh its
  /// microbatches and a set's batches: tokens() for a token loss, the rows
  /// (dimension 0) otherwise.
  int64_t terms(const at::Tensor &target) const {
    return sumsTokens(target) ? tokens(target) : target.size(0);
  }
  /// The microbatch's loss of `output` against `target`: a token loss's sum
  /// or a row loss's mean, a scalar (float32 for a bf16 or half output)
  /// with the output's graph.
  /// Errors, one line each, after `what: `: "the output is float32[2,4],
  /// the target float32[2,3]; mse needs equal shapes"; "the output is
  /// float32[2,32,100], the target int64[2,31]; cross_entropy needs class
  /// scores in the output's last dimension (or dimension 1) and a target of
  /// the output's shape without it"; "... cross_entropy with probabilities
  /// needs them in the output's shape"; "... causal_lm needs logits [B, T, V]
  /// and integer labels [B, T]"; torch's own error for anything else it
  /// refuses (a class index out of range).
  llvm::Expected<at::Tensor> operator()(const at::Tensor &output,
                                        const at::Tensor &target,
                                        const llvm::Twine &what) const;
};

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_LOSS_H
