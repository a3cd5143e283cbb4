//===- tests/unit/lib/ManifestTest.cpp - Manifest JSON tests --------------===//
#include "lib/Manifest.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace ppc;

namespace {
Manifest twoStages() {
  Manifest m;
  m.sourcePath = "/m.pt";
  m.sourceSize = 10;
  m.sourceSha256 = "ab";
  m.costModel = "params";
  m.modelInputs = {{"x", ValueKind::Tensor}};
  StageInfo s0, s1;
  s0.index = 0;
  s0.file = "stage_0.pt";
  s0.inputs = {{"x", ValueKind::Tensor, ValueRef::fromModelInput(0), false}};
  s0.outputs = {{"h", ValueKind::Tensor, {1}}, {"n", ValueKind::Int, {1}}};
  s1.index = 1;
  s1.file = "stage_1.pt";
  s1.beginsAt = "layer2";
  s1.inputs = {{"h", ValueKind::Tensor, ValueRef::fromStage(0, 0), true},
               {"n", ValueKind::Int, ValueRef::fromStage(0, 1), false}};
  s1.outputs = {{"y", ValueKind::TensorTuple, {}}};
  m.stages = {s0, s1};
  m.modelOutputs = {ValueRef::fromStage(1, 0)};
  m.tiedParameters = {{{{0, "embed.weight"}, {1, "head.weight"}}, 64}};
  return m;
}

std::string errorOf(const llvm::json::Value &json) {
  auto m = Manifest::fromJSON(json);
  if (m)
    return "";
  return llvm::toString(m.takeError());
}
} // namespace

TEST(ManifestTest, RoundTripsThroughJSON) {
  Manifest m = twoStages();
  auto back = Manifest::fromJSON(m.toJSON());
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->toJSON(), m.toJSON());
  EXPECT_EQ(back->stages[1].inputs[0].source, ValueRef::fromStage(0, 0));
  EXPECT_TRUE(back->stages[1].inputs[0].mutated);
  EXPECT_EQ(back->stages[1].beginsAt, "layer2");
  EXPECT_EQ(back->stages[1].outputs[0].kind, ValueKind::TensorTuple);
  EXPECT_EQ(back->tiedParameters[0].uses[1].path, "head.weight");
}

TEST(ManifestTest, SavesAtomicallyAndLoads) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-manifest", dir));
  std::string path = std::string(dir) + "/manifest.json";
  ASSERT_FALSE(static_cast<bool>(twoStages().save(path)));
  auto loaded = Manifest::load(path);
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->stages.size(), 2u);
  llvm::sys::fs::remove_directories(dir);
}

TEST(ManifestTest, MissingFieldNamesItsPath) {
  llvm::json::Value json = twoStages().toJSON();
  json.getAsObject()
      ->getArray("stages")
      ->back()
      .getAsObject()
      ->getArray("inputs")
      ->front()
      .getAsObject()
      ->erase("source");
  EXPECT_EQ(errorOf(json), "manifest: stages[1].inputs[0]: missing 'source'");
}

TEST(ManifestTest, RejectsUnknownTypeAndVersion) {
  llvm::json::Value json = twoStages().toJSON();
  (*json.getAsObject()->getArray("inputs"))[0].getAsObject()->insert(
      {"type", "Dict"});
  (*(*json.getAsObject()->getArray("inputs"))[0].getAsObject())["type"] =
      "Dict";
  EXPECT_EQ(errorOf(json), "manifest: inputs[0]: unknown type 'Dict'");
  llvm::json::Value v2 = twoStages().toJSON();
  (*v2.getAsObject())["schema_version"] = 2;
  EXPECT_EQ(
      errorOf(v2),
      "manifest: unsupported schema_version 2 (this ppc reads version 1)");
}

TEST(ManifestTest, RejectsInputFromALaterStage) {
  Manifest m = twoStages();
  m.stages[0].inputs[0].source = ValueRef::fromStage(1, 0);
  EXPECT_EQ(
      llvm::toString(m.verify()),
      "manifest: stages[0].inputs[0] refers to a missing output 0 of stage 1");
}

TEST(ManifestTest, RejectsConsumerListThatDisagreesWithInputs) {
  Manifest m = twoStages();
  m.stages[0].outputs[1].consumers = {};
  EXPECT_EQ(
      llvm::toString(m.verify()),
      "manifest: stages[1].inputs[1] takes output 1 of stage 0, which does not "
      "list stage 1 as a consumer");
}
