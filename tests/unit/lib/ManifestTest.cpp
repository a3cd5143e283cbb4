//===- tests/unit/lib/ManifestTest.cpp - Manifest JSON tests --------------===//
//
// The fixtures under tests/unit/fixtures/manifest/ are written by hand from
// docs/manifest.md, so reading and writing are checked against the
// documented format rather than against each other.
//
//===----------------------------------------------------------------------===//
#include "lib/Manifest.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

using namespace ppc;
using llvm::json::Object;
using llvm::json::Value;

namespace {
std::string fixturePath(llvm::StringRef name) {
  return (llvm::Twine(PPC_FIXTURES_DIR) + "/manifest/" + name).str();
}

Value fixture(llvm::StringRef name) {
  auto buffer = llvm::MemoryBuffer::getFile(fixturePath(name));
  EXPECT_TRUE(static_cast<bool>(buffer)) << fixturePath(name);
  if (!buffer)
    return nullptr;
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json) {
    ADD_FAILURE() << llvm::toString(json.takeError());
    return nullptr;
  }
  return std::move(*json);
}

Manifest twoStages() {
  Manifest m;
  m.sourcePath = "/m.pt";
  m.sourceSize = 10;
  m.sourceSha256 = "ab";
  m.costModel = "params";
  m.modelInputs = {{"x", ValueKind::Tensor, {-1, 8}, {}}};
  StageInfo s0, s1;
  s0.index = 0;
  s0.file = "stage_0.pt";
  s0.inputs = {{"x", ValueKind::Tensor, ValueRef::fromModelInput(0), false}};
  s0.outputs = {{"h", ValueKind::Tensor, {1}, "layer1:relu", {-1, 16}},
                {"n", ValueKind::Int, {1}, "", {}}};
  s0.modules = {"conv1", "layer1"};
  s1.index = 1;
  s1.file = "stage_1.pt";
  s1.beginsAt = "layer2";
  s1.inputs = {{"h", ValueKind::Tensor, ValueRef::fromStage(0, 0), true},
               {"n", ValueKind::Int, ValueRef::fromStage(0, 1), false}};
  s1.outputs = {{"y", ValueKind::TensorTuple, {}, "", {}}};
  m.stages = {s0, s1};
  m.modelOutputs = {ValueRef::fromStage(1, 0)};
  m.tiedParameters = {{{{0, "embed.weight"}, {1, "head.weight"}}, 64}};
  return m;
}

std::string errorOf(const Value &json) {
  auto m = Manifest::fromJSON(json);
  if (m)
    return "";
  return llvm::toString(m.takeError());
}

Object &obj(Value &v) { return *v.getAsObject(); }
Object &stage(Value &m, size_t i) {
  return obj((*obj(m).getArray("stages"))[i]);
}
Object &stageInput(Value &m, size_t i, size_t j) {
  return obj((*stage(m, i).getArray("inputs"))[j]);
}
Object &stageOutput(Value &m, size_t i, size_t j) {
  return obj((*stage(m, i).getArray("outputs"))[j]);
}

/// A fresh directory, removed with everything in it at the end of a test.
struct TempDir {
  TempDir() {
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-manifest", dir));
  }
  ~TempDir() { llvm::sys::fs::remove_directories(dir); }
  std::string path(llvm::StringRef name) const {
    return (dir + "/" + name).str();
  }
  std::string write(llvm::StringRef name, llvm::StringRef text) const {
    std::error_code ec;
    llvm::raw_fd_ostream os(path(name), ec);
    EXPECT_FALSE(ec);
    os << text;
    return path(name);
  }
  llvm::SmallString<128> dir;
};

std::string loadError(llvm::StringRef path) {
  auto m = Manifest::load(path);
  if (m)
    return "";
  return llvm::toString(m.takeError());
}
} // namespace

TEST(ManifestTest, ReadsTheDocumentedExampleFieldByField) {
  std::string sha;
  auto m = Manifest::load(fixturePath("decoder.json"), &sha);
  ASSERT_TRUE(static_cast<bool>(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->schemaVersion, 2);
  EXPECT_EQ(m->format, "torchscript");
  EXPECT_EQ(m->sourcePath, "/abs/path/decoder.pt");
  EXPECT_EQ(m->sourceSize, 253062u);
  EXPECT_EQ(m->sourceSha256,
            "4e182c5f0a6b7d8e9f00112233445566778899aabbccddeeff00112233445566");
  EXPECT_EQ(m->costModel, "params");
  ASSERT_EQ(m->modelInputs.size(), 1u);
  EXPECT_EQ(m->modelInputs[0].name, "ids.1");
  EXPECT_EQ(m->modelInputs[0].kind, ValueKind::Tensor);
  ASSERT_EQ(m->stages.size(), 2u);

  const StageInfo &s0 = m->stages[0];
  EXPECT_EQ(s0.index, 0);
  EXPECT_EQ(s0.file, "stage_0.pt");
  EXPECT_EQ(s0.sha256,
            "0000000000000000000000000000000000000000000000000000000000000001");
  EXPECT_EQ(s0.parameterCount, 29120);
  EXPECT_EQ(s0.parameterBytes, 116480);
  EXPECT_EQ(s0.bufferBytes, 0);
  EXPECT_EQ(s0.predictedCost, 116480.0);
  EXPECT_EQ(s0.beginsAt, "");
  EXPECT_FALSE(s0.meta.has_value());
  ASSERT_EQ(s0.inputs.size(), 1u);
  EXPECT_EQ(s0.inputs[0].name, "ids.1");
  EXPECT_EQ(s0.inputs[0].kind, ValueKind::Tensor);
  EXPECT_EQ(s0.inputs[0].source, ValueRef::fromModelInput(0));
  EXPECT_FALSE(s0.inputs[0].mutated);
  ASSERT_EQ(s0.outputs.size(), 2u);
  EXPECT_EQ(s0.outputs[0].name, "mask.1");
  EXPECT_EQ(s0.outputs[0].consumers, std::vector<int>{1});
  EXPECT_EQ(s0.outputs[1].name, "x1.1");
  EXPECT_EQ(s0.outputs[1].kind, ValueKind::Tensor);
  EXPECT_EQ(s0.outputs[0].label, "");
  EXPECT_EQ(s0.outputs[0].displayName(), "mask.1");
  EXPECT_EQ(s0.outputs[1].label, "blocks.1:add_1");
  EXPECT_EQ(s0.outputs[1].displayName(), "blocks.1:add_1");
  EXPECT_EQ(s0.modules,
            (std::vector<std::string>{"embed", "blocks.0", "blocks.1"}));

  const StageInfo &s1 = m->stages[1];
  EXPECT_EQ(s1.index, 1);
  EXPECT_EQ(s1.file, "stage_1.pt");
  EXPECT_EQ(s1.beginsAt, "blocks.2");
  EXPECT_FALSE(s1.modules.has_value()); // not recorded: older manifests
  EXPECT_EQ(s1.parameterCount, 33216);
  EXPECT_EQ(s1.parameterBytes, 132864);
  EXPECT_EQ(s1.bufferBytes, 256);
  EXPECT_EQ(s1.predictedCost, 132864.5);
  ASSERT_EQ(s1.inputs.size(), 2u);
  EXPECT_EQ(s1.inputs[0].source, ValueRef::fromStage(0, 0));
  EXPECT_FALSE(s1.inputs[0].mutated);
  EXPECT_EQ(s1.inputs[1].name, "x1.1");
  EXPECT_EQ(s1.inputs[1].source, ValueRef::fromStage(0, 1));
  EXPECT_TRUE(s1.inputs[1].mutated);
  ASSERT_EQ(s1.outputs.size(), 1u);
  EXPECT_EQ(s1.outputs[0].name, "%89");
  EXPECT_TRUE(s1.outputs[0].consumers.empty());
  ASSERT_TRUE(s1.meta.has_value());
  EXPECT_EQ(*s1.meta, Value(Object{{"note", "carried through unchanged"}}));

  EXPECT_EQ(m->modelOutputs, std::vector<ValueRef>{ValueRef::fromStage(1, 0)});
  EXPECT_FALSE(m->outputIsTuple);
  ASSERT_EQ(m->tiedParameters.size(), 1u);
  EXPECT_EQ(m->tiedParameters[0].bytes, 12800);
  ASSERT_EQ(m->tiedParameters[0].uses.size(), 2u);
  EXPECT_EQ(m->tiedParameters[0].uses[0].stage, 0);
  EXPECT_EQ(m->tiedParameters[0].uses[0].path, "embed.weight");
  EXPECT_EQ(m->tiedParameters[0].uses[1].stage, 1);
  EXPECT_EQ(m->tiedParameters[0].uses[1].path, "head.weight");
}

TEST(ManifestTest, ReadsOptionalFieldsAsTheirDefaults) {
  std::string sha;
  auto m = Manifest::load(fixturePath("minimal.json"), &sha);
  ASSERT_TRUE(static_cast<bool>(m)) << llvm::toString(m.takeError());
  // minimal.json is schema version 1, which predates the format field.
  EXPECT_EQ(m->format, "torchscript");
  EXPECT_EQ(m->costModel, "nodes");
  EXPECT_EQ(m->modelInputs[0].kind, ValueKind::IntList);
  EXPECT_EQ(m->stages[0].file, "sub/s0.pt");
  EXPECT_EQ(m->stages[0].predictedCost, 3.0);
  EXPECT_TRUE(m->stages[0].outputs.empty());
  EXPECT_EQ(m->modelOutputs,
            std::vector<ValueRef>{ValueRef::fromModelInput(0)});
  EXPECT_FALSE(m->outputIsTuple);
  EXPECT_TRUE(m->tiedParameters.empty());
  // `sha256sum tests/unit/fixtures/manifest/minimal.json`: the digest is of
  // the bytes that were parsed.
  EXPECT_EQ(sha,
            "c0eea42a6645f42f9e5297287e6788db23a44e89da39b662f73ee94049404c02");
}

TEST(ManifestTest, DescribesModulesShorteningIndexRuns) {
  EXPECT_EQ(describeModules({}), "");
  EXPECT_EQ(describeModules({"conv1", "bn1", "layer1", "layer2.0"}),
            "conv1, bn1, layer1, layer2.0");
  EXPECT_EQ(describeModules({"features.0", "features.1", "features.2",
                             "features.3", "classifier"}),
            "features.0 ... features.3, classifier");
  // Two in a row stay listed; a gap or another parent ends a run.
  EXPECT_EQ(describeModules({"a.0", "a.1", "b.2", "b.3", "b.4", "b.6", "c.7",
                             "c.8", "c.9"}),
            "a.0, a.1, b.2 ... b.4, b.6, c.7 ... c.9");
}

TEST(ManifestTest, RejectsModulesThatAreNotStrings) {
  Value json = fixture("decoder.json");
  stage(json, 0)["modules"] = llvm::json::Array{1};
  EXPECT_EQ(errorOf(json), "expected string at manifest.stages[0].modules[0]");
}

TEST(ManifestTest, WritesTheDocumentedLayout) {
  EXPECT_EQ(twoStages().toJSON(), fixture("two_stages.expected.json"));
}

TEST(ManifestTest, RoundTripsThroughJSON) {
  Manifest m = twoStages();
  auto back = Manifest::fromJSON(m.toJSON());
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->toJSON(), m.toJSON());
  EXPECT_EQ(back->stages[1].inputs[0].source, ValueRef::fromStage(0, 0));
  EXPECT_TRUE(back->stages[1].inputs[0].mutated);
  EXPECT_EQ(back->stages[1].outputs[0].kind, ValueKind::TensorTuple);
}

TEST(ManifestTest, SavesAtomicallyAndLoads) {
  TempDir d;
  std::string path = d.path("manifest.json");
  ASSERT_FALSE(static_cast<bool>(twoStages().save(path)));
  auto loaded = Manifest::load(path);
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->toJSON(), fixture("two_stages.expected.json"));
}

TEST(ManifestTest, MissingFieldNamesItsPath) {
  Value json = fixture("decoder.json");
  stageInput(json, 1, 0).erase("source");
  EXPECT_EQ(errorOf(json),
            "missing value at manifest.stages[1].inputs[0].source");
  json = fixture("decoder.json");
  stageOutput(json, 0, 1)["consumers"] = "1";
  EXPECT_EQ(errorOf(json),
            "expected array at manifest.stages[0].outputs[1].consumers");
}

TEST(ManifestTest, RejectsUnknownTypeAndVersion) {
  Value json = fixture("decoder.json");
  obj((*obj(json).getArray("inputs"))[0])["type"] = "Dict";
  EXPECT_EQ(errorOf(json),
            "expected one of Tensor, Tensor[], Tuple[Tensor], int, float, "
            "bool, int[] at manifest.inputs[0].type");
  Value v3 = fixture("decoder.json");
  obj(v3)["schema_version"] = 3;
  EXPECT_EQ(errorOf(v3), "manifest: unsupported schema_version 3 (this ppc "
                         "reads versions 1 to 2)");
  Value v0 = fixture("decoder.json");
  obj(v0)["schema_version"] = 0;
  EXPECT_EQ(errorOf(v0), "manifest: unsupported schema_version 0 (this ppc "
                         "reads versions 1 to 2)");
}

TEST(ManifestTest, ReadsTheFormatOfVersion2AndImpliesItInVersion1) {
  Value json = fixture("decoder.json");
  obj(json)["format"] = "onnx";
  EXPECT_EQ(
      errorOf(json),
      "manifest: unknown format 'onnx' (this ppc reads torchscript, pt2)");
  json = fixture("decoder.json");
  obj(json).erase("format");
  EXPECT_EQ(errorOf(json), "missing value at manifest.format");
  // Version 1 has no format field: its stages are TorchScript, and a writer
  // writes it back as version 2.
  obj(json)["schema_version"] = 1;
  auto m = Manifest::fromJSON(json);
  ASSERT_TRUE(static_cast<bool>(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->format, "torchscript");
  auto v2 = Manifest::fromJSON(fixture("decoder.json"));
  ASSERT_TRUE(static_cast<bool>(v2)) << llvm::toString(v2.takeError());
  EXPECT_EQ(m->toJSON(), v2->toJSON());
}

TEST(ManifestTest, RangeChecksIntegersBeforeNarrowing) {
  // 2^32 used to narrow to 0: a valid reference to stage 0's output.
  Value json = fixture("decoder.json");
  obj(stageInput(json, 1, 0)["source"])["stage"] = int64_t(1) << 32;
  EXPECT_EQ(errorOf(json), "expected an integer from 0 to 2147483647 at "
                           "manifest.stages[1].inputs[0].source.stage");
  json = fixture("decoder.json");
  stage(json, 1)["index"] = (int64_t(1) << 32) + 1;
  EXPECT_EQ(errorOf(json), "expected an integer from 0 to 2147483647 at "
                           "manifest.stages[1].index");
  json = fixture("decoder.json");
  (*stageOutput(json, 0, 0).getArray("consumers"))[0] = -1;
  EXPECT_EQ(errorOf(json), "expected an integer from 0 to 2147483647 at "
                           "manifest.stages[0].outputs[0].consumers[0]");
  json = fixture("decoder.json");
  (*obj(json).getArray("outputs"))[0] = Object{{"model_input", 1.5}};
  EXPECT_EQ(errorOf(json), "expected an integer from 0 to 2147483647 at "
                           "manifest.outputs[0].model_input");
}

TEST(ManifestTest, RejectsNegativeCountsAndBytes) {
  for (const char *field :
       {"parameter_count", "parameter_bytes", "buffer_bytes"}) {
    Value json = fixture("decoder.json");
    stage(json, 0)[field] = -1;
    EXPECT_EQ(errorOf(json), std::string("expected a non-negative integer at "
                                         "manifest.stages[0].") +
                                 field);
  }
  Value json = fixture("decoder.json");
  stage(json, 0)["predicted_cost"] = -0.5;
  EXPECT_EQ(errorOf(json), "expected a non-negative number at "
                           "manifest.stages[0].predicted_cost");
  // A cost any schedule's sum of costs keeps finite.
  json = fixture("decoder.json");
  stage(json, 1)["predicted_cost"] = 2e30;
  EXPECT_EQ(errorOf(json), "expected a number in 0..1e+30 at "
                           "manifest.stages[1].predicted_cost");
  json = fixture("decoder.json");
  obj(obj(json)["source"])["size"] = -3;
  EXPECT_EQ(errorOf(json),
            "expected a non-negative integer at manifest.source.size");
  json = fixture("decoder.json");
  obj((*obj(json).getArray("tied_parameters"))[0])["bytes"] = -1;
  EXPECT_EQ(errorOf(json), "expected a non-negative integer at "
                           "manifest.tied_parameters[0].bytes");
  Manifest m = twoStages();
  m.stages[1].bufferBytes = -8;
  EXPECT_EQ(llvm::toString(m.verify()),
            "manifest: stages[1] has a negative count, size or cost");
  m = twoStages();
  m.stages[0].predictedCost = 1e308;
  EXPECT_EQ(llvm::toString(m.verify()),
            "manifest: stages[0].predicted_cost 1e+308 is not a number in "
            "0..1e+30");
}

TEST(ManifestTest, RejectsASourceNamingBothAnInputAndAStage) {
  Value json = fixture("decoder.json");
  obj(stageInput(json, 1, 0)["source"])["model_input"] = 0;
  EXPECT_EQ(errorOf(json), "expected either 'model_input' or 'stage' and "
                           "'output', not both at "
                           "manifest.stages[1].inputs[0].source");
  Manifest m = twoStages();
  m.stages[0].inputs[0].source.stage = 0;
  EXPECT_EQ(llvm::toString(m.verify()),
            "manifest: stages[0].inputs[0] names both a model input and a "
            "stage output");
}

TEST(ManifestTest, RejectsDuplicateAndUnorderedConsumers) {
  Value json = fixture("decoder.json");
  stageOutput(json, 0, 0)["consumers"] = llvm::json::Array{1, 1};
  EXPECT_EQ(errorOf(json),
            "manifest: stages[0].outputs[0] lists consumer 1 twice");
  Manifest m = twoStages();
  m.stages.push_back(m.stages[1]);
  m.stages[2].index = 2;
  m.stages[2].beginsAt = "";
  m.stages[0].outputs[0].consumers = {2, 1};
  m.stages[0].outputs[1].consumers = {1, 2};
  EXPECT_EQ(llvm::toString(m.verify()),
            "manifest: stages[0].outputs[0] lists its consumers out of order "
            "(1 after 2)");
}

TEST(ManifestTest, RejectsAKindDifferentFromTheProducers) {
  Value json = fixture("decoder.json");
  stageInput(json, 1, 1)["type"] = "int";
  EXPECT_EQ(errorOf(json), "manifest: stages[1].inputs[1] is a int but output "
                           "1 of stage 0 is a Tensor");
  json = fixture("decoder.json");
  stageInput(json, 0, 0)["type"] = "Tensor[]";
  EXPECT_EQ(errorOf(json), "manifest: stages[0].inputs[0] is a Tensor[] but "
                           "model input 0 is a Tensor");
}

TEST(ManifestTest, RejectsTiedParametersNamingAMissingStage) {
  Value json = fixture("decoder.json");
  obj((*obj((*obj(json).getArray("tied_parameters"))[0])
            .getArray("uses"))[1])["stage"] = 5;
  EXPECT_EQ(errorOf(json), "manifest: tied_parameters[0].uses[1] names stage "
                           "5, but there are 2 stages");
  Manifest m = twoStages();
  m.tiedParameters[0].uses.pop_back();
  EXPECT_EQ(llvm::toString(m.verify()),
            "manifest: tied_parameters[0] must list at least two uses");
}

TEST(ManifestTest, ConfinesStageFilesToTheManifestDirectory) {
  auto fileError = [](const char *file) {
    Value json = fixture("decoder.json");
    stage(json, 1)["file"] = file;
    return errorOf(json);
  };
  EXPECT_EQ(fileError("../stage_1.pt"),
            "manifest: stages[1].file '../stage_1.pt' leaves the manifest's "
            "directory");
  EXPECT_EQ(fileError("sub/../../x.pt"),
            "manifest: stages[1].file 'sub/../../x.pt' leaves the manifest's "
            "directory");
  EXPECT_EQ(fileError("/etc/passwd"),
            "manifest: stages[1].file '/etc/passwd' is absolute; stage files "
            "must be relative to the manifest's directory");
  EXPECT_EQ(fileError(""), "manifest: stages[1].file is empty");
  EXPECT_EQ(fileError("sub/stage_1.pt"), "");
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

TEST(ManifestTest, LoadRefusesHostileFiles) {
  TempDir d;
  std::string deep = d.write("deep.json", std::string(50000, '['));
  EXPECT_EQ(loadError(deep),
            "manifest '" + deep + "' nests deeper than 256 levels");
  std::string cut = d.write("cut.json", "{\"schema_version\": 1,");
  EXPECT_EQ(loadError(cut), "manifest '" + cut +
                                "' is not valid JSON: [1:21, byte=21]: "
                                "Expected object key");
  std::string fifo = d.path("fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(loadError(fifo),
            "manifest '" + fifo + "' is not a regular file (a FIFO)");
  std::string bad = d.write("bad.json", "{\"schema_version\": 1}");
  EXPECT_EQ(loadError(bad), bad + ": missing value at manifest.source");
}

TEST(ManifestTest, WritesStateOnlyWhereThereIsSomeAndReadsItBack) {
  Manifest m = twoStages();
  m.stages[1].state = {{"layers.0.cache", "float32", {2, 8, 16}, 1},
                       {"steps", "int64", {}}};
  Value json = m.toJSON();
  EXPECT_EQ(stage(json, 0).get("state"), nullptr);
  const llvm::json::Array *state = stage(json, 1).getArray("state");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ((*state)[0], Value(Object{{"name", "layers.0.cache"},
                                      {"dtype", "float32"},
                                      {"shape", {2, 8, 16}},
                                      {"index_dim", 1}}));
  EXPECT_EQ((*state)[1].getAsObject()->get("index_dim"), nullptr);
  auto back = Manifest::fromJSON(json);
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  ASSERT_EQ(back->stages[1].state.size(), 2u);
  EXPECT_EQ(back->stages[1].state[0].shape, (std::vector<int64_t>{2, 8, 16}));
  EXPECT_EQ(back->stages[1].state[0].indexDim, 1);
  EXPECT_EQ(back->stages[1].state[1].indexDim, -1);
  EXPECT_EQ(back->stages[1].state[1].dtype, "int64");
  EXPECT_TRUE(back->stages[1].state[1].shape.empty());
  EXPECT_EQ(back->toJSON(), json);
}

TEST(ManifestTest, WritesWeightsWithTheirTiesAndReadsThemBack) {
  Manifest m = twoStages();
  Value none = m.toJSON();
  EXPECT_EQ(stage(none, 0).get("weights"), nullptr);
  m.stages[0].weights = std::vector<StageWeight>{
      {"embed.weight", "bfloat16", {10, 8}, true, {"head.weight"}},
      {"norm.running_mean", "float32", {8}, false, {}}};
  m.stages[1].weights = std::vector<StageWeight>{};
  Value json = m.toJSON();
  const llvm::json::Array *weights = stage(json, 0).getArray("weights");
  ASSERT_NE(weights, nullptr);
  EXPECT_EQ((*weights)[0], Value(Object{{"name", "embed.weight"},
                                        {"dtype", "bfloat16"},
                                        {"shape", {10, 8}},
                                        {"parameter", true},
                                        {"tied", {"head.weight"}}}));
  EXPECT_EQ((*weights)[1].getAsObject()->get("tied"), nullptr);
  auto back = Manifest::fromJSON(json);
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  ASSERT_TRUE(back->stages[0].weights.has_value());
  EXPECT_EQ((*back->stages[0].weights)[0].tied,
            std::vector<std::string>{"head.weight"});
  EXPECT_FALSE((*back->stages[0].weights)[1].isParameter);
  EXPECT_TRUE(back->stages[1].weights->empty());
  EXPECT_EQ(back->toJSON(), json);

  Value bad = json;
  obj((*stage(bad, 0).getArray("weights"))[1])["name"] = "head.weight";
  EXPECT_EQ(errorOf(bad), "manifest: stages[0].weights[1] repeats the name of "
                          "an earlier weight, or has an empty one");
  bad = json;
  obj((*stage(bad, 0).getArray("weights"))[1])["dtype"] = "float8";
  EXPECT_EQ(errorOf(bad),
            "expected one of uint8, int8, int16, int32, int64, float16, "
            "float32, float64, complex64, complex128, bool, bfloat16 at "
            "manifest.stages[0].weights[1].dtype");
}

TEST(ManifestTest, CarriesRecordedShapesAndRejectsBadOnes) {
  Value json = twoStages().toJSON();
  auto back = Manifest::fromJSON(json);
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->modelInputs[0].shape, (std::vector<int64_t>{-1, 8}));
  EXPECT_EQ(back->stages[0].outputs[0].shape, (std::vector<int64_t>{-1, 16}));
  EXPECT_EQ(
      stage(json, 0).getArray("outputs")->back().getAsObject()->get("shape"),
      nullptr);
  EXPECT_EQ(back->toJSON(), json);
  Value bad = json;
  (*obj((*obj(bad).getArray("inputs"))[0]).getArray("shape"))[0] = -2;
  EXPECT_EQ(errorOf(bad), "expected at most 64 dimensions, each -1 (dynamic) "
                          "or more at manifest.inputs[0].shape");
  bad = json;
  obj((*stage(bad, 0).getArray("outputs"))[0])["shape"] =
      llvm::json::Array(std::vector<int>(65, 1));
  EXPECT_EQ(errorOf(bad), "expected at most 64 dimensions, each -1 (dynamic) "
                          "or more at manifest.stages[0].outputs[0].shape");
}

TEST(ManifestTest, CarriesTheLargestShapeOfADynamicInput) {
  Manifest m = twoStages();
  m.modelInputs[0].maxShape = {32, 8};
  Value json = m.toJSON();
  auto back = Manifest::fromJSON(json);
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->modelInputs[0].maxShape, (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(back->toJSON(), json);
  const char *expected =
      "expected one size per dimension of \"shape\": its size where static, "
      "-1 (unbounded) or at least 1 where dynamic at "
      "manifest.inputs[0].max_shape";
  for (std::vector<int64_t> bad :
       {std::vector<int64_t>{32}, std::vector<int64_t>{32, 9},
        std::vector<int64_t>{0, 8}, std::vector<int64_t>{-2, 8}}) {
    Value changed = json;
    obj((*obj(changed).getArray("inputs"))[0])["max_shape"] =
        llvm::json::Array(bad);
    EXPECT_EQ(errorOf(changed), expected) << bad.size();
  }
  // An unbounded dynamic dimension is -1.
  Value unbounded = json;
  obj((*obj(unbounded).getArray("inputs"))[0])["max_shape"] =
      llvm::json::Array(std::vector<int64_t>{-1, 8});
  EXPECT_TRUE(static_cast<bool>(Manifest::fromJSON(unbounded)));
}

TEST(ManifestTest, RejectsBadState) {
  Manifest m = twoStages();
  m.stages[1].state = {{"cache", "float32", {2, 8}}};
  Value good = m.toJSON();
  auto entry = [](Value &json) -> Object & {
    return obj((*stage(json, 1).getArray("state"))[0]);
  };
  Value json = good;
  entry(json)["dtype"] = "float8";
  EXPECT_EQ(errorOf(json),
            "expected one of uint8, int8, int16, int32, int64, float16, "
            "float32, float64, complex64, complex128, bool, bfloat16 at "
            "manifest.stages[1].state[0].dtype");
  json = good;
  (*entry(json).getArray("shape"))[1] = -1;
  EXPECT_EQ(errorOf(json), "expected a non-negative integer at "
                           "manifest.stages[1].state[0].shape[1]");
  json = good;
  entry(json).erase("name");
  EXPECT_EQ(errorOf(json), "missing value at manifest.stages[1].state[0].name");
  json = good;
  entry(json)["name"] = "";
  EXPECT_EQ(errorOf(json), "manifest: stages[1].state[0] has an empty name");
  json = good;
  stage(json, 1).getArray("state")->push_back(Value(Object(entry(json))));
  EXPECT_EQ(errorOf(json), "manifest: stages[1].state[1] repeats the name of "
                           "an earlier state tensor");
  json = good;
  entry(json)["index_dim"] = 2;
  EXPECT_EQ(errorOf(json), "manifest: stages[1].state[0] has index_dim 2, not "
                           "a dimension of its 2");
  json = good;
  entry(json)["shape"] = llvm::json::Array(std::vector<int>(65, 1));
  EXPECT_EQ(errorOf(json),
            "manifest: stages[1].state[0] has 65 dimensions, more than 64");
  json = good;
  entry(json)["shape"] = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_EQ(errorOf(json), "manifest: stages[1].state[0] has a negative "
                           "dimension or more bytes than fit in 63 bits");
}
