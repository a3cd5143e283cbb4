//===- tests/unit/lib/ModelFormatTest.cpp - The model-format seam ---------===//
//
// Tests that a model file's format is chosen by its contents, that a file no
// format recognises is refused in one line naming the formats, and that the
// TorchScript frontend and stage executable do what the seam promises.
//
//===----------------------------------------------------------------------===//
#include "lib/ModelFormat.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <torch/script.h>

#include <gtest/gtest.h>

#include <sstream>

using namespace ppc;

namespace {

struct TempDir {
  TempDir() {
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-format", dir));
  }
  ~TempDir() { llvm::sys::fs::remove_directories(dir); }
  std::string path(llvm::StringRef name) const {
    return (dir + "/" + name).str();
  }
  llvm::SmallString<128> dir;
};

/// forward(x) = x * w, with one parameter w and one buffer b.
torch::jit::Module scaleModule() {
  torch::jit::Module m("Scale");
  // What torch.jit.script gives every module, and train() sets.
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w", torch::full({2}, 3.0), /*is_buffer=*/false);
  m.register_buffer("b", torch::zeros({1}));
  m.define("def forward(self, x):\n  return x * self.w\n");
  return m;
}

} // namespace

TEST(ModelFormatTest, RegistersTorchScriptByName) {
  ASSERT_FALSE(modelFormats().empty());
  EXPECT_EQ(modelFormats()[0]->name(), "torchscript");
  EXPECT_EQ(findModelFormat("torchscript"), modelFormats()[0]);
  EXPECT_EQ(findModelFormat("onnx"), nullptr);
  EXPECT_EQ(modelFormats()[0]->stageExtension(), ".pt");
}

TEST(ModelFormatTest, TorchScriptRecognisesItsArchivesOnly) {
  const ModelFormat &ts = *findModelFormat("torchscript");
  EXPECT_TRUE(ts.recognizes(
      {"",
       {"m/data.pkl", "m/code/__torch__.py", "m/constants.pkl", "m/version"}}));
  EXPECT_TRUE(ts.recognizes({"", {"data.pkl", "version"}}));
  // A torch.export archive names its format.
  EXPECT_FALSE(
      ts.recognizes({"", {"m/archive_format", "m/data.pkl", "m/version"}}));
  EXPECT_FALSE(ts.recognizes({"", {"m/models/model.json"}}));
  EXPECT_FALSE(ts.recognizes({"", {}}));
}

TEST(ModelFormatTest, ReadsAModelFileWithTheFormatItsContentsName) {
  TempDir d;
  std::string path = d.path("m.pt");
  scaleModule().save(path);
  auto file = readModelFile(path);
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  EXPECT_EQ(file->format->name(), "torchscript");

  auto model = file->format->loadModel(file->buffer, path);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->graph->inputs().size(), 2u); // self, x

  auto exe = file->format->loadExecutable(file->buffer, path);
  ASSERT_TRUE(static_cast<bool>(exe)) << llvm::toString(exe.takeError());
  StageExecutable &stage = **exe;
  at::Tensor out = stage.forward({torch::ones({2})}).toTensor();
  EXPECT_TRUE(at::equal(out, torch::full({2}, 3.0)));
  ASSERT_EQ(stage.namedParameters().size(), 1u);
  EXPECT_EQ(stage.namedParameters()[0].name, "w");
  ASSERT_EQ(stage.namedBuffers().size(), 1u);
  EXPECT_EQ(stage.namedBuffers()[0].name, "b");
  EXPECT_EQ(stage.parameters().size(), 1u);
  EXPECT_TRUE(stage.tensorAt("w").is_same(stage.parameters()[0]));
  stage.setTraining(false);
  EXPECT_FALSE(stage.isTraining());

  // save() writes what the format loads back, training flag included.
  std::ostringstream os;
  stage.save(os);
  auto again = file->format->loadExecutable(
      llvm::MemoryBuffer::getMemBufferCopy(os.str()), "saved");
  ASSERT_TRUE(static_cast<bool>(again)) << llvm::toString(again.takeError());
  EXPECT_FALSE((*again)->isTraining());
  EXPECT_TRUE(at::equal((*again)->tensorAt("w"), torch::full({2}, 3.0)));
}

TEST(ModelFormatTest, RefusesAFileNoFormatRecognisesInOneLine) {
  TempDir d;
  std::string path = d.path("junk.pt");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    os << "not a zip at all";
  }
  auto file = readModelFile(path);
  ASSERT_FALSE(static_cast<bool>(file));
  std::string message = llvm::toString(file.takeError());
  EXPECT_EQ(message.rfind("'" + path +
                              "' is not a TorchScript module or torch.export "
                              "program (.pt2): it is not a readable zip "
                              "archive: ",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("(formats ppc reads: torchscript, pt2)"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  auto missing = readModelFile(d.path("nope.pt"));
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()),
            "cannot open '" + d.path("nope.pt") +
                "': No such file or directory");
}
