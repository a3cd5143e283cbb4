//===- tests/unit/passes/PassesTest.cpp - Each graph pass on a small graph ===//
//
// Tests every pass of passes/Passes.def on a graph parsed from IR text or
// scripted here, each for what it changes and what it keeps:
// inline-calls (no call left, each inlined node scoped by its module's
// path), fold-constants (a branch on a constant flag and constant
// arithmetic folded), functionalize (an in-place op on a temporary made
// functional, one on a graph input kept), sink-state-writes (a state
// buffer's write moved down to its next reader, with the node computing
// its operand), cleanup (constants pooled, dead code removed); and
// runPasses: passes by name, unknown names refused. The golden tests
// (tests/golden) check the passes' effect on a split.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace ppc;
using torch::jit::Graph;
using torch::jit::Node;

namespace {

std::shared_ptr<Graph> parse(const std::string &ir) {
  auto graph = std::make_shared<Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

/// The kinds of the graph's top-level nodes, in order ("aten::relu").
std::vector<std::string> kinds(const Graph &graph) {
  std::vector<std::string> out;
  for (const Node *n : graph.nodes())
    out.push_back(n->kind().toQualString());
  return out;
}

/// How many nodes of `kind` the graph holds, blocks included.
int countKind(torch::jit::Block *block, const char *kind) {
  int count = 0;
  for (Node *n : block->nodes()) {
    count += n->kind().toQualString() == std::string(kind);
    for (torch::jit::Block *b : n->blocks())
      count += countKind(b, kind);
  }
  return count;
}

/// The first top-level node of `kind`, or null.
Node *findKind(Graph &graph, const char *kind) {
  for (Node *n : graph.nodes())
    if (n->kind().toQualString() == std::string(kind))
      return n;
  return nullptr;
}

/// The module path InlineCalls recorded on `n` ("" for the top level).
std::string scopePath(Node *n) {
  torch::jit::ScopePtr scope = n->scope();
  return !scope || scope->isBlank() ? "" : scope->name().toUnqualString();
}

std::string errorText(llvm::Error err) {
  return llvm::toString(std::move(err));
}

} // namespace

TEST(PassesTest, EveryRegisteredPassIsTestedHere) {
  // A pass added to Passes.def fails this until it has a test of its own.
  std::vector<std::string> registered = {
#define PPC_PASS(name, fn, description) name,
#include "passes/Passes.def"
  };
  EXPECT_EQ(registered, (std::vector<std::string>{
                            "inline-calls", "fold-constants", "functionalize",
                            "sink-state-writes", "cleanup"}));
}

TEST(PassesTest, InlineCallsLeavesNoCallAndScopesNodesByModulePath) {
  torch::jit::Module inner("Inner");
  inner.define("def forward(self, x):\n"
               "    return torch.relu(x)\n");
  torch::jit::Module block("Block");
  block.register_module("inner", inner);
  block.define("def forward(self, x):\n"
               "    return self.inner.forward(x) * 2.0\n");
  torch::jit::Module top("Top");
  top.register_module("block", block);
  top.define("def helper(self, x):\n"
             "    return x - 1.0\n"
             "def forward(self, x):\n"
             "    return self.helper(self.block.forward(x)) + 1.0\n");
  auto graph = top.get_method("forward").graph()->copy();
  ASSERT_EQ(countKind(graph->block(), "prim::CallMethod"), 2);

  inlineCalls(graph);

  EXPECT_EQ(countKind(graph->block(), "prim::CallMethod"), 0);
  EXPECT_EQ(countKind(graph->block(), "prim::CallFunction"), 0);
  // Every computation kept, each under the path of the module it ran in;
  // a method of the top module (helper) has the top's empty path.
  std::map<std::string, std::string> scopes;
  for (Node *n : graph->nodes())
    if (n->kind().is_aten())
      scopes[n->kind().toQualString()] = scopePath(n);
  EXPECT_EQ(scopes,
            (std::map<std::string, std::string>{{"aten::relu", "block.inner"},
                                                {"aten::mul", "block"},
                                                {"aten::sub", ""},
                                                {"aten::add", ""}}));
  // Still the same function.
  torch::jit::GraphFunction fn("f", graph, nullptr);
  at::Tensor x = at::arange(-2, 3, at::kFloat);
  std::vector<c10::IValue> stack = {top._ivalue(), x};
  fn.run(stack);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), at::relu(x) * 2.0 - 1.0 + 1.0));
}

TEST(PassesTest, FoldConstantsRemovesTheBranchOnAConstantFlag) {
  // F.relu(x, inplace=False) inlined: the dead branch's relu_ would make
  // alias analysis assume %x is written.
  auto graph = parse(R"IR(
graph(%x : Tensor):
  %false : bool = prim::Constant[value=0]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %r : Tensor = prim::If(%false)
    block0():
      %a : Tensor = aten::relu_(%x)
      -> (%a)
    block1():
      %b : Tensor = aten::relu(%x)
      -> (%b)
  %s : int = aten::add(%two, %three)
  %y : Tensor = aten::mul(%r, %s)
  return (%y)
)IR");
  foldConstants(graph);
  EXPECT_EQ(countKind(graph->block(), "prim::If"), 0);
  EXPECT_EQ(countKind(graph->block(), "aten::relu_"), 0);
  // The taken branch and the tensor op stay; 2 + 3 became the constant 5.
  Node *relu = findKind(*graph, "aten::relu");
  Node *mul = findKind(*graph, "aten::mul");
  ASSERT_NE(relu, nullptr);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(relu->input(0), graph->inputs()[0]);
  EXPECT_EQ(mul->input(0), relu->output());
  EXPECT_EQ(mul->input(1)->node()->kind(), c10::prim::Constant);
  EXPECT_EQ(torch::jit::toIValue(mul->input(1))->toInt(), 5);
  EXPECT_EQ(findKind(*graph, "aten::add"), nullptr);
  EXPECT_EQ(graph->outputs()[0], mul->output());
}

TEST(PassesTest, FunctionalizeRewritesAnInPlaceOpOnATemporary) {
  auto graph = parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::mul(%x, %x)
  %b : Tensor = aten::relu_(%a)
  %out : Tensor = aten::sigmoid(%a)
  return (%out)
)IR");
  functionalize(graph);
  EXPECT_EQ(kinds(*graph), (std::vector<std::string>{"aten::mul", "aten::relu",
                                                     "aten::sigmoid"}));
  // The later reader of %a now reads the relu's result: the dataflow the
  // in-place op hid.
  Node *relu = findKind(*graph, "aten::relu");
  Node *sigmoid = findKind(*graph, "aten::sigmoid");
  ASSERT_NE(relu, nullptr);
  ASSERT_NE(sigmoid, nullptr);
  EXPECT_EQ(relu->input(0), findKind(*graph, "aten::mul")->output());
  EXPECT_EQ(sigmoid->input(0), relu->output());
}

TEST(PassesTest, FunctionalizeKeepsAWriteTheCallerCanSee) {
  // %x is the caller's tensor: making the relu functional would drop the
  // write the caller observes.
  auto graph = parse(R"IR(
graph(%x : Tensor):
  %b : Tensor = aten::relu_(%x)
  %out : Tensor = aten::sigmoid(%x)
  return (%out)
)IR");
  functionalize(graph);
  EXPECT_EQ(kinds(*graph),
            (std::vector<std::string>{"aten::relu_", "aten::sigmoid"}));
  EXPECT_EQ(findKind(*graph, "aten::sigmoid")->input(0), graph->inputs()[0]);
}

TEST(PassesTest, SinkStateWritesMovesAWriteDownToTheBuffersNextReader) {
  torch::jit::Module m("m");
  m.register_buffer("counter", torch::zeros({}, torch::kLong));
  m.define(R"(
def forward(self, x, pos: Tensor):
    self.counter.copy_(pos + 1)
    y = x * 2.0
    z = torch.relu(y)
    return z + self.counter
)");
  auto graph = m.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  auto computeKinds = [&] {
    std::vector<std::string> out;
    for (const std::string &k : kinds(*graph))
      if (k != "prim::Constant" && k != "prim::GetAttr")
        out.push_back(k);
    return out;
  };
  ASSERT_EQ(computeKinds(),
            (std::vector<std::string>{"aten::add", "aten::copy_", "aten::mul",
                                      "aten::relu", "aten::add"}));

  sinkStateWrites(graph);

  // The write and the add computing what it copies (used by it alone)
  // moved down past the unrelated mul and relu; nothing else moved.
  EXPECT_EQ(computeKinds(),
            (std::vector<std::string>{"aten::mul", "aten::relu", "aten::add",
                                      "aten::copy_", "aten::add"}));
  Node *copy = findKind(*graph, "aten::copy_");
  ASSERT_NE(copy, nullptr);
  Node *reader = copy->next();
  while (reader->kind() == c10::prim::GetAttr ||
         reader->kind() == c10::prim::Constant)
    reader = reader->next();
  EXPECT_EQ(reader->kind().toQualString(), std::string("aten::add"));
  EXPECT_EQ(graph->outputs()[0], reader->output());
  // Still the same function: the output reads the written counter.
  torch::jit::GraphFunction fn("f", graph, nullptr);
  std::vector<c10::IValue> stack = {m._ivalue(), at::full({2}, -3.0),
                                    at::scalar_tensor(4, at::kLong)};
  fn.run(stack);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), at::full({2}, 5.0)))
      << stack[0].toTensor();
}

TEST(PassesTest, SinkStateWritesLeavesAGraphWithoutStateAlone) {
  auto graph = parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu_(%x)
  %b : Tensor = aten::mul(%x, %x)
  %c : Tensor = aten::sigmoid(%a)
  return (%b, %c)
)IR");
  std::vector<std::string> before = kinds(*graph);
  sinkStateWrites(graph);
  EXPECT_EQ(kinds(*graph), before);
}

TEST(PassesTest, CleanupPoolsConstantsAndRemovesDeadCode) {
  auto graph = parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::add(%x, %x, %one)
  %dead : Tensor = aten::mul(%x, %x)
  %one2 : int = prim::Constant[value=1]()
  %b : Tensor = aten::sub(%a, %x, %one2)
  return (%b)
)IR");
  cleanup(graph);
  EXPECT_EQ(kinds(*graph), (std::vector<std::string>{
                               "prim::Constant", "aten::add", "aten::sub"}));
  Node *add = findKind(*graph, "aten::add");
  Node *sub = findKind(*graph, "aten::sub");
  ASSERT_NE(add, nullptr);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(add->input(2), sub->input(2));
  EXPECT_EQ(sub->input(0), add->output());
  EXPECT_EQ(graph->outputs()[0], sub->output());
}

TEST(PassesTest, RunPassesRunsTheNamedPassesByName) {
  auto graph = parse(R"IR(
graph(%x : Tensor):
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %s : int = aten::add(%two, %three)
  %y : Tensor = aten::mul(%x, %s)
  return (%y)
)IR");
  ASSERT_FALSE(static_cast<bool>(runPasses(graph, {})));
  EXPECT_EQ(countKind(graph->block(), "aten::add"), 1);
  ASSERT_FALSE(
      static_cast<bool>(runPasses(graph, {"fold-constants", "cleanup"})));
  EXPECT_EQ(kinds(*graph),
            (std::vector<std::string>{"prim::Constant", "aten::mul"}));
  EXPECT_EQ(
      torch::jit::toIValue(findKind(*graph, "aten::mul")->input(1))->toInt(),
      5);
}

TEST(PassesTest, RunPassesRefusesAnUnknownNameListingTheKnownOnes) {
  auto graph = parse(R"IR(
graph(%x : Tensor):
  return (%x)
)IR");
  EXPECT_EQ(errorText(runPasses(graph, {"fold"})),
            "unknown pass 'fold'; known passes: inline-calls, "
            "fold-constants, functionalize, sink-state-writes, cleanup");
}
