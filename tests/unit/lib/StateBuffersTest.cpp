//===- tests/unit/lib/StateBuffersTest.cpp - State buffer analysis --------===//
//
// Modules compiled from TorchScript source: which buffers a graph writes in
// place, what touches them, and how ItemGraph keeps their touches in one
// stage.
//
//===----------------------------------------------------------------------===//
#include "lib/StateBuffers.h"

#include "lib/ItemGraph.h"

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <gtest/gtest.h>

using namespace ppc;

namespace {

/// A module with buffers `cache` [4,3] (in submodule `child`), `frozen`
/// and `steps`, a parameter `weight`, and `forward` from `source`.
torch::jit::Module makeModule(const std::string &source) {
  torch::jit::Module child("child");
  child.register_buffer("cache", torch::zeros({4, 3}));
  torch::jit::Module m("m");
  m.register_module("child", child);
  m.register_buffer("frozen", torch::ones({3}));
  m.register_buffer("steps", torch::zeros({}, torch::kLong));
  m.register_parameter("weight", torch::ones({3}), /*requires_grad=*/false);
  m.define(source);
  return m;
}

std::shared_ptr<torch::jit::Graph> forwardGraph(torch::jit::Module &m) {
  auto graph = m.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  return graph;
}

std::vector<std::string> paths(const std::vector<StateBuffer> &state) {
  std::vector<std::string> out;
  for (const StateBuffer &s : state)
    out.push_back(s.path);
  return out;
}

std::vector<std::string> kinds(const StateBuffer &state) {
  std::vector<std::string> out;
  for (const torch::jit::Node *n : state.touches)
    out.push_back(n->kind().toQualString());
  return out;
}

} // namespace

TEST(StateBuffersTest, FindsBuffersWrittenInPlaceThroughViews) {
  auto m = makeModule(R"(
def forward(self, x, pos):
    self.steps.add_(1)
    self.child.cache.index_copy_(0, pos, x)
    v = self.child.cache.view([-1])
    y = v * 2.0
    self.weight.add_(1.0)
    return y.sum() + self.frozen.sum() + self.weight.sum()
)");
  auto graph = forwardGraph(m);
  std::vector<StateBuffer> state = findStateBuffers(*graph);
  // Neither the buffer only read nor the parameter written is state.
  EXPECT_EQ(paths(state), (std::vector<std::string>{"steps", "child.cache"}));
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(kinds(state[0]), (std::vector<std::string>{"aten::add_"}));
  EXPECT_EQ(kinds(state[1]),
            (std::vector<std::string>{"aten::index_copy_", "aten::view",
                                      "aten::mul"}));
}

TEST(StateBuffersTest, LaterReadsOfWhatIsCopiedInAreTouches) {
  auto m = makeModule(R"(
def forward(self, x):
    new = self.frozen + x
    self.frozen.copy_(new)
    return new * 2.0
)");
  auto graph = forwardGraph(m);
  std::vector<StateBuffer> state = findStateBuffers(*graph);
  ASSERT_EQ(paths(state), (std::vector<std::string>{"frozen"}));
  EXPECT_EQ(kinds(state[0]), (std::vector<std::string>{
                                 "aten::add", "aten::copy_", "aten::mul"}));
}

TEST(StateBuffersTest, NoModuleNoState) {
  auto graph = std::make_shared<torch::jit::Graph>();
  graph->addInput("x")->setType(c10::TensorType::get());
  graph->registerOutput(graph->inputs()[0]);
  EXPECT_TRUE(findStateBuffers(*graph).empty());
}

TEST(ItemGraphTest, KeepsEveryTouchOfStateInOneStage) {
  auto m = makeModule(R"(
def forward(self, x, pos):
    h = x * 3.0
    self.child.cache.index_copy_(0, pos, h)
    q = x + 1.0
    y = q * self.child.cache
    return y + 1.0
)");
  auto items = ItemGraph::build(forwardGraph(m));
  ASSERT_TRUE(static_cast<bool>(items)) << llvm::toString(items.takeError());
  ASSERT_EQ(items->stateSpans().size(), 1u);
  const StateSpan &span = items->stateSpans()[0];
  EXPECT_EQ(span.path, "child.cache");
  std::vector<std::string> itemKinds;
  for (size_t i = 0; i < items->size(); ++i)
    itemKinds.push_back(items->item(i)->kind().toQualString());
  ASSERT_EQ(itemKinds,
            (std::vector<std::string>{"aten::mul", "aten::index_copy_",
                                      "aten::add", "aten::mul", "aten::add"}));
  EXPECT_EQ(span.first, 1u);
  EXPECT_EQ(span.last, 3u);
  EXPECT_TRUE(items->canCutBefore(1));
  EXPECT_EQ(items->stateSplitBy(1), nullptr);
  for (size_t i : {2u, 3u}) {
    EXPECT_EQ(items->stateSplitBy(i), &span);
    EXPECT_EQ(items->cutBlocker(i),
              "buffer 'child.cache' is written in place and read on both "
              "sides (state lives in one stage)");
  }
  EXPECT_TRUE(items->canCutBefore(4));
}
