//===- lib/TorchScriptFormat.cpp - The TorchScript frontend ---------------===//
//
// This file implements the TorchScript ModelFormat: files written by
// torch.jit.save, lowered into ppc's graph by copying the forward method's
// graph (the module itself holds the attributes), stages built by
// buildStageModule() (lib/StageModule.h) and run as TorchScriptStages.
//
//===----------------------------------------------------------------------===//
#include "lib/Error.h"
#include "lib/ModelFormat.h"
#include "lib/StageModule.h"
#include "lib/TorchScriptStage.h"

#include "llvm/ADT/STLExtras.h"

#include <torch/jit.h>
#include <torch/script.h>

#include <mutex>

namespace ppc {

namespace {

/// Whether `records` hold `name` at the archive's top level. Record names
/// may or may not carry the archive's directory ("model/data.pkl").
bool hasRecord(llvm::ArrayRef<std::string> records, llvm::StringRef name) {
  return llvm::any_of(records, [&](llvm::StringRef r) {
    return r == name || r.split('/').second == name;
  });
}

class TorchScriptFormat : public ModelFormat {
public:
  llvm::StringRef name() const override { return "torchscript"; }
  llvm::StringRef displayName() const override { return "TorchScript module"; }
  llvm::StringRef stageExtension() const override { return ".pt"; }

  /// torch.jit.save writes data.pkl and version (and code/, constants.pkl);
  /// torch.save's files share the first two and are told apart by the
  /// loader. A .pt2 archive names its own format in archive_format.
  bool recognizes(const FileProbe &file) const override {
    return hasRecord(file.zipRecords, "data.pkl") &&
           hasRecord(file.zipRecords, "version") &&
           !hasRecord(file.zipRecords, "archive_format");
  }

  llvm::Expected<ModelGraph> loadModel(const FileBuffer &file,
                                       llvm::StringRef path) const override {
    auto module = loadTorchScriptModule(file->getBuffer(), path);
    if (!module)
      return module.takeError();
    module->eval();
    auto forward = module->find_method("forward");
    if (!forward)
      return makeError("'" + path + "' has no forward method");
    auto graph = forward->graph()->copy();
    return ModelGraph{std::move(*module), std::move(graph), nullptr};
  }

  /// Scripted code calls methods, branches on flags and writes in place.
  std::vector<std::string> preparePasses() const override {
    return {"inline-calls", "fold-constants", "functionalize",
            "sink-state-writes", "cleanup"};
  }

  llvm::Expected<BuiltStage>
  buildStage(const ModelGraph &model, std::shared_ptr<torch::jit::Graph> graph,
             int index) const override {
    auto built = buildStageModule(model.module, std::move(graph), index);
    if (!built)
      return built.takeError();
    BuiltStage out;
    for (auto &t : built->tensors)
      out.tensors.push_back({std::move(t.path), t.tensor, t.isParameter});
    out.executable =
        std::make_unique<TorchScriptStage>(std::move(built->module));
    return out;
  }

  llvm::Expected<std::unique_ptr<StageExecutable>>
  loadExecutable(const FileBuffer &file, llvm::StringRef path) const override {
    auto module = loadTorchScriptModule(file->getBuffer(), path);
    if (!module)
      return module.takeError();
    return std::make_unique<TorchScriptStage>(std::move(*module));
  }

  /// The graph executor's first optimization of a graph compiles LibTorch's
  /// op decompositions from source (about 0.1-0.2 s), which on a pipeline's
  /// critical path would be paid once per rank, one rank after the other.
  /// Runs a small built-in function twice (the profiling run, then the
  /// optimized one); idempotent and thread-safe; a failure only means the
  /// cost is paid later.
  void warmUp() const override {
    static std::once_flag once;
    std::call_once(once, [] {
      try {
        // aten::linear is one of the ops the executor decomposes, which
        // makes it compile the decompositions.
        auto unit = torch::jit::compile(R"(
def warm_up(x: Tensor):
    return torch.relu(torch.linear(x, x, x[0]))
)");
        torch::NoGradGuard noGrad;
        for (int i = 0; i < 2; ++i)
          unit->run_method("warm_up", torch::zeros({2, 2}));
      } catch (const std::exception &) {
      }
    });
  }
};

} // namespace

const ModelFormat &torchScriptFormat() {
  static const TorchScriptFormat format;
  return format;
}

} // namespace ppc
