//===- runtime/exec/Microbatch.cpp - Splitting batches into microbatches --===//
#include "runtime/exec/Microbatch.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "runtime/exec/TensorMeta.h"
#include "runtime/schedule/ScheduleKind.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

namespace ppc {

llvm::Expected<std::vector<std::vector<c10::IValue>>>
splitMicrobatches(llvm::ArrayRef<c10::IValue> inputs, size_t expectedInputs,
                  int count) {
  if (llvm::Error err = checkOption(
          "microbatches", IntegerRule{1, kMaxMicrobatches}.problem(count)))
    return err;
  if (inputs.size() != expectedInputs)
    return makeError(
        llvm::formatv("the model takes {0} input{1}, got {2}", expectedInputs,
                      expectedInputs == 1 ? "" : "s", inputs.size())
            .str());
  int64_t batch = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor())
      return makeError(llvm::formatv("input {0} is a {1}, not a tensor", i,
                                     inputs[i].tagKind())
                           .str());
    const at::Tensor &t = inputs[i].toTensor();
    if (t.dim() == 0)
      return makeError(
          llvm::formatv("input {0} has no batch dimension (it is a 0-dim "
                        "tensor)",
                        i)
              .str());
    if (batch >= 0 && t.size(0) != batch)
      return makeError(
          llvm::formatv("model inputs have different batch sizes ({0} and "
                        "{1})",
                        batch, t.size(0))
              .str());
    batch = t.size(0);
  }
  if (batch >= 0 && count > batch)
    return makeOptionError(
        "microbatches",
        llvm::formatv("{0} exceeds the batch size {1}", count, batch));
  std::vector<std::vector<c10::IValue>> out(count);
  for (const c10::IValue &in : inputs) {
    auto parts = torchCall("cannot split the model inputs", [&] {
      return at::tensor_split(in.toTensor(), count, /*dim=*/0);
    });
    if (!parts)
      return parts.takeError();
    for (int m = 0; m < count; ++m)
      out[m].emplace_back((*parts)[m]);
  }
  return out;
}

Signature Signature::of(llvm::ArrayRef<c10::IValue> inputs) {
  std::string text;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i)
      text += ";";
    text += inputs[i].isTensor() ? TensorMeta::of(inputs[i].toTensor()).str()
                                 : std::string(inputs[i].tagKind());
  }
  return parse(text);
}

Signature Signature::parse(llvm::StringRef text) {
  Signature out;
  out.text = text.str();
  size_t open = text.find('[');
  if (open == llvm::StringRef::npos)
    return out;
  llvm::StringRef digits = text.substr(open + 1).take_while(
      [](char c) { return c >= '0' && c <= '9'; });
  int64_t n;
  if (!digits.empty() && !digits.getAsInteger(10, n))
    out.rows = n;
  return out;
}

namespace {
/// `t` alone, or a copy when it views a larger storage (a tensor carved out
/// of a coalesced receive buffer, runtime/exec/WirePack.h): torch.save writes a
/// tensor's whole storage, so an output file would hold the other values.
at::Tensor compact(const at::Tensor &t) {
  return t.storage().nbytes() > t.nbytes() ? t.clone() : t;
}
} // namespace

llvm::Expected<c10::IValue>
concatMicrobatches(llvm::ArrayRef<c10::IValue> parts, ValueKind kind,
                   int outputIndex) {
  auto elementsOf = [&](const c10::IValue &v) {
    return v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
  };
  switch (kind) {
  case ValueKind::Tensor: {
    std::vector<at::Tensor> ts;
    for (const c10::IValue &p : parts)
      ts.push_back(p.toTensor());
    return torchCall(
        llvm::formatv("cannot concatenate model output {0}", outputIndex), [&] {
          return c10::IValue(ts.size() == 1 ? compact(ts[0]) : at::cat(ts, 0));
        });
  }
  case ValueKind::TensorList:
  case ValueKind::TensorTuple: {
    size_t n = elementsOf(parts[0]).size();
    std::vector<c10::IValue> joined;
    for (size_t e = 0; e < n; ++e) {
      std::vector<at::Tensor> ts;
      for (const c10::IValue &p : parts) {
        auto elems = elementsOf(p);
        if (elems.size() != n)
          return makeError(
              llvm::formatv("model output {0} has {1} elements in one "
                            "microbatch and {2} in another",
                            outputIndex, n, elems.size())
                  .str());
        ts.push_back(elems[e].toTensor());
      }
      auto cat = torchCall(
          llvm::formatv("cannot concatenate model output {0}", outputIndex),
          [&] { return ts.size() == 1 ? compact(ts[0]) : at::cat(ts, 0); });
      if (!cat)
        return cat.takeError();
      joined.emplace_back(*cat);
    }
    if (kind == ValueKind::TensorTuple)
      return c10::IValue(c10::ivalue::Tuple::create(std::move(joined)));
    c10::List<at::Tensor> list;
    for (const c10::IValue &j : joined)
      list.push_back(j.toTensor());
    return c10::IValue(list);
  }
  default:
    return makeError(
        llvm::formatv("model output {0} is a {1}; only tensors (and "
                      "lists/tuples of tensors) can be concatenated",
                      outputIndex, kindName(kind))
            .str());
  }
}

} // namespace ppc
