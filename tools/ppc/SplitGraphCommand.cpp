//===- tools/ppc/SplitGraphCommand.cpp - ppc split-graph ------------------===//
//
// A developer command behind the golden IR tests: TorchScript graph text in,
// stage graphs out, with no module involved.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "passes/CostModel.h"
#include "passes/ExtractStage.h"
#include "passes/Passes.h"
#include "passes/PlanPartition.h"
#include "tools/ppc/OptionChecks.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <sstream>
#include <unordered_map>

namespace ppc {

namespace {
struct SplitGraphOptions {
  std::string irPath;
  int stages = 0;
  std::vector<std::string> splitBefore;
  std::vector<std::string> passes;
};
} // namespace

static llvm::Expected<int> runSplitGraph(const SplitGraphOptions &o) {
  auto buffer = llvm::MemoryBuffer::getFile(o.irPath, /*IsText=*/true);
  if (!buffer)
    return makeError("cannot read '" + o.irPath +
                     "': " + buffer.getError().message());
  auto graph = std::make_shared<torch::jit::Graph>();
  std::unordered_map<std::string, torch::jit::Value *> names;
  if (llvm::Error err =
          torchCall("'" + o.irPath + "' is not valid TorchScript IR", [&] {
            torch::jit::parseIR((*buffer)->getBuffer().str(), graph.get(),
                                names);
          }))
    return err;
  // The parser resolves names but does not keep them; keep the readable ones
  // so the output (and golden checks) can refer to %x rather than %3.
  for (const auto &[name, value] : names)
    if (!name.empty() && !isdigit(static_cast<unsigned char>(name[0])))
      value->setDebugName(name);
  if (llvm::Error err = runPasses(graph, o.passes))
    return err;

  auto items = ItemGraph::build(graph);
  if (!items)
    return items.takeError();
  auto costs = itemCosts(*items, nullptr, CostKind::Nodes, nullptr);
  if (!costs)
    return costs.takeError();
  PartitionRequest request;
  request.stages = o.stages;
  request.splitBefore = o.splitBefore;
  auto plan = planPartition(*items, *costs, request, nullptr);
  if (!plan)
    return plan.takeError();
  // Values the passes created have no name, and each stage graph numbers
  // its own values afresh: name the boundary values so a golden test can
  // follow an edge from its producer's graph into its consumer's.
  for (size_t s = 0; s < plan->numStages(); ++s)
    for (torch::jit::Value *v : plan->outputs(s))
      if (!v->hasDebugName())
        v->setDebugName("v" + std::to_string(v->unique()));

  for (size_t s = 0; s < plan->numStages(); ++s) {
    auto stage = extractStage(*plan, s);
    if (!stage)
      return stage.takeError();
    llvm::outs() << "stage " << s << ":\n";
    for (torch::jit::Value *v : plan->inputs(s)) {
      int from = plan->stageOfValue(v);
      llvm::outs() << "  input %" << v->debugName() << " from "
                   << (from < 0 ? std::string("model input")
                                : "stage " + std::to_string(from))
                   << "\n";
    }
    for (torch::jit::Value *v : plan->outputs(s)) {
      std::vector<std::string> to;
      for (int c : plan->consumers(v))
        to.push_back(std::to_string(c));
      llvm::outs() << "  output %" << v->debugName() << " to stages ["
                   << llvm::join(to, ",") << "]\n";
    }
    std::ostringstream os;
    os << **stage;
    llvm::outs() << os.str();
  }
  return 0;
}

Command addSplitGraphCommand(CLI::App &parent) {
  auto o = std::make_shared<SplitGraphOptions>();
  CLI::App *app = parent.add_subcommand(
      "split-graph",
      "(developer) Split TorchScript graph text and print the stage graphs");
  app->footer(
      "Parse a TorchScript graph (the text form printed by graph.str()), "
      "optionally run named passes on it, split it like ppc split does "
      "(one unit of cost per operation), and print each stage's "
      "boundary values and graph. Used by the golden IR tests.");
  app->add_option("ir", o->irPath, "File with TorchScript graph text")
      ->required()
      ->check(pathOption());
  auto *stages = app->add_option("--stages", o->stages, "Number of stages")
                     ->transform(intInRange(1));
  auto *before =
      app->add_option("--split-before", o->splitBefore,
                      "Begin a stage at the operation producing each of "
                      "these values (e.g. %x.3,%7)")
          ->delimiter(',');
  stages->excludes(before);
  app->add_option("--passes", o->passes,
                  "Passes to run first, by name (see passes/Passes.def)")
      ->delimiter(',');
  return {app, [o, app]() -> llvm::Expected<int> {
            if (o->splitBefore.empty() && app->count("--stages") == 0)
              return makeError(
                  "ppc split-graph needs --stages N or --split-before VALUES");
            return runSplitGraph(*o);
          }};
}

} // namespace ppc
