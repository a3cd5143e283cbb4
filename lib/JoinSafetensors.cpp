//===- lib/JoinSafetensors.cpp - Stage weights as Hugging Face shards -----===//
#include "lib/JoinSafetensors.h"

#include "lib/Error.h"
#include "lib/Manifest.h"
#include "lib/MappedTensor.h"
#include "lib/Safetensors.h"
#include "lib/Stage.h"
#include "lib/WeightBinding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <map>
#include <set>

namespace ppc {

namespace {

/// A tensor to write, under the program's name.
struct Named {
  std::string name;
  at::Tensor value;
};

/// A wrapper's prefix: the first dotted component every name shares
/// (transformers' decoder wrapper's "model."), when what follows it never
/// starts with a digit; "" otherwise. `layers.0.weight`, `layers.1.weight`
/// are a ModuleList's own names, and a longer prefix ("model.linear.") would
/// take the model's own module names.
std::string wrapperPrefix(const std::vector<Named> &tensors) {
  if (tensors.size() < 2)
    return "";
  llvm::StringRef first = tensors.front().name;
  size_t dot = first.find('.');
  if (dot == llvm::StringRef::npos)
    return "";
  llvm::StringRef prefix = first.take_front(dot + 1);
  bool shared = llvm::all_of(tensors, [&](const Named &t) {
    llvm::StringRef name = t.name;
    return name.consume_front(prefix) && !name.empty() &&
           !llvm::isDigit(name.front());
  });
  return shared ? prefix.str() : "";
}

/// The model's weights of `stage`: its parameters and registered buffers,
/// less state, each tensor once, and less what `written` (other stages'
/// copies of tied tensors) holds already.
std::vector<Named>
stageWeights(const Manifest &manifest, Stage &stage,
             std::set<std::pair<int, std::string>> &written) {
  const StageInfo &info = stage.info();
  std::set<std::string> state;
  for (const StateTensor &t : info.state)
    state.insert(t.name);
  std::set<std::string> kept;
  for (const NamedTensor &t : stage.executable().namedParameters())
    kept.insert(t.name);
  for (const NamedTensor &t : stage.executable().namedBuffers())
    kept.insert(t.name);
  std::vector<Named> out;
  std::set<const void *> seen;
  for (const NamedTensor &t : stage.executable().namedTensors()) {
    if (!kept.count(t.name) || state.count(t.name) ||
        written.count({info.index, t.name}) ||
        !seen.insert(t.value.unsafeGetTensorImpl()).second)
      continue;
    out.push_back({t.name, t.value});
    // Its copies in later stages are the same tensor of the model.
    for (const TiedParameter &tied : manifest.tiedParameters)
      if (llvm::any_of(tied.uses, [&](const TiedParameter::Use &u) {
            return u.stage == info.index && u.path == t.name;
          }))
        for (const TiedParameter::Use &u : tied.uses)
          written.insert({u.stage, u.path});
  }
  return out;
}

} // namespace

llvm::Expected<SafetensorsJoinReport>
joinToSafetensors(llvm::StringRef manifestPath, const SafetensorsJoin &join) {
  auto manifest = Manifest::load(manifestPath);
  if (!manifest)
    return manifest.takeError();
  std::string dir = manifestDirectory(manifestPath);
  std::shared_ptr<WeightSource> weights;
  if (join.weights.given()) {
    auto source =
        WeightSource::open(join.weights, manifestWeightNames(*manifest));
    if (!source)
      return source.takeError();
    weights = std::move(*source);
  }
  // Every stage stays loaded until the shards are written: the writer takes
  // the tensors' bytes where they are (mapped from --weights, or the stage
  // files' own).
  std::vector<Stage> stages;
  std::vector<Named> tensors;
  std::set<std::pair<int, std::string>> written;
  for (size_t s = 0; s < manifest->stages.size(); ++s) {
    auto stage = Stage::load(*manifest, dir, static_cast<int>(s), weights.get(),
                             /*inPlace=*/true);
    if (!stage)
      return stage.takeError();
    stages.push_back(std::move(*stage));
    for (Named &t : stageWeights(*manifest, stages.back(), written))
      tensors.push_back(std::move(t));
  }

  SafetensorsJoinReport report;
  report.stages = stages.size();
  report.prefix = join.prefix ? *join.prefix : wrapperPrefix(tensors);
  if (join.prefix && !tensors.empty() &&
      llvm::none_of(tensors, [&](const Named &t) {
        return llvm::StringRef(t.name).startswith(*join.prefix);
      }))
    return makeError("--weights-prefix '" + printable(*join.prefix) +
                     "' is the prefix of no weight of the stages");
  std::vector<safetensors::WriteTensor> out;
  for (Named &t : tensors) {
    std::string dtype = safetensorsDType(t.value.scalar_type());
    if (dtype.empty())
      return makeError(llvm::formatv(
          "'{0}' has dtype {1}, which safetensors does not hold",
          printable(t.name, 512), c10::toString(t.value.scalar_type())));
    auto contiguous = torchCall("cannot read '" + t.name + "'", [&] {
      return t.value.detach().to(at::kCPU).contiguous();
    });
    if (!contiguous)
      return contiguous.takeError();
    t.value = std::move(*contiguous);
    llvm::StringRef name = t.name;
    name.consume_front(report.prefix);
    out.push_back(
        {name.str(), dtype, t.value.sizes().vec(),
         llvm::StringRef(static_cast<const char *>(t.value.data_ptr()),
                         t.value.nbytes()),
         [storage = t.value.storage()] { pageOut(storage); }});
    report.bytes += t.value.nbytes();
  }
  if (llvm::Error err =
          safetensors::writeCheckpoint(join.outputDir, out, join.maxShardBytes))
    return err;
  report.tensors = out.size();
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(join.outputDir, ec), end;
       !ec && it != end; it.increment(ec))
    if (llvm::StringRef(it->path()).endswith(".safetensors"))
      ++report.shards;
  return report;
}

} // namespace ppc
