//===- tests/unit/lib/PartitionPlanTest.cpp - ItemGraph + plan tests ------===//
#include "lib/PartitionPlan.h"
#include "lib/ItemGraph.h"

#include <torch/csrc/jit/ir/irparser.h>

#include <gtest/gtest.h>

using namespace ppc;

namespace {
std::shared_ptr<torch::jit::Graph> parse(const std::string &text) {
  auto g = std::make_shared<torch::jit::Graph>();
  std::unordered_map<std::string, torch::jit::Value *> names;
  torch::jit::parseIR(text, g.get(), names);
  for (auto &[name, v] : names)
    if (!isdigit(static_cast<unsigned char>(name[0])))
      v->setDebugName(name);
  return g;
}

const char *kDiamond = R"IR(
graph(%x : Tensor, %w : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::add(%a, %w, %one)
  %e : Tensor = aten::add(%c, %d, %one)
  %r : (Tensor, Tensor) = prim::TupleConstruct(%e, %b)
  return (%r)
)IR";

std::vector<std::string> names(const std::vector<torch::jit::Value *> &values) {
  std::vector<std::string> out;
  for (auto *v : values)
    out.push_back(v->debugName());
  return out;
}
} // namespace

TEST(ItemGraphTest, ClassifiesItemsAndOutputs) {
  auto items = ItemGraph::build(parse(kDiamond));
  ASSERT_TRUE(static_cast<bool>(items)) << llvm::toString(items.takeError());
  EXPECT_EQ(items->size(), 5u); // relu, sigmoid, tanh, add, add
  EXPECT_TRUE(items->outputIsTuple());
  EXPECT_EQ(names(items->modelOutputs()), (std::vector<std::string>{"e", "b"}));
  EXPECT_EQ(names(items->modelInputs()), (std::vector<std::string>{"x", "w"}));
  for (size_t i = 1; i < items->size(); ++i)
    EXPECT_TRUE(items->canCutBefore(i)) << i;
}

TEST(PartitionPlanTest, SkipEdgesGoDirectlyAndModelInputsComeFirst) {
  auto items = ItemGraph::build(parse(kDiamond));
  ASSERT_TRUE(static_cast<bool>(items));
  // stage 0: relu | stage 1: sigmoid, tanh | stage 2: add, add
  auto plan = PartitionPlan::fromStarts(*items, {0, 1, 3});
  ASSERT_TRUE(static_cast<bool>(plan));
  ASSERT_FALSE(static_cast<bool>(plan->verify()));
  EXPECT_EQ(names(plan->outputs(0)), (std::vector<std::string>{"a"}));
  EXPECT_EQ(plan->consumers(plan->outputs(0)[0]), (std::vector<int>{1, 2}));
  EXPECT_EQ(names(plan->outputs(1)), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(plan->consumers(plan->outputs(1)[0]),
            (std::vector<int>{})); // model output only
  EXPECT_EQ(names(plan->inputs(2)), (std::vector<std::string>{"w", "a", "c"}));
}

TEST(PartitionPlanTest, RejectsEmptyStages) {
  auto items = ItemGraph::build(parse(kDiamond));
  ASSERT_TRUE(static_cast<bool>(items));
  auto plan = PartitionPlan::fromStarts(*items, {0, 2, 2});
  ASSERT_FALSE(static_cast<bool>(plan));
  EXPECT_EQ(llvm::toString(plan.takeError()), "stage 1 would be empty");
}

TEST(ItemGraphTest, BlocksCutsThatWouldSendADict) {
  auto items = ItemGraph::build(parse(R"IR(
graph(%x : Tensor):
  %k : str = prim::Constant[value="k"]()
  %d : Dict(str, Tensor) = prim::DictConstruct(%k, %x)
  %y : Tensor = aten::__getitem__(%d, %k)
  %z : Tensor = aten::relu(%y)
  return (%z)
)IR"));
  ASSERT_TRUE(static_cast<bool>(items));
  ASSERT_EQ(items->size(), 3u);
  EXPECT_FALSE(items->canCutBefore(1));
  EXPECT_EQ(
      items->cutBlocker(1).value_or(""),
      "value 'd' of type Dict[str, Tensor] cannot cross a stage boundary");
  EXPECT_TRUE(items->canCutBefore(2));
  // A plan cutting there fails verification with the same reason.
  auto plan = PartitionPlan::fromStarts(*items, {0, 1});
  ASSERT_TRUE(static_cast<bool>(plan));
  EXPECT_EQ(llvm::toString(plan->verify()),
            "plan: stage 1 cannot begin there: value 'd' of type Dict[str, "
            "Tensor] cannot "
            "cross a stage boundary");
}

TEST(ItemGraphTest, KeepsInPlaceWriteWithLaterReads) {
  // %v is a view of %a; writing through it changes %a, which is read later:
  // the write and that read must share a stage.
  auto items = ItemGraph::build(parse(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %a : Tensor = aten::mul(%x, %x)
  %v : Tensor = aten::select(%a, %zero, %zero)
  %w : Tensor = aten::relu_(%v)
  %s : Tensor = aten::sigmoid(%a)
  return (%s)
)IR"));
  ASSERT_TRUE(static_cast<bool>(items));
  ASSERT_EQ(items->size(), 4u);
  EXPECT_FALSE(items->canCutBefore(3)); // between relu_ and the read of %a
}

// Module paths as the inliner records them (passes/InlineCalls.cpp): one
// scope per node, named by the full instance path.
TEST(PartitionPlanTest, StagesNameTheirModulesAndValuesTheirOrigin) {
  auto g = parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::relu(%a)
  %c : Tensor = aten::relu_(%b)
  %d : Tensor = aten::sigmoid(%c)
  %e : Tensor = aten::tanh(%d)
  %f : Tensor = aten::neg(%e)
  return (%f)
)IR");
  auto root = c10::make_intrusive<torch::jit::Scope>();
  const char *paths[] = {"stem",     "layer1.0.relu", "layer1.0.relu",
                         "layer1.1", "layer10",       ""};
  size_t k = 0;
  for (torch::jit::Node *n : g->nodes()) {
    if (*paths[k] != '\0') // "": code of the top-level forward
      n->setScope(root->push(c10::Symbol::scope(paths[k])));
    ++k;
  }
  auto items = ItemGraph::build(g);
  ASSERT_TRUE(static_cast<bool>(items)) << llvm::toString(items.takeError());
  auto plan = PartitionPlan::fromStarts(*items, {0, 2, 4});
  ASSERT_TRUE(static_cast<bool>(plan));
  // layer1.0.relu runs in stages 0 and 1, so neither holds layer1 or
  // layer1.0 whole; layer10 is not part of layer1.
  EXPECT_EQ(stageModules(*plan, 0),
            (std::vector<std::string>{"stem", "layer1.0.relu"}));
  EXPECT_EQ(stageModules(*plan, 1),
            (std::vector<std::string>{"layer1.0.relu", "layer1.1"}));
  EXPECT_EQ(stageModules(*plan, 2), (std::vector<std::string>{"layer10"}));

  auto labels = valueLabels(*items);
  std::vector<std::string> got;
  for (size_t i = 0; i < items->size(); ++i)
    got.push_back(labels.at(items->item(i)->output()));
  // relu_ is named relu; the second relu of one module gets _1.
  EXPECT_EQ(got, (std::vector<std::string>{
                     "stem:relu", "layer1.0.relu:relu", "layer1.0.relu:relu_1",
                     "layer1.1:sigmoid", "layer10:tanh", "neg"}));
}
