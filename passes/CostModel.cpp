//===- passes/CostModel.cpp - Static cost of each item --------------------===//
#include "passes/CostModel.h"

#include "lib/Error.h"
#include "lib/Stage.h"
#include "lib/TorchScriptStage.h"
#include "passes/ProfileItems.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <map>
#include <optional>
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
using ValueShapes = std::unordered_map<const Value *, std::vector<int64_t>>;

/// The values of `wanted` (top-level values or inputs of `graph`) from one
/// run of a copy of `graph` that returns them all. With `cloneInputs` it
/// runs on copies of the example tensors (a model may write its inputs, and
/// a caller that runs it again wants the same input); without, on the
/// example itself, so that outputs can be told apart from views of it.
static llvm::Expected<std::unordered_map<const Value *, c10::IValue>>
runRecording(torch::jit::Graph &graph, const torch::jit::Module *m,
             const std::vector<c10::IValue> &example,
             const std::vector<const Value *> &wanted, bool cloneInputs) {
  auto copy = graph.copy();
  std::unordered_map<const Value *, Value *> toCopy;
  for (size_t i = 0; i < graph.inputs().size(); ++i)
    toCopy[graph.inputs()[i]] = copy->inputs()[i];
  auto orig = graph.nodes().begin();
  for (Node *n : copy->nodes()) {
    for (size_t k = 0; k < n->outputs().size(); ++k)
      toCopy[orig->output(k)] = n->output(k);
    ++orig;
  }
  std::vector<Value *> results;
  for (const Value *v : wanted)
    results.push_back(toCopy.at(v));
  while (!copy->outputs().empty())
    copy->eraseOutput(0);
  copy->registerOutput(copy->insertNode(copy->createTuple(results))->output());

  auto outputs = torchCall("cannot run the model on the example input", [&] {
    torch::jit::GraphFunction fn("ppc_profile", copy, nullptr);
    at::NoGradGuard noGrad;
    torch::jit::Stack stack;
    if (m)
      stack.push_back(m->_ivalue());
    for (const c10::IValue &v : example)
      stack.push_back(
          cloneInputs && v.isTensor() ? c10::IValue(v.toTensor().clone()) : v);
    fn.run(stack);
    return stack.back().toTupleRef().elements().vec();
  });
  if (!outputs)
    return outputs.takeError();
  std::unordered_map<const Value *, c10::IValue> values;
  for (size_t i = 0; i < wanted.size(); ++i)
    values[wanted[i]] = (*outputs)[i];
  return values;
}

/// The top-level tensor values of `graph` among `candidates`.
static std::vector<const Value *>
tensorValues(const std::vector<const Value *> &candidates) {
  std::vector<const Value *> out;
  for (const Value *v : candidates)
    if (v->type()->kind() == c10::TypeKind::TensorType)
      out.push_back(v);
  return out;
}

/// Every value the top-level nodes of `g` make.
static std::vector<const Value *> topLevelValues(torch::jit::Graph &g) {
  std::vector<const Value *> out;
  for (const Node *n : g.nodes())
    for (const Value *v : n->outputs())
      out.push_back(v);
  return out;
}

/// Every top-level tensor value, from one run of a copy of the graph that
/// returns them all.
static llvm::Expected<ValueTensors>
runRecordingTensors(const ItemGraph &g, const torch::jit::Module *m,
                    const std::vector<c10::IValue> &example) {
  auto values = runRecording(*g.graph(), m, example,
                             tensorValues(topLevelValues(*g.graph())), false);
  if (!values)
    return values.takeError();
  ValueTensors tensors;
  for (const auto &[value, iv] : *values)
    if (iv.isTensor() && iv.toTensor().defined())
      tensors[value] = iv.toTensor();
  return tensors;
}

namespace {
/// A copy of the model graph whose control flow is replaced, where one run
/// on the example input resolves it, by the operations it runs: a prim::If
/// by its taken branch, a prim::Loop with a known trip count that always
/// continues by its body once per iteration. Each top-level node of the
/// copy remembers the item it stands for.
class FlatGraph {
public:
  FlatGraph(const ItemGraph &g) : graph_(g.graph()->copy()) {
    std::unordered_map<const Node *, int> itemOf;
    for (size_t i = 0; i < g.size(); ++i)
      itemOf[g.item(i)] = static_cast<int>(i);
    auto orig = g.graph()->nodes().begin();
    for (Node *n : graph_->nodes()) {
      auto it = itemOf.find(*orig);
      item_[n] = it == itemOf.end() ? -1 : it->second;
      ++orig;
    }
  }

  /// Resolves control flow round by round (a branch inside a taken branch
  /// is resolved in the next round) until none is left that a run can
  /// resolve.
  llvm::Error flatten(const torch::jit::Module *m,
                      const std::vector<c10::IValue> &example) {
    for (int round = 0; round < kMaxRounds; ++round) {
      std::vector<const Value *> wanted;
      for (Node *n : graph_->nodes())
        if (n->kind() == c10::prim::If || n->kind() == c10::prim::Loop)
          wanted.push_back(n->input(0));
      if (wanted.empty())
        return llvm::Error::success();
      auto values = runRecording(*graph_, m, example, wanted, true);
      if (!values)
        return values.takeError();
      bool changed = false;
      std::vector<Node *> nodes(graph_->nodes().begin(), graph_->nodes().end());
      for (Node *n : nodes) {
        if (n->kind() != c10::prim::If && n->kind() != c10::prim::Loop)
          continue;
        auto found = values->find(n->input(0));
        if (found == values->end())
          continue;
        const c10::IValue &v = found->second;
        if (n->kind() == c10::prim::If && v.isBool()) {
          replaceIf(n, v.toBool());
          changed = true;
        } else if (n->kind() == c10::prim::Loop && v.isInt() &&
                   v.toInt() <= kMaxUnrolledIterations && alwaysContinues(n)) {
          unrollLoop(n, std::max<int64_t>(v.toInt(), 0));
          changed = true;
        }
      }
      if (!changed)
        return llvm::Error::success();
    }
    return llvm::Error::success();
  }

  const std::shared_ptr<torch::jit::Graph> &graph() const { return graph_; }
  /// The item a top-level node stands for, or -1 (rematerializable code).
  int itemOf(Node *n) const { return item_.at(n); }

private:
  static constexpr int kMaxRounds = 16;

  /// Whether a loop's initial condition and its body's condition are the
  /// constant true (a `for` loop, as TorchScript writes range loops).
  static bool alwaysContinues(Node *loop) {
    auto isTrue = [](Value *v) {
      auto c = torch::jit::toIValue(v);
      return c && c->isBool() && c->toBool();
    };
    return isTrue(loop->input(1)) && isTrue(loop->blocks()[0]->outputs()[0]);
  }

  /// Copies the nodes of `b` before `at`, its inputs bound to `inputs`;
  /// returns the copies of its outputs. The copies stand for `at`'s item.
  std::vector<Value *> inlineBlock(Node *at, torch::jit::Block *b,
                                   const std::vector<Value *> &inputs) {
    std::unordered_map<Value *, Value *> env;
    for (size_t i = 0; i < inputs.size(); ++i)
      env[b->inputs()[i]] = inputs[i];
    auto lookup = [&](Value *v) {
      auto it = env.find(v);
      return it == env.end() ? v : it->second;
    };
    torch::jit::WithInsertPoint point(at);
    for (Node *inner : b->nodes()) {
      Node *copy = graph_->insertNode(graph_->createClone(inner, lookup));
      item_[copy] = item_.at(at);
      for (size_t k = 0; k < inner->outputs().size(); ++k)
        env[inner->output(k)] = copy->output(k);
    }
    std::vector<Value *> outputs;
    for (Value *v : b->outputs())
      outputs.push_back(lookup(v));
    return outputs;
  }

  void replaceWith(Node *n, const std::vector<Value *> &values) {
    for (size_t k = 0; k < n->outputs().size(); ++k)
      n->output(k)->replaceAllUsesWith(values[k]);
    item_.erase(n);
    n->destroy();
  }

  void replaceIf(Node *n, bool taken) {
    replaceWith(n, inlineBlock(n, n->blocks()[taken ? 0 : 1], {}));
  }

  void unrollLoop(Node *n, int64_t trips) {
    std::vector<Value *> carried(n->inputs().begin() + 2, n->inputs().end());
    for (int64_t i = 0; i < trips; ++i) {
      Value *index;
      {
        torch::jit::WithInsertPoint point(n);
        index = graph_->insertConstant(i);
      }
      item_[index->node()] = -1;
      std::vector<Value *> inputs{index};
      inputs.insert(inputs.end(), carried.begin(), carried.end());
      std::vector<Value *> outs = inlineBlock(n, n->blocks()[0], inputs);
      carried.assign(outs.begin() + 1, outs.end());
    }
    replaceWith(n, carried);
  }

  std::shared_ptr<torch::jit::Graph> graph_;
  std::unordered_map<Node *, int> item_;
};
} // namespace

static int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

static int64_t flops(Node *n, const ValueShapes &shapes) {
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

/// Whether `kind` is an operation whose FLOPs grow with a product of
/// dimensions (flops() counts it by its multiply-accumulates).
static bool isMacHeavy(c10::Symbol kind) {
  static const c10::Symbol kinds[] = {c10::aten::linear,
                                      c10::aten::matmul,
                                      c10::aten::mm,
                                      c10::aten::bmm,
                                      c10::aten::addmm,
                                      c10::aten::baddbmm,
                                      c10::aten::conv1d,
                                      c10::aten::conv2d,
                                      c10::aten::conv3d,
                                      c10::aten::_convolution,
                                      c10::aten::conv_transpose1d,
                                      c10::aten::conv_transpose2d,
                                      c10::aten::conv_transpose3d,
                                      c10::aten::einsum};
  return std::find(std::begin(kinds), std::end(kinds), kind) != std::end(kinds);
}

/// Counts the multiply-accumulate heavy operations inside `n`'s blocks.
static void countMacHeavy(Node *n, std::map<std::string, int> &counts) {
  for (torch::jit::Block *b : n->blocks())
    for (Node *inner : b->nodes()) {
      if (isMacHeavy(inner->kind()))
        ++counts[inner->kind().toQualString()];
      countMacHeavy(inner, counts);
    }
}

/// What flops() cannot count of a node left with blocks: "" when its
/// blocks hold no multiply-accumulate heavy operation.
static std::string uncountedOps(Node *n) {
  std::map<std::string, int> counts;
  countMacHeavy(n, counts);
  if (counts.empty())
    return "";
  std::vector<std::string> parts;
  for (const auto &[kind, count] : counts)
    parts.push_back(count == 1 ? kind : kind + " x" + std::to_string(count));
  return llvm::join(parts, ", ") + " in a " + n->kind().toQualString() +
         (n->kind() == c10::prim::Loop
              ? " whose trip count the example run does not fix"
              : " the example run does not resolve");
}

/// The flops cost model (see CostModel.h): the items' operations, control
/// flow resolved on the example, each counted by flops(). With `recorded`
/// (a program without weights) nothing runs: the shapes are those its file
/// recorded.
static llvm::Expected<std::vector<int64_t>>
flopsCosts(const ItemGraph &graph, const torch::jit::Module *module,
           const std::vector<c10::IValue> &example, const ShapeOf &recorded,
           std::vector<std::string> *uncounted) {
  FlatGraph flat(graph);
  if (!recorded)
    if (llvm::Error err = flat.flatten(module, example))
      return err;
  // The model inputs too: the first linear of an MLP reads one.
  std::vector<const Value *> counted = topLevelValues(*flat.graph());
  counted.insert(counted.end(), flat.graph()->inputs().begin(),
                 flat.graph()->inputs().end());
  ValueShapes shapes;
  if (recorded) {
    for (const Value *v : tensorValues(counted))
      if (auto shape = recorded(*v))
        shapes[v] = std::move(*shape);
    if (shapes.empty())
      return makeError("--cost flops needs the weights of a model that has "
                       "none and records no shapes: give them with "
                       "--weights, or use --cost params or nodes");
  } else {
    auto values = runRecording(*flat.graph(), module, example,
                               tensorValues(counted), true);
    if (!values)
      return values.takeError();
    for (const auto &[value, iv] : *values)
      if (iv.isTensor() && iv.toTensor().defined())
        shapes[value] = iv.toTensor().sizes().vec();
  }
  std::vector<int64_t> costs(graph.size(), 0);
  std::vector<std::string> left(graph.size());
  for (Node *n : flat.graph()->nodes()) {
    int item = flat.itemOf(n);
    if (item < 0 || n->kind() == c10::prim::Constant ||
        n->kind() == c10::prim::GetAttr)
      continue;
    costs[item] += flops(n, shapes);
    if (!n->blocks().empty()) {
      std::string ops = uncountedOps(n);
      if (!ops.empty())
        left[item] = left[item].empty() ? ops : left[item] + "; " + ops;
    }
  }
  for (int64_t &c : costs)
    c = std::max<int64_t>(c, 1);
  if (uncounted)
    *uncounted = std::move(left);
  return costs;
}

llvm::Expected<std::vector<int64_t>>
itemCosts(const ItemGraph &graph, const torch::jit::Module *module,
          CostKind kind, const std::vector<c10::IValue> *example,
          std::vector<std::string> *uncounted, const ShapeOf &recorded) {
  if (uncounted)
    uncounted->clear();
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
    return flopsCosts(graph, module, *example, recorded, uncounted);
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
