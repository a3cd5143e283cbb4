//===- tests/unit/runtime/run/CopyRuleTest.cpp - Stages that write inputs -===//
//
// Tests that a stage writing its input in place never changes what anyone
// else sees: the caller's model input (after verify's runSequentially and
// after a pipeline run, whose microbatches are views of it) and a stage
// output that is also a model output. The stages are TorchScript modules
// defined here, so the test does not depend on the generated models.
//
//===----------------------------------------------------------------------===//
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/Stage.h"
#include "lib/ValueWalk.h"
#include "runtime/run/Pipeline.h"
#include "tests/unit/runtime/FreePort.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/script.h>

using namespace ppc;

namespace {
using ppc::testing::freePort;

/// Two stages that write their inputs in place:
///   stage 0: a = (x.add_(1)) * 2          x: model input, mutated
///   stage 1: b = (a.mul_(10)) + 1         a: also a model output, mutated
/// Model outputs (a, b). With x = [0, 1, 2, 3]^T: a = 2x + 2, b = 20x + 21.
class CopyRuleTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-copy-rule", dir));
    writeStage("stage0.pt", R"(
def forward(self, x: Tensor):
    x.add_(1.0)
    return (x * 2.0,)
)");
    writeStage("stage1.pt", R"(
def forward(self, a: Tensor):
    a.mul_(10.0)
    return (a + 1.0,)
)");
    manifest.modelInputs.push_back({"x", ValueKind::Tensor, {}, {}});
    for (int s = 0; s < 2; ++s) {
      StageInfo info;
      info.index = s;
      info.file = "stage" + std::to_string(s) + ".pt";
      auto sha = sha256File(path(info.file));
      ASSERT_TRUE(static_cast<bool>(sha));
      info.sha256 = *sha;
      StageInput in;
      in.name = s == 0 ? "x" : "a";
      in.source =
          s == 0 ? ValueRef::fromModelInput(0) : ValueRef::fromStage(0, 0);
      in.mutated = true;
      info.inputs.push_back(in);
      StageOutput out;
      out.name = s == 0 ? "a" : "b";
      if (s == 0)
        out.consumers = {1};
      info.outputs.push_back(out);
      manifest.stages.push_back(info);
    }
    manifest.modelOutputs = {ValueRef::fromStage(0, 0),
                             ValueRef::fromStage(1, 0)};
    manifest.outputIsTuple = true;
    manifest.costModel = "nodes";
    ASSERT_FALSE(static_cast<bool>(manifest.verify()));
    ASSERT_FALSE(static_cast<bool>(manifest.save(path("manifest.json"))));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void writeStage(llvm::StringRef name, const std::string &code) {
    torch::jit::Module m("Stage");
    m.define(code);
    m.save(path(name));
  }
  void expectOutputs(const std::vector<c10::IValue> &outputs) {
    ASSERT_EQ(outputs.size(), 2u);
    at::Tensor x = at::arange(4, at::kFloat).view({4, 1});
    EXPECT_TRUE(at::equal(outputs[0].toTensor(), x * 2 + 2))
        << outputs[0].toTensor();
    EXPECT_TRUE(at::equal(outputs[1].toTensor(), x * 20 + 21))
        << outputs[1].toTensor();
  }

  llvm::SmallString<128> dir;
  Manifest manifest;
};
} // namespace

TEST_F(CopyRuleTest, RunSequentiallyKeepsTheCallersInput) {
  at::Tensor x = at::arange(4, at::kFloat).view({4, 1});
  at::Tensor original = x.clone();
  auto outputs = runSequentially(manifest, dir, {x});
  ASSERT_TRUE(static_cast<bool>(outputs))
      << llvm::toString(outputs.takeError());
  EXPECT_TRUE(at::equal(x, original)) << x;
  expectOutputs(*outputs);
}

TEST_F(CopyRuleTest, PipelineRunKeepsTheCallersInput) {
  LaunchEnv env;
  env.masterPort = freePort();
  RunOptions options;
  options.microbatches = 2;
  options.useMetaCache = false;
  options.timeout = std::chrono::milliseconds(20000);
  options.threads = 1;
  auto pipeline = Pipeline::create(path("manifest.json"), env, options);
  ASSERT_TRUE(static_cast<bool>(pipeline))
      << llvm::toString(pipeline.takeError());
  at::Tensor x = at::arange(4, at::kFloat).view({4, 1});
  at::Tensor original = x.clone();
  auto outputs = (*pipeline)->run({x});
  ASSERT_TRUE(static_cast<bool>(outputs))
      << llvm::toString(outputs.takeError());
  EXPECT_TRUE(at::equal(x, original)) << x;
  expectOutputs(*outputs);
  EXPECT_FALSE(static_cast<bool>((*pipeline)->finish()));
}

TEST(CopyRule, CloneValueCopiesEveryKindDeeply) {
  c10::impl::GenericList generic(c10::TensorType::get());
  generic.push_back(at::zeros({2}));
  c10::List<at::Tensor> typed({at::zeros({2})});
  std::vector<std::pair<c10::IValue, ValueKind>> cases{
      {at::zeros({2}), ValueKind::Tensor},
      {generic, ValueKind::TensorList},
      {typed, ValueKind::TensorList},
      {c10::ivalue::Tuple::create({at::zeros({2})}), ValueKind::TensorTuple}};
  for (auto &[value, kind] : cases) {
    auto copy = cloneValue(value, kind);
    ASSERT_TRUE(static_cast<bool>(copy));
    ASSERT_TRUE(hasKind(*copy, kind)) << kindName(kind).str();
    for (const at::Tensor &t : tensorsOf(*copy, kind))
      t.fill_(7);
    for (const at::Tensor &t : tensorsOf(value, kind))
      EXPECT_TRUE(at::equal(t, at::zeros({2}))) << kindName(kind).str();
  }
  c10::List<int64_t> ints({1, 2});
  auto copy = cloneValue(ints, ValueKind::IntList);
  ASSERT_TRUE(static_cast<bool>(copy));
  copy->toIntList().set(0, 9);
  EXPECT_EQ(ints.get(0), 1);
}

TEST(CopyRule, WhoGetsACopy) {
  at::Tensor t = at::zeros({1});
  auto shares = [&](StageInput in, bool otherUses) {
    auto v = stageArgument(in, t, otherUses);
    EXPECT_TRUE(static_cast<bool>(v));
    return v->toTensor().is_same(t);
  };
  StageInput reads;
  reads.source = ValueRef::fromStage(0, 0);
  StageInput writes = reads;
  writes.mutated = true;
  StageInput writesModelInput = writes;
  writesModelInput.source = ValueRef::fromModelInput(0);
  EXPECT_TRUE(shares(reads, true));
  EXPECT_TRUE(shares(writes, false));
  EXPECT_FALSE(shares(writes, true));
  EXPECT_FALSE(shares(writesModelInput, false));
}
