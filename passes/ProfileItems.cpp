//===- passes/ProfileItems.cpp - Measured time of each item ---------------===//
//
// This file implements profileItemTimes(): a marked copy of the graph, run
// on the example input, timed between markers. See ProfileItems.h.
//
//===----------------------------------------------------------------------===//
#include "passes/ProfileItems.h"

#include "lib/Error.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

/// Where markers write: stamps[i] is when marker i last ran. Set only while
/// profileItemTimes runs the marked graph on this thread.
thread_local std::vector<Clock::time_point> *stamps = nullptr;

constexpr const char *kMarker = "ppc_profile::mark";

/// ppc_profile::mark(int i) -> (): records the time in stamps[i]. Marked
/// CONSERVATIVE: the alias analysis then treats it as reading and writing
/// everything, so no pass deletes it or moves work across it.
torch::jit::RegisterOperators registerMarker({torch::jit::Operator(
    std::string(kMarker) + "(int item) -> ()",
    [](torch::jit::Stack &stack) {
      int64_t i = stack.back().toInt();
      stack.pop_back();
      if (stamps && i >= 0 && static_cast<size_t>(i) < stamps->size())
        (*stamps)[i] = Clock::now();
    },
    c10::AliasAnalysisKind::CONSERVATIVE)});
} // namespace

/// Step 1: a copy of the graph with marker i before item i and marker n
/// after the last item.
static std::shared_ptr<torch::jit::Graph> markedCopy(const ItemGraph &g) {
  auto copy = g.graph()->copy();
  std::unordered_map<const torch::jit::Node *, torch::jit::Node *> toCopy;
  auto orig = g.graph()->nodes().begin();
  for (torch::jit::Node *n : copy->nodes())
    toCopy[*orig++] = n;
  c10::Symbol marker = c10::Symbol::fromQualString(kMarker);
  for (size_t i = 0; i < g.size(); ++i) {
    torch::jit::WithInsertPoint at(toCopy.at(g.item(i)));
    copy->insert(marker, {static_cast<int64_t>(i)});
  }
  torch::jit::WithInsertPoint after(toCopy.at(g.item(g.size() - 1))->next());
  copy->insert(marker, {static_cast<int64_t>(g.size())});
  return copy;
}

/// Deep copies of the inputs, so that a run cannot see an earlier run's
/// in-place writes.
static std::vector<c10::IValue>
cloneInputs(const std::vector<c10::IValue> &example) {
  std::vector<c10::IValue> out;
  for (const c10::IValue &v : example)
    out.push_back(v.isTensor() ? c10::IValue(v.toTensor().clone()) : v);
  return out;
}

static int64_t median(std::vector<int64_t> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

llvm::Expected<std::vector<int64_t>>
profileItemTimes(const ItemGraph &graph, const torch::jit::Module *module,
                 const std::vector<c10::IValue> &example,
                 const ProfileOptions &options) {
  const size_t n = graph.size();
  std::vector<std::vector<int64_t>> samples(n);
  llvm::Error ran = torchCall("cannot run the model on the example input", [&] {
    torch::jit::GraphFunction fn("ppc_profile", markedCopy(graph), nullptr);
    // Inference, as ppc run executes stages.
    at::NoGradGuard noGrad;
    std::vector<Clock::time_point> times(n + 1);
    stamps = &times;
    struct Reset {
      ~Reset() { stamps = nullptr; }
    } reset;
    Clock::time_point begin{};
    for (int run = 0;; ++run) {
      int timed = run - options.warmup;
      if (timed == 0)
        begin = Clock::now();
      if (timed >= options.maxRepetitions ||
          (timed >= options.minRepetitions &&
           std::chrono::duration<double>(Clock::now() - begin).count() >=
               options.minSeconds))
        break;
      torch::jit::Stack stack;
      if (module)
        stack.push_back(module->_ivalue());
      for (c10::IValue &v : cloneInputs(example))
        stack.push_back(std::move(v));
      fn.run(stack);
      stack.clear(); // Outputs are freed outside the timed span.
      if (timed < 0)
        continue;
      for (size_t i = 0; i < n; ++i)
        samples[i].push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(times[i + 1] -
                                                                 times[i])
                .count());
    }
  });
  if (ran)
    return ran;
  std::vector<int64_t> out;
  for (auto &s : samples)
    out.push_back(std::max<int64_t>(0, median(std::move(s))));
  return out;
}

} // namespace ppc
