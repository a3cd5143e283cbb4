//===- tests/unit/lib/TorchScriptStageTest.cpp - TorchScript stages -------===//
#include "lib/TorchScriptStage.h"

#include <torch/script.h>

#include <gtest/gtest.h>

using namespace ppc;

namespace {
/// forward(x) adds x to buffer `child.cache` in place and returns it.
TorchScriptStage makeStage() {
  torch::jit::Module child("child");
  child.register_buffer("cache", torch::zeros({2}));
  torch::jit::Module m("m");
  m.register_module("child", child);
  m.register_buffer("steps", torch::zeros({}, torch::kLong));
  m.register_parameter("weight", torch::ones({2}), /*requires_grad=*/false);
  m.define(R"(
def forward(self, x):
    self.steps.add_(1)
    self.child.cache.add_(x)
    return self.child.cache * self.weight
)");
  return TorchScriptStage(m);
}
} // namespace

TEST(TorchScriptStageTest, SetBufferSwapsTheTensorWithoutCopying) {
  TorchScriptStage stage = makeStage();
  at::Tensor a = torch::zeros({2}), b = torch::full({2}, 10.0);
  stage.setBuffer("child.cache", a);
  stage.forward({torch::ones({2})});
  stage.setBuffer("child.cache", b);
  stage.forward({torch::ones({2})});
  stage.setBuffer("child.cache", a);
  stage.forward({torch::ones({2})});
  EXPECT_TRUE(a.equal(torch::full({2}, 2.0)));
  EXPECT_TRUE(b.equal(torch::full({2}, 11.0)));
  EXPECT_TRUE(stage.tensorAt("child.cache").is_same(a));

  at::Tensor steps = torch::full({}, 5, torch::kLong);
  stage.setBuffer("steps", steps);
  stage.forward({torch::ones({2})});
  EXPECT_EQ(steps.item<int64_t>(), 6);
}

TEST(TorchScriptStageTest, SetBufferRefusesWhatIsNoBuffer) {
  TorchScriptStage stage = makeStage();
  EXPECT_THROW(stage.setBuffer("weight", torch::zeros({2})), c10::Error);
  EXPECT_THROW(stage.setBuffer("child", torch::zeros({2})), c10::Error);
  EXPECT_THROW(stage.setBuffer("child.missing", torch::zeros({2})), c10::Error);
  EXPECT_THROW(stage.setBuffer("nothing.cache", torch::zeros({2})),
               std::exception);
}
