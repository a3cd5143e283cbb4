//===- lib/Pt2Format.cpp - The torch.export (.pt2) frontend ---------------===//
//
// This file implements the .pt2 ModelFormat: archives written by
// torch.export.save, read and lowered into ppc's graph by lib/Pt2Program.h,
// stages built by buildStageModule() (their TorchScript IR runs them) and
// written as programs of their own (Pt2Stage.cpp), so that each stage file
// is a .pt2 that torch.export.load reads.
//
// A loaded file runs as a Pt2Executable: the lowered module, plus the
// program to write back with the module's current tensors (ppc train
// --save, ppc join).
//
// Against LibTorch 1.x (no export schema: PPC_HAVE_PT2 unset) the format
// still recognises .pt2 files, and refuses them in one line naming the fix.
//
//===----------------------------------------------------------------------===//
#include "lib/Error.h"
#include "lib/ModelFormat.h"
#include "lib/StageModule.h"
#include "lib/TorchScriptStage.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/api/include/torch/version.h>

#ifdef PPC_HAVE_PT2
#include "lib/Pt2Program.h"
#endif

namespace ppc {

const ModelFormat &torchScriptFormat();

namespace {

#ifdef PPC_HAVE_PT2

/// A .pt2 file as it runs: its lowered module, and what save() writes
/// besides the module's tensors.
class Pt2Executable : public TorchScriptStage {
public:
  Pt2Executable(torch::jit::Module module, std::string name,
                nlohmann::json program, std::vector<pt2::Pt2Tensor> weights,
                std::vector<pt2::Pt2Tensor> constants)
      : TorchScriptStage(std::move(module)), name(std::move(name)),
        program(std::move(program)), weights(std::move(weights)),
        constants(std::move(constants)) {}

  /// The program as it was read or built, with every weight as the module
  /// holds it now (trained, moved, joined).
  void save(std::ostream &out) const override {
    auto current = [&](const std::vector<pt2::Pt2Tensor> &tensors) {
      std::vector<pt2::Pt2Tensor> out;
      for (const pt2::Pt2Tensor &t : tensors)
        out.push_back({t.fqn, tensorAt(t.fqn), t.isParameter});
      return out;
    };
    pt2::writePt2(out, name, program, current(weights), current(constants));
  }

private:
  std::string name;
  nlohmann::json program;
  /// FQNs and kinds (the tensors are the module's).
  std::vector<pt2::Pt2Tensor> weights, constants;
};

/// What loadModel keeps for buildStage.
struct ModelData {
  pt2::Pt2Program program;
};

llvm::Expected<std::pair<pt2::Pt2Program, pt2::Lowered>>
readAndLower(const FileBuffer &file, llvm::StringRef path) {
  auto program = pt2::readPt2(file->getBuffer(), path, file);
  if (!program)
    return program.takeError();
  auto lowered = pt2::lowerPt2(*program, path);
  if (!lowered)
    return lowered.takeError();
  return std::pair{std::move(*program), std::move(*lowered)};
}

#else

/// The one line a LibTorch 1.x ppc answers a .pt2 file with.
llvm::Error refuse(llvm::StringRef path) {
  return makeError(llvm::formatv(
      "'{0}' is a torch.export program (.pt2), which needs ppc built against "
      "LibTorch 2.x (this one has LibTorch {1}): use the PyTorch 2.x build "
      "(build/, scripts/build.sh; docs/build.md)",
      path, TORCH_VERSION));
}

#endif

class Pt2Format : public ModelFormat {
public:
  llvm::StringRef name() const override { return "pt2"; }
  llvm::StringRef displayName() const override {
    return "torch.export program (.pt2)";
  }
  llvm::StringRef stageExtension() const override { return ".pt2"; }

  bool recognizes(const FileProbe &file) const override {
    return llvm::any_of(file.zipRecords, [](llvm::StringRef r) {
      return r == "archive_format" || r.split('/').second == "archive_format";
    });
  }

  /// An exported program is flat and export folded its constants; folding
  /// more would make tensor constants that a program holds only as lifted
  /// inputs, and functionalizing would make values the program lacks, which
  /// a stage program could not name.
  std::vector<std::string> preparePasses() const override {
    return {"sink-state-writes", "cleanup"};
  }

#ifdef PPC_HAVE_PT2
  llvm::Expected<ModelGraph> loadModel(const FileBuffer &file,
                                       llvm::StringRef path) const override {
    auto read = readAndLower(file, path);
    if (!read)
      return read.takeError();
    auto data = std::make_shared<ModelData>();
    data->program = std::move(read->first);
    return ModelGraph{read->second.module, read->second.graph, data};
  }

  llvm::Expected<BuiltStage>
  buildStage(const ModelGraph &model, std::shared_ptr<torch::jit::Graph> graph,
             int index) const override {
    const auto &data = *static_cast<const ModelData *>(model.formatData.get());
    auto built = buildStageModule(model.module, std::move(graph), index);
    if (!built)
      return built.takeError();
    std::vector<pt2::Pt2Tensor> weights, constants;
    std::set<std::string> isConstant;
    for (const pt2::Pt2Tensor &c : data.program.constants)
      isConstant.insert(c.fqn);
    for (const auto &t : built->tensors)
      (isConstant.count(t.path) ? constants : weights)
          .push_back({t.path, t.tensor, t.isParameter});
    std::vector<pt2::Pt2Tensor> lifted = weights;
    lifted.insert(lifted.end(), constants.begin(), constants.end());
    auto program = pt2::stageProgram(
        data.program, *built->module.get_method("forward").graph(), lifted,
        index);
    if (!program)
      return program.takeError();
    BuiltStage out;
    for (auto &t : built->tensors)
      out.tensors.push_back({t.path, t.tensor, t.isParameter});
    out.executable = std::make_unique<Pt2Executable>(
        std::move(built->module), data.program.name, std::move(*program),
        std::move(weights), std::move(constants));
    return out;
  }

  std::optional<std::vector<int64_t>>
  staticShape(const ModelGraph &model,
              const torch::jit::Value &value) const override {
    return recordedShape(model, value);
  }

  std::optional<std::vector<int64_t>>
  exampleShape(const ModelGraph &model,
               const torch::jit::Value &value) const override {
    return recordedShape(model, value, Dynamic::Hint);
  }

  std::optional<std::vector<int64_t>>
  largestShape(const ModelGraph &model,
               const torch::jit::Value &value) const override {
    return recordedShape(model, value, Dynamic::Maximum);
  }

  /// What recordedShape() gives for a dynamic dimension: -1, its example
  /// value (the shape is nullopt without one), or its symbol's maximum in
  /// the program's range constraints (-1 without one).
  enum class Dynamic{Unknown, Hint, Maximum};

  /// The sizes the program's tensor metadata records for `value` (by its
  /// name), each dynamic one as `dynamic` says.
  static std::optional<std::vector<int64_t>>
  recordedShape(const ModelGraph &model, const torch::jit::Value &value,
                Dynamic dynamic = Dynamic::Unknown) {
    const auto &data = *static_cast<const ModelData *>(model.formatData.get());
    const pt2::schema::ExportedProgram &program = data.program.program;
    const auto &values =
        program.get_graph_module().get_graph().get_tensor_values();
    auto it = values.find(value.debugName());
    if (it == values.end())
      return std::nullopt;
    std::vector<int64_t> shape;
    for (const pt2::schema::SymInt &d : it->second.get_sizes()) {
      using Tag = pt2::schema::SymInt::Tag;
      if (d.tag() == Tag::AS_INT) {
        shape.push_back(d.get_as_int());
        continue;
      }
      const pt2::schema::SymExpr &expr = d.get_as_expr();
      if (dynamic == Dynamic::Unknown) {
        shape.push_back(-1);
      } else if (dynamic == Dynamic::Maximum) {
        auto range = program.get_range_constraints().find(
            pt2::bareSymbol(expr.get_expr_str()).str());
        bool bounded = range != program.get_range_constraints().end() &&
                       range->second.get_max_val() &&
                       *range->second.get_max_val() >= 1;
        shape.push_back(bounded ? *range->second.get_max_val() : -1);
      } else {
        const auto &hint = expr.get_hint();
        if (!hint || hint->tag() != pt2::schema::SymExprHint::Tag::AS_INT)
          return std::nullopt;
        shape.push_back(hint->get_as_int());
      }
    }
    return shape;
  }

  llvm::Expected<std::unique_ptr<StageExecutable>>
  loadExecutable(const FileBuffer &file, llvm::StringRef path) const override {
    auto read = readAndLower(file, path);
    if (!read)
      return read.takeError();
    pt2::Pt2Program &program = read->first;
    return std::make_unique<Pt2Executable>(
        read->second.module, program.name, std::move(program.json),
        std::move(program.weights), std::move(program.constants));
  }
#else
  llvm::Expected<ModelGraph> loadModel(const FileBuffer &,
                                       llvm::StringRef path) const override {
    return refuse(path);
  }
  llvm::Expected<BuiltStage> buildStage(const ModelGraph &,
                                        std::shared_ptr<torch::jit::Graph>,
                                        int) const override {
    return makeError("ppc was built without torch.export support");
  }
  llvm::Expected<std::unique_ptr<StageExecutable>>
  loadExecutable(const FileBuffer &, llvm::StringRef path) const override {
    return refuse(path);
  }
#endif

  /// The lowered program runs in the JIT's graph executor, as TorchScript.
  void warmUp() const override { torchScriptFormat().warmUp(); }
};

} // namespace

const ModelFormat &pt2Format() {
  static const Pt2Format format;
  return format;
}

} // namespace ppc
