//===- passes/ProfileItems.cpp - Measured time of each item ---------------===//
//
// This file implements profileItemTimes(): a marked copy of the graph, run
// on the example input, timed between markers. See ProfileItems.h.
//
//===----------------------------------------------------------------------===//
#include "passes/ProfileItems.h"

#include "lib/Error.h"
#include "lib/StageModule.h"
#include "passes/ExtractStage.h"

#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <unordered_map>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

/// CPU time of the calling thread, in nanoseconds. With compute bounded to
/// one thread all work runs on the caller, and unlike wall time this does
/// not count the time other processes hold the core: a busy machine slows
/// the measurement but hardly skews it.
int64_t threadNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

/// Where markers write: stamps[i] is when marker i last ran. Set only while
/// profileItemTimes runs the marked graph on this thread.
thread_local std::vector<int64_t> *stamps = nullptr;

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
        (*stamps)[i] = threadNanos();
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

/// The runs ProfileOptions asks for: run 0.. `warmup - 1` untimed, then
/// timed runs until there are maxRepetitions, or minRepetitions that took
/// minSeconds together.
class Repetitions {
public:
  explicit Repetitions(const ProfileOptions &options) : options(options) {}
  /// Whether run `run` is timed (past the warm-up).
  bool timed(int run) const { return run >= options.warmup; }
  /// Whether to make run `run` (0, 1, ... in order).
  bool another(int run) {
    int timed = run - options.warmup;
    if (timed == 0)
      begin = Clock::now();
    return timed < options.maxRepetitions &&
           (timed < options.minRepetitions ||
            std::chrono::duration<double>(Clock::now() - begin).count() <
                options.minSeconds);
  }

private:
  const ProfileOptions &options;
  Clock::time_point begin{};
};

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
    std::vector<int64_t> times(n + 1);
    stamps = &times;
    struct Reset {
      ~Reset() { stamps = nullptr; }
    } reset;
    Repetitions repetitions(options);
    for (int run = 0; repetitions.another(run); ++run) {
      torch::jit::Stack stack;
      if (module)
        stack.push_back(module->_ivalue());
      for (c10::IValue &v : cloneInputs(example))
        stack.push_back(std::move(v));
      fn.run(stack);
      stack.clear(); // Outputs are freed outside the timed span.
      if (!repetitions.timed(run))
        continue;
      for (size_t i = 0; i < n; ++i)
        samples[i].push_back(times[i + 1] - times[i]);
    }
  });
  if (ran)
    return ran;
  std::vector<int64_t> out;
  for (auto &s : samples)
    out.push_back(std::max<int64_t>(0, median(std::move(s))));
  return out;
}

namespace {
/// A stage module ready to run, with the inputs of its timed runs.
struct TimedStage {
  torch::jit::Module module;
  std::vector<c10::IValue> inputs;
  std::vector<int64_t> samples;
};
} // namespace

/// Stage `s`'s module and inputs; runs it once on them and records its
/// outputs in `values` for the stages after it.
static llvm::Expected<TimedStage> prepareStage(
    const PartitionPlan &plan, size_t s, const torch::jit::Module &model,
    const std::vector<c10::IValue> &example,
    std::unordered_map<const torch::jit::Value *, c10::IValue> &values) {
  auto graph = extractStage(plan, s);
  if (!graph)
    return graph.takeError();
  auto built = buildStageModule(model, std::move(*graph), static_cast<int>(s));
  if (!built)
    return built.takeError();
  TimedStage stage{std::move(built->module), {}, {}};
  const auto &modelInputs = plan.graph().modelInputs();
  for (torch::jit::Value *v : plan.inputs(s)) {
    auto in = std::find(modelInputs.begin(), modelInputs.end(), v);
    stage.inputs.push_back(in != modelInputs.end()
                               ? example[in - modelInputs.begin()]
                               : values.at(v));
  }
  auto outputs = torchCall(
      llvm::formatv("cannot run stage {0} on the example input", s), [&] {
        at::NoGradGuard noGrad;
        std::vector<c10::IValue> args;
        for (const c10::IValue &v : stage.inputs)
          args.push_back(v.deepcopy());
        return stage.module.forward(std::move(args))
            .toTupleRef()
            .elements()
            .vec();
      });
  if (!outputs)
    return outputs.takeError();
  for (size_t k = 0; k < plan.outputs(s).size(); ++k)
    values[plan.outputs(s)[k]] = (*outputs)[k];
  return stage;
}

llvm::Expected<std::vector<int64_t>>
profileStageTimes(const PartitionPlan &plan, const torch::jit::Module &module,
                  const std::vector<c10::IValue> &example,
                  const ProfileOptions &options) {
  std::unordered_map<const torch::jit::Value *, c10::IValue> values;
  std::vector<TimedStage> stages;
  for (size_t s = 0; s < plan.numStages(); ++s) {
    auto stage = prepareStage(plan, s, module, example, values);
    if (!stage)
      return stage.takeError();
    stages.push_back(std::move(*stage));
  }
  llvm::Error ran = torchCall("cannot run a stage on the example input", [&] {
    at::NoGradGuard noGrad;
    Repetitions repetitions(options);
    for (int run = 0; repetitions.another(run); ++run) {
      for (TimedStage &stage : stages) {
        std::vector<c10::IValue> args;
        for (const c10::IValue &v : stage.inputs)
          args.push_back(v.deepcopy());
        int64_t start = threadNanos();
        c10::IValue out = stage.module.forward(std::move(args));
        int64_t end = threadNanos();
        if (repetitions.timed(run))
          stage.samples.push_back(end - start);
      }
    }
  });
  if (ran)
    return ran;
  std::vector<int64_t> out;
  for (TimedStage &stage : stages)
    out.push_back(median(std::move(stage.samples)));
  return out;
}

} // namespace ppc
