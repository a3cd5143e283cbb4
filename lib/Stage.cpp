//===- lib/Stage.cpp - A loaded stage module ------------------------------===//
#include "lib/Stage.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/MappedTensor.h"
#include "lib/ModelFormat.h"
#include "lib/SafeRead.h"
#include "lib/StateBuffers.h"
#include "lib/TorchScriptStage.h"
#include "lib/ValueWalk.h"
#include "lib/WeightBinding.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <map>
#include <set>

namespace ppc {

std::string manifestDirectory(llvm::StringRef manifestPath) {
  llvm::StringRef dir = llvm::sys::path::parent_path(manifestPath);
  return dir.empty() ? "." : dir.str();
}

/// The buffers `stage`'s program writes in place (lib/StateBuffers.h) must
/// be the manifest's state of it: a manifest that hides state would let
/// groups of sequences share one cache.
static llvm::Error checkState(const StageInfo &info,
                              const StageExecutable &stage) {
  const auto *program = dynamic_cast<const TorchScriptStage *>(&stage);
  if (!program)
    return llvm::Error::success();
  auto written = torchCall(
      "cannot analyze stage " + std::to_string(info.index) + "'s writes", [&] {
        std::shared_ptr<torch::jit::Graph> graph =
            program->module().get_method("forward").graph()->copy();
        std::set<std::string> paths;
        for (const StateBuffer &b : findStateBuffers(*graph))
          paths.insert(b.path);
        return paths;
      });
  if (!written)
    return written.takeError();
  std::set<std::string> listed;
  for (const StateTensor &t : info.state)
    listed.insert(t.name);
  if (*written == listed)
    return llvm::Error::success();
  auto names = [](const std::set<std::string> &set) {
    std::vector<std::string> out;
    for (const std::string &name : set)
      out.push_back("'" + printable(name, 256) + "'");
    return out.empty() ? std::string("none") : llvm::join(out, ", ");
  };
  return makeError(llvm::formatv(
      "stage {0}'s program writes {1} in place, but the manifest lists its "
      "state as {2}: the manifest does not describe this stage (split "
      "again)",
      info.index, names(*written), names(listed)));
}

llvm::Expected<Stage> Stage::load(const Manifest &manifest, llvm::StringRef dir,
                                  int index, WeightSource *weights,
                                  bool inPlace) {
  const StageInfo &info = manifest.stages.at(index);
  // Manifest::verify() checks this too; a manifest built in code may not
  // have been verified, and the check is what keeps the path inside `dir`.
  if (llvm::Error err = checkStageFile(info))
    return err;
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, info.file);
  if (!llvm::sys::fs::exists(path))
    return makeError(
        llvm::formatv("stage {0} file '{1}' is missing", index, path).str());
  // Mapped once: the bytes hashed are the bytes loaded, and the weights
  // stay where they are (lib/MappedTensor.h).
  auto buffer = mapFileBounded(path, kMaxStageFileBytes,
                               llvm::formatv("stage {0} file", index).str());
  if (!buffer)
    return buffer.takeError();
  llvm::StringRef bytes = (*buffer)->getBuffer();
  std::string hash = sha256PagingOut(bytes);
  if (hash != info.sha256)
    return makeError(llvm::formatv(
        "stage {0} file '{1}' does not match the manifest "
        "({2})",
        index, path,
        contentMismatch(bytes.size(), hash, std::nullopt, info.sha256)));
  const ModelFormat *format = findModelFormat(manifest.format);
  if (!format)
    return makeError("manifest: unknown format '" + manifest.format + "'");
  auto executable = format->loadExecutable(*buffer, path);
  if (!executable)
    return executable.takeError();
  if (llvm::Error err = torchCall("cannot load stage " + std::to_string(index),
                                  [&] { (*executable)->setTraining(false); }))
    return err;
  if (llvm::Error err = checkState(info, **executable))
    return err;
  auto slots = torchCall("cannot load stage " + std::to_string(index), [&] {
    return stageSlots(manifest, info, **executable);
  });
  if (!slots)
    return slots.takeError();
  if (weights || hasMetaTensors(*slots)) {
    auto bound = bindInto(**executable, *slots, weights, inPlace,
                          "stage " + std::to_string(index));
    if (!bound)
      return bound.takeError();
  }
  return Stage(std::move(*executable), info);
}

bool hasKind(const c10::IValue &value, ValueKind kind) {
  return forEachTensor(value, kind, [](const at::Tensor &) {});
}

llvm::Expected<std::vector<c10::IValue>>
Stage::run(std::vector<c10::IValue> inputs) {
  const StageInfo &info = *info_;
  if (inputs.size() != info.inputs.size())
    return makeError(llvm::formatv("stage {0} takes {1} inputs, got {2}",
                                   info.index, info.inputs.size(),
                                   inputs.size()));
  auto result = torchCall(llvm::formatv("stage {0} failed", info.index), [&] {
    return executable_->forward(std::move(inputs));
  });
  if (!result)
    return result.takeError();
  if (!result->isTuple())
    return makeError(llvm::formatv("stage {0} returned a {1}, not a tuple",
                                   info.index, result->tagKind()));
  std::vector<c10::IValue> outputs = result->toTupleRef().elements().vec();
  if (outputs.size() != info.outputs.size())
    return makeError(
        llvm::formatv("stage {0} returned {1} values; the manifest "
                      "declares {2}",
                      info.index, outputs.size(), info.outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!hasKind(outputs[i], info.outputs[i].kind))
      return makeError(
          llvm::formatv("stage {0} output {1} ('{2}') is a {3}; the "
                        "manifest declares {4}",
                        info.index, i, info.outputs[i].name,
                        outputs[i].tagKind(), kindName(info.outputs[i].kind)));
  return outputs;
}

llvm::Expected<std::vector<c10::IValue>>
runSequentially(const Manifest &manifest, llvm::StringRef dir,
                const std::vector<c10::IValue> &inputs, WeightSource *weights) {
  if (inputs.size() != manifest.modelInputs.size())
    return makeError(llvm::formatv(
        "the model takes {0} input{1}, got {2}", manifest.modelInputs.size(),
        manifest.modelInputs.size() == 1 ? "" : "s", inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!hasKind(inputs[i], manifest.modelInputs[i].kind))
      return makeError(llvm::formatv(
          "model input {0} ('{1}') must be a {2}, got a {3}", i,
          manifest.modelInputs[i].name, kindName(manifest.modelInputs[i].kind),
          inputs[i].tagKind()));
  std::vector<std::vector<c10::IValue>> outputs(manifest.stages.size());
  std::map<std::pair<int, int>, int> uses = outputUses(manifest);
  auto value = [&](const ValueRef &ref) {
    return ref.isModelInput() ? inputs[ref.modelInput]
                              : outputs[ref.stage][ref.output];
  };
  for (size_t s = 0; s < manifest.stages.size(); ++s) {
    auto stage = Stage::load(manifest, dir, static_cast<int>(s), weights,
                             /*inPlace=*/true);
    if (!stage)
      return stage.takeError();
    std::vector<c10::IValue> stageInputs;
    for (const StageInput &in : manifest.stages[s].inputs) {
      bool otherUses = !in.source.isModelInput() &&
                       uses[{in.source.stage, in.source.output}] > 1;
      auto v = stageArgument(in, value(in.source), otherUses);
      if (!v)
        return v.takeError();
      stageInputs.push_back(std::move(*v));
    }
    auto result = stage->run(std::move(stageInputs));
    if (!result)
      return result.takeError();
    outputs[s] = std::move(*result);
  }
  std::vector<c10::IValue> modelOutputs;
  for (const ValueRef &ref : manifest.modelOutputs)
    modelOutputs.push_back(value(ref));
  return modelOutputs;
}

} // namespace ppc
