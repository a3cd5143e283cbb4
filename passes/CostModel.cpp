//===- passes/CostModel.cpp - Static cost of each item --------------------===//
#include "passes/CostModel.h"

#include "lib/Error.h"
#include "lib/Stage.h"
#include "lib/TorchScriptStage.h"
#include "passes/ProfileItems.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

using torch::jit::Node;
using torch::jit::Value;

namespace ppc {

llvm::StringRef costKindName(CostKind kind) {
  switch (kind) {
#define PPC_COST_MODEL(Kind, Name, NeedsExample)                               \
  case CostKind::Kind:                                                         \
    return Name;
#include "passes/CostModels.def"
  }
  llvm_unreachable("unknown CostKind");
}

bool needsExampleInput(CostKind kind) {
  switch (kind) {
#define PPC_COST_MODEL(Kind, Name, NeedsExample)                               \
  case CostKind::Kind:                                                         \
    return NeedsExample;
#include "passes/CostModels.def"
  }
  llvm_unreachable("unknown CostKind");
}

std::optional<CostKind> parseCostKind(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<CostKind>>(name)
#define PPC_COST_MODEL(Kind, Name, NeedsExample) .Case(Name, CostKind::Kind)
#include "passes/CostModels.def"
      .Default(std::nullopt);
}

/// Calls `fn(item, tensor)` for every tensor attribute each item of `g`
/// reads, in item order; attributeAt() throws if a path does not resolve.
template <typename Fn>
static void forEachTensorRead(const ItemGraph &g, const torch::jit::Module &m,
                              Fn &&fn) {
  for (size_t i = 0; i < g.size(); ++i)
    for (Value *v : g.attributeReads(i)) {
      c10::IValue attr = attributeAt(m, *g.attributePath(v));
      if (attr.isTensor())
        fn(i, attr.toTensor());
    }
}

static int64_t tensorBytes(const at::Tensor &t) {
  return static_cast<int64_t>(t.numel() * t.element_size());
}

/// Byte counts per item, each tensor counted at its first reader.
static std::vector<int64_t> paramCostsUnguarded(const ItemGraph &g,
                                                const torch::jit::Module &m) {
  std::vector<int64_t> costs(g.size(), 0);
  std::unordered_set<const void *> seen;
  forEachTensorRead(g, m, [&](size_t i, const at::Tensor &t) {
    if (seen.insert(t.unsafeGetTensorImpl()).second)
      costs[i] += tensorBytes(t);
  });
  return costs;
}

static llvm::Expected<std::vector<int64_t>>
paramCosts(const ItemGraph &g, const torch::jit::Module &m) {
  return torchCall("cannot read the model's parameters",
                   [&] { return paramCostsUnguarded(g, m); });
}

using ValueTensors = std::unordered_map<const Value *, at::Tensor>;

/// Every top-level tensor value, from one run of a copy of the graph that
/// returns them all.
static llvm::Expected<ValueTensors>
runRecordingTensors(const ItemGraph &g, const torch::jit::Module *m,
                    const std::vector<c10::IValue> &example) {
  auto copy = g.graph()->copy();
  std::unordered_map<const Value *, Value *> toCopy;
  for (size_t i = 0; i < g.graph()->inputs().size(); ++i)
    toCopy[g.graph()->inputs()[i]] = copy->inputs()[i];
  auto orig = g.graph()->nodes().begin();
  for (Node *n : copy->nodes()) {
    for (size_t k = 0; k < n->outputs().size(); ++k)
      toCopy[orig->output(k)] = n->output(k);
    ++orig;
  }
  std::vector<const Value *> recorded;
  std::vector<Value *> results;
  for (const auto &[from, to] : toCopy)
    if (to->type()->kind() == c10::TypeKind::TensorType) {
      recorded.push_back(from);
      results.push_back(to);
    }
  while (!copy->outputs().empty())
    copy->eraseOutput(0);
  copy->registerOutput(copy->insertNode(copy->createTuple(results))->output());

  auto outputs = torchCall("cannot run the model on the example input", [&] {
    torch::jit::GraphFunction fn("ppc_profile", copy, nullptr);
    at::NoGradGuard noGrad;
    torch::jit::Stack stack;
    if (m)
      stack.push_back(m->_ivalue());
    stack.insert(stack.end(), example.begin(), example.end());
    fn.run(stack);
    return stack.back().toTupleRef().elements().vec();
  });
  if (!outputs)
    return outputs.takeError();
  ValueTensors tensors;
  for (size_t i = 0; i < recorded.size(); ++i)
    if ((*outputs)[i].isTensor() && (*outputs)[i].toTensor().defined())
      tensors[recorded[i]] = (*outputs)[i].toTensor();
  return tensors;
}

/// Shapes of every top-level tensor value on the example input.
static llvm::Expected<std::unordered_map<const Value *, std::vector<int64_t>>>
profileShapes(const ItemGraph &g, const torch::jit::Module *m,
              const std::vector<c10::IValue> &example) {
  auto tensors = runRecordingTensors(g, m, example);
  if (!tensors)
    return tensors.takeError();
  std::unordered_map<const Value *, std::vector<int64_t>> shapes;
  for (const auto &[value, tensor] : *tensors)
    shapes[value] = tensor.sizes().vec();
  return shapes;
}

static int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

static int64_t
flops(Node *n,
      const std::unordered_map<const Value *, std::vector<int64_t>> &shapes) {
  auto shape = [&](size_t input) -> const std::vector<int64_t> * {
    if (input >= n->inputs().size())
      return nullptr;
    auto it = shapes.find(n->input(input));
    return it == shapes.end() ? nullptr : &it->second;
  };
  int64_t out = 0;
  for (Value *v : n->outputs())
    if (auto it = shapes.find(v); it != shapes.end())
      out += numel(it->second);
  c10::Symbol kind = n->kind();
  auto isOneOf = [&](std::initializer_list<c10::Symbol> kinds) {
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  };
  auto lastDim = [](const std::vector<int64_t> *s) {
    return s && !s->empty() ? s->back() : 1;
  };
  if (isOneOf({c10::aten::linear, c10::aten::matmul, c10::aten::mm,
               c10::aten::bmm}))
    return 2 * out * lastDim(shape(0));
  if (isOneOf({c10::aten::addmm, c10::aten::baddbmm}))
    return 2 * out * lastDim(shape(1));
  if (isOneOf({c10::aten::conv1d, c10::aten::conv2d, c10::aten::conv3d,
               c10::aten::_convolution})) {
    const auto *w = shape(1);
    return w && !w->empty() ? 2 * out * (numel(*w) / (*w)[0]) : out;
  }
  if (isOneOf({c10::aten::conv_transpose1d, c10::aten::conv_transpose2d,
               c10::aten::conv_transpose3d})) {
    const auto *x = shape(0), *w = shape(1);
    return x && w && !w->empty() ? 2 * numel(*x) * (numel(*w) / (*w)[0]) : out;
  }
  return std::max<int64_t>(out, 1);
}

llvm::Expected<std::vector<int64_t>>
itemCosts(const ItemGraph &graph, const torch::jit::Module *module,
          CostKind kind, const std::vector<c10::IValue> *example) {
  switch (kind) {
  case CostKind::Nodes:
    return std::vector<int64_t>(graph.size(), 1);
  case CostKind::Params:
    if (!module)
      return makeError("the params cost model needs a model with parameters");
    return paramCosts(graph, *module);
  case CostKind::Profile:
    if (!example)
      return makeError("the profile cost model needs an example input "
                       "(--example-input IN.pt)");
    return profileItemTimes(graph, module, *example);
  case CostKind::Flops: {
    if (!example)
      return makeError("the flops cost model needs an example input "
                       "(--example-input IN.pt)");
    auto shapes = profileShapes(graph, module, *example);
    if (!shapes)
      return shapes.takeError();
    std::vector<int64_t> costs;
    for (size_t i = 0; i < graph.size(); ++i)
      costs.push_back(flops(graph.item(i), *shapes));
    return costs;
  }
  }
  llvm_unreachable("unknown CostKind");
}

llvm::Error checkExampleInput(const ItemGraph &graph,
                              const std::vector<c10::IValue> &example) {
  const auto &inputs = graph.modelInputs();
  if (example.size() != inputs.size())
    return makeError(llvm::formatv("the model takes {0} input{1}, got {2}",
                                   inputs.size(), inputs.size() == 1 ? "" : "s",
                                   example.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueKind kind = *boundaryKind(inputs[i]->type());
    if (!hasKind(example[i], kind))
      return makeError(llvm::formatv(
          "model input {0} ('{1}') must be a {2}, got a {3}", i,
          valueName(inputs[i]), kindName(kind), example[i].tagKind()));
  }
  return llvm::Error::success();
}

/// Step 1 of stageMemoryModel(): per item, the new storage bytes its tensor
/// outputs hold. Storage already seen (a model input, an earlier output, a
/// parameter) is not counted again: views and in-place results are free.
static std::vector<int64_t>
activationBytes(const ItemGraph &g, const ValueTensors &tensors,
                const std::vector<c10::IValue> &example,
                std::unordered_set<const void *> &seen) {
  for (const c10::IValue &v : example)
    if (v.isTensor())
      seen.insert(v.toTensor().storage().unsafeGetStorageImpl());
  std::vector<int64_t> bytes(g.size(), 0);
  for (size_t i = 0; i < g.size(); ++i)
    for (Value *out : g.item(i)->outputs()) {
      auto it = tensors.find(out);
      if (it == tensors.end() || !it->second.has_storage())
        continue;
      const c10::Storage &storage = it->second.storage();
      if (seen.insert(storage.unsafeGetStorageImpl()).second)
        bytes[i] += static_cast<int64_t>(storage.nbytes());
    }
  return bytes;
}

/// Step 2: the tensors each item reads, numbered by first read.
static void tensorReadsUnguarded(const ItemGraph &g,
                                 const torch::jit::Module &m,
                                 StageMemoryModel &model,
                                 std::unordered_set<const void *> &seen) {
  std::unordered_map<const void *, size_t> index;
  model.tensorsRead.assign(g.size(), {});
  forEachTensorRead(g, m, [&](size_t i, const at::Tensor &t) {
    seen.insert(t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr);
    auto found =
        index.try_emplace(t.unsafeGetTensorImpl(), model.tensorBytes.size());
    if (found.second)
      model.tensorBytes.push_back(tensorBytes(t));
    size_t k = found.first->second;
    auto &reads = model.tensorsRead[i];
    if (std::find(reads.begin(), reads.end(), k) == reads.end())
      reads.push_back(k);
  });
}

llvm::Expected<StageMemoryModel>
stageMemoryModel(const ItemGraph &graph, const torch::jit::Module &module,
                 const std::vector<c10::IValue> &example) {
  StageMemoryModel model;
  std::unordered_set<const void *> seen;
  if (llvm::Error err = torchCall("cannot read the model's parameters", [&] {
        tensorReadsUnguarded(graph, module, model, seen);
      }))
    return err;
  auto tensors = runRecordingTensors(graph, &module, example);
  if (!tensors)
    return tensors.takeError();
  model.itemBytes = activationBytes(graph, *tensors, example, seen);
  return model;
}

} // namespace ppc
