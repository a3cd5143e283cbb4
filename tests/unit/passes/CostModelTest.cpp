//===- tests/unit/passes/CostModelTest.cpp - Cost model names and flops ---===//
#include "passes/CostModel.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

using namespace ppc;

TEST(CostModelTest, NamesRoundTrip) {
  std::vector<std::string> names;
  for (CostKind kind : kAllCostKinds) {
    names.push_back(costKindName(kind).str());
    EXPECT_EQ(parseCostKind(costKindName(kind)), kind) << names.back();
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"params", "flops", "nodes", "profile"}));
}

TEST(CostModelTest, OtherNamesAreNoKind) {
  for (const char *name : {"", "Params", "bytes", "0", "2", "nodes "})
    EXPECT_EQ(parseCostKind(name), std::nullopt) << name;
}

// The flops model counts what control flow runs on the example input: the
// taken branch of a prim::If, a `for` loop's body once per iteration; a
// `while` loop it cannot unroll is left uncounted and says so.
const char *kControlFlow = R"IR(
graph(%x : Tensor, %w : Tensor, %c : bool):
  %n : int = prim::Constant[value=3]()
  %t : bool = prim::Constant[value=1]()
  %max : int = prim::Constant[value=9223372036854775807]()
  %lim : int = prim::Constant[value=2]()
  %a : Tensor = aten::relu(%x)
  %y : Tensor = prim::If(%c)
    block0():
      %m : Tensor = aten::mm(%a, %w)
      -> (%m)
    block1():
      -> (%a)
  %z : Tensor = prim::Loop(%n, %t, %y)
    block0(%i : int, %acc : Tensor):
      %p : Tensor = aten::mm(%acc, %w)
      -> (%t, %p)
  %u : Tensor = prim::Loop(%max, %t, %z)
    block0(%j : int, %acc2 : Tensor):
      %q : Tensor = aten::mm(%acc2, %w)
      %go : bool = aten::lt(%j, %lim)
      -> (%go, %q)
  return (%u)
)IR";

static std::vector<int64_t> flopsOf(bool branch,
                                    std::vector<std::string> &uncounted) {
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(kControlFlow, g.get());
  auto items = ItemGraph::build(g);
  if (!items) {
    ADD_FAILURE() << llvm::toString(items.takeError());
    return {};
  }
  std::vector<c10::IValue> example{at::ones({4, 8}), at::ones({8, 8}), branch};
  auto costs =
      itemCosts(*items, nullptr, CostKind::Flops, &example, &uncounted);
  if (!costs) {
    ADD_FAILURE() << llvm::toString(costs.takeError());
    return {};
  }
  return *costs;
}

TEST(CostModelTest, FlopsCountTheTakenBranchAndEveryIteration) {
  std::vector<std::string> uncounted;
  // relu: 32 outputs; mm [4,8]x[8,8]: 2*32*8 = 512 per product.
  EXPECT_EQ(flopsOf(true, uncounted),
            (std::vector<int64_t>{32, 512, 3 * 512, 32}));
  EXPECT_EQ(uncounted,
            (std::vector<std::string>{
                "", "", "",
                "aten::mm in a prim::Loop whose trip count the example run "
                "does not fix"}));
  // The other branch returns a value from outside it: nothing to count.
  EXPECT_EQ(flopsOf(false, uncounted),
            (std::vector<int64_t>{32, 1, 3 * 512, 32}));
}
