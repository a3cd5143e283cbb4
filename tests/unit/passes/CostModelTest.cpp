//===- tests/unit/passes/CostModelTest.cpp - Cost model names -------------===//
#include "passes/CostModel.h"

#include <gtest/gtest.h>

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
