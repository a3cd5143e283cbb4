//===- runtime/exec/Loss.cpp - One microbatch's loss and its weight -------===//

#include "runtime/exec/Loss.h"

#include "lib/Error.h"
#include "runtime/exec/TensorMeta.h"

#include "llvm/Support/FormatVariadic.h"

#include <torch/nn/functional/loss.h>

namespace ppc {

namespace F = torch::nn::functional;

/// Whether `output` holds class scores in its last dimension for `target`:
/// the target is the output's shape without it.
static bool scoresLast(const at::Tensor &output, const at::Tensor &target) {
  return output.dim() == target.dim() + 1 && output.dim() >= 2 &&
         output.sizes().slice(0, target.dim()) == target.sizes();
}

/// The same with the scores in dimension 1 (torch's cross_entropy).
static bool scoresInDim1(const at::Tensor &output, const at::Tensor &target) {
  if (output.dim() != target.dim() + 1 || output.dim() < 2)
    return false;
  std::vector<int64_t> rest(output.sizes().begin(), output.sizes().end());
  rest.erase(rest.begin() + 1);
  return at::IntArrayRef(rest) == target.sizes();
}

/// causal_lm's labels: each row shifted left by one, the last position
/// ignored (transformers pads with the ignore index, then drops the first).
static at::Tensor shiftedLabels(const at::Tensor &labels, int64_t ignore) {
  at::Tensor shifted = at::full_like(labels, ignore);
  int64_t length = labels.size(-1);
  if (length > 1)
    shifted.narrow(-1, 0, length - 1).copy_(labels.narrow(-1, 1, length - 1));
  return shifted;
}

bool LossFunction::sumsTokens(const at::Tensor &target) const {
  return kind != LossKind::MSE && target.defined() &&
         !at::isFloatingType(target.scalar_type()) &&
         !at::isComplexType(target.scalar_type()) &&
         target.scalar_type() != at::kBool;
}

int64_t LossFunction::tokens(const at::Tensor &target) const {
  at::Tensor labels = kind == LossKind::CausalLM && target.dim() >= 1
                          ? shiftedLabels(target, ignoreIndex)
                          : target;
  return labels.ne(ignoreIndex).sum().item<int64_t>();
}

llvm::Expected<at::Tensor>
LossFunction::operator()(const at::Tensor &output, const at::Tensor &target,
                         const llvm::Twine &what) const {
  auto shapes = [&] {
    return llvm::formatv("{0}: the output is {1}, the target {2}", what.str(),
                         TensorMeta::of(output).str(),
                         TensorMeta::of(target).str())
        .str();
  };
  bool tokens = sumsTokens(target);
  switch (kind) {
  case LossKind::MSE:
    if (output.sizes() != target.sizes())
      return makeError(shapes() + "; mse needs equal shapes");
    break;
  case LossKind::CrossEntropy:
    if (!tokens && output.sizes() != target.sizes())
      return makeError(shapes() + "; cross_entropy with probabilities needs "
                                  "them in the output's shape");
    if (tokens && !scoresLast(output, target) && !scoresInDim1(output, target))
      return makeError(shapes() + "; cross_entropy needs class scores in the "
                                  "output's last dimension (or dimension 1) "
                                  "and a target of the output's shape "
                                  "without it");
    break;
  case LossKind::CausalLM:
    if (!tokens || target.dim() < 2 || !scoresLast(output, target))
      return makeError(shapes() + "; causal_lm needs logits [B, T, V] and "
                                  "integer labels [B, T]");
    break;
  }
  return torchCall(what, [&] {
    // In fp32 at least, whatever precision the stage ran in (bf16: a bf16
    // output); a float64 output stays float64.
    at::ScalarType type = output.scalar_type();
    at::Tensor x = type == at::kBFloat16 || type == at::kHalf
                       ? output.to(at::kFloat)
                       : output;
    if (kind == LossKind::MSE)
      return F::mse_loss(x, target.to(x.dtype()));
    if (!tokens)
      return F::cross_entropy(x, target);
    at::Tensor labels = kind == LossKind::CausalLM
                            ? shiftedLabels(target, ignoreIndex)
                            : target;
    auto options = F::CrossEntropyFuncOptions()
                       .ignore_index(ignoreIndex)
                       .reduction(torch::kSum);
    if (scoresLast(x, labels))
      return F::cross_entropy(x.reshape({-1, x.size(-1)}),
                              labels.reshape({-1}).to(at::kLong), options);
    return F::cross_entropy(x, labels.to(at::kLong), options);
  });
}

} // namespace ppc
