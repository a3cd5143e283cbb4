//===- lib/Join.cpp - Put trained stage tensors back into the model -------===//
//
// This file implements joinStages(). Stage modules keep the original
// attribute paths (lib/StageModule.h), so a stage's parameter
// "layer1.0.conv1.weight" goes back to the original's tensor at that path.
// Tensors are copied into the original's tensors in place rather than
// replaced: the original may hold one tensor under two paths (tied embedding
// and head weights), and replacing one path would untie them.
//
//===----------------------------------------------------------------------===//
#include "lib/Join.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/MappedTensor.h"
#include "lib/ModelFormat.h"
#include "lib/OutputGuard.h"
#include "lib/SafeRead.h"
#include "lib/Stage.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <torch/csrc/api/include/torch/types.h>

#include <cstring>
#include <map>
#include <set>

namespace ppc {

namespace {

/// A parameter or buffer of the original model.
struct Slot {
  at::Tensor tensor;
  bool isParameter;
};

/// The stage and path whose value a tensor of the original received first.
struct Writer {
  int stage;
  std::string path;
};

} // namespace

/// Where the manifest's source path points: as written when absolute (what
/// ppc split writes); a relative one is tried from the current directory,
/// then from the manifest's. "" when neither exists.
static std::string findOriginal(const Manifest &manifest, llvm::StringRef dir) {
  llvm::StringRef source = manifest.sourcePath;
  if (source.empty())
    return "";
  if (llvm::sys::fs::exists(source))
    return source.str();
  if (llvm::sys::path::is_absolute(source))
    return "";
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, source);
  return llvm::sys::fs::exists(path) ? std::string(path) : "";
}

/// Maps the original model once, checks those bytes against the manifest,
/// and loads them with the manifest's format.
static llvm::Expected<std::unique_ptr<StageExecutable>>
loadOriginal(const Manifest &manifest, llvm::StringRef path) {
  auto buffer = mapFileBounded(path, kMaxStageFileBytes, "original model");
  if (!buffer)
    return buffer.takeError();
  llvm::StringRef bytes = (*buffer)->getBuffer();
  std::string hash = sha256PagingOut(bytes);
  if (bytes.size() != manifest.sourceSize || hash != manifest.sourceSha256)
    return makeError(
        llvm::formatv("the original model '{0}' does not match the manifest "
                      "({1}); ppc join needs the model the "
                      "stages were split from",
                      path,
                      contentMismatch(bytes.size(), hash, manifest.sourceSize,
                                      manifest.sourceSha256)));
  return formatOf(manifest).loadExecutable(*buffer, path);
}

/// The parameters and buffers of `model` by dotted path.
static std::map<std::string, Slot> tensorsByPath(const StageExecutable &model) {
  std::map<std::string, Slot> slots;
  for (const NamedTensor &p : model.namedParameters())
    slots[p.name] = {p.value, true};
  for (const NamedTensor &b : model.namedBuffers())
    slots[b.name] = {b.value, false};
  return slots;
}

static std::string describe(const at::Tensor &t) {
  return std::string(c10::toString(t.scalar_type())) + " [" +
         llvm::join(llvm::map_range(
                        t.sizes(), [](int64_t d) { return std::to_string(d); }),
                    ", ") +
         "]";
}

/// Whether two tensors of one dtype and shape are copies of each other:
/// equal values, or the same bytes (NaNs in the same places).
static bool sameValues(const at::Tensor &a, const at::Tensor &b) {
  if (at::equal(a, b))
    return true;
  if (!a.device().is_cpu() || !b.device().is_cpu())
    return false;
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

/// " (max abs diff X)" for real tensors, "" otherwise.
static std::string maxAbsDiff(const at::Tensor &a, const at::Tensor &b) {
  if (a.is_complex() || a.numel() == 0)
    return "";
  double diff =
      (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  return llvm::formatv(" (max abs diff {0})", llvm::format("%.3g", diff)).str();
}

/// Copies one stage tensor into the original's tensor at the same path.
/// `writers` records which stage wrote each original tensor first; a later
/// copy of the same tensor (another stage's, or another path's) must equal
/// the value already written.
static llvm::Error copyTensor(int stage, const std::string &path,
                              const at::Tensor &value, bool isParameter,
                              const std::map<std::string, Slot> &original,
                              std::map<const void *, Writer> &writers) {
  const char *kind = isParameter ? "parameter" : "buffer";
  auto it = original.find(path);
  if (it == original.end())
    return makeError(
        llvm::formatv("stage {0} holds {1} '{2}', which the original model "
                      "lacks",
                      stage, kind, path));
  const Slot &slot = it->second;
  if (slot.isParameter != isParameter)
    return makeError(llvm::formatv(
        "stage {0} '{1}' is a {2}; in the original model it is "
        "a {3}",
        stage, path, kind, slot.isParameter ? "parameter" : "buffer"));
  if (value.scalar_type() != slot.tensor.scalar_type() ||
      value.sizes() != slot.tensor.sizes())
    return makeError(
        llvm::formatv("stage {0} '{1}' is {2}; the original model's is {3}",
                      stage, path, describe(value), describe(slot.tensor)));
  const void *target = slot.tensor.unsafeGetTensorImpl();
  auto [first, inserted] = writers.try_emplace(target, Writer{stage, path});
  std::string what = llvm::formatv("stage {0} '{1}'", stage, path).str();
  if (inserted)
    return torchCall("cannot copy " + what, [&] {
      torch::NoGradGuard noGrad;
      slot.tensor.copy_(value);
    });
  // The original's tensor already holds the first copy's value.
  auto same = torchCall("cannot compare " + what,
                        [&] { return sameValues(slot.tensor, value); });
  if (!same || *same)
    return same.takeError();
  auto diff = torchCall("cannot compare " + what,
                        [&] { return maxAbsDiff(slot.tensor, value); });
  if (!diff)
    return diff.takeError();
  const Writer &w = first->second;
  return makeError(
      llvm::formatv("the copies of tied tensor '{0}' differ: stage {1} '{0}' "
                    "!= stage {2} '{3}'{4}",
                    w.path, w.stage, stage, path, *diff));
}

/// Copies every parameter and buffer of `stage` into the original.
static llvm::Error copyStage(Stage &stage,
                             const std::map<std::string, Slot> &original,
                             std::map<const void *, Writer> &writers) {
  for (const NamedTensor &p : stage.executable().namedParameters())
    if (llvm::Error err = copyTensor(stage.index(), p.name, p.value,
                                     /*isParameter=*/true, original, writers))
      return err;
  for (const NamedTensor &b : stage.executable().namedBuffers())
    if (llvm::Error err = copyTensor(stage.index(), b.name, b.value,
                                     /*isParameter=*/false, original, writers))
      return err;
  return llvm::Error::success();
}

llvm::Expected<JoinReport> joinStages(llvm::StringRef manifestPath,
                                      llvm::StringRef outputPath) {
  auto manifest = Manifest::load(manifestPath);
  if (!manifest)
    return manifest.takeError();
  std::string dir = manifestDirectory(manifestPath);
  std::string originalPath = findOriginal(*manifest, dir);
  // Writing over what join reads would destroy it, and the manifest's
  // hashes with it.
  OutputGuard guard;
  guard.keep(originalPath, "the original model");
  keepManifestFiles(guard, manifestPath);
  if (llvm::Error err = guard.claimFile("the output", outputPath))
    return err;
  if (originalPath.empty())
    return makeError("the original model '" + manifest->sourcePath +
                     "' named by the manifest is missing");

  auto model = loadOriginal(*manifest, originalPath);
  if (!model)
    return model.takeError();
  std::map<std::string, Slot> original = tensorsByPath(**model);
  std::map<const void *, Writer> writers;
  for (size_t s = 0; s < manifest->stages.size(); ++s) {
    auto stage = Stage::load(*manifest, dir, static_cast<int>(s));
    if (!stage)
      return stage.takeError();
    if (llvm::Error err = copyStage(*stage, original, writers))
      return err;
  }

  JoinReport report;
  report.originalPath = originalPath;
  report.stages = manifest->stages.size();
  std::set<const void *> counted;
  for (const auto &[path, slot] : original) {
    const void *impl = slot.tensor.unsafeGetTensorImpl();
    if (!counted.insert(impl).second)
      continue;
    if (!writers.count(impl))
      ++report.unchanged;
    else if (slot.isParameter)
      ++report.parameters;
    else
      ++report.buffers;
  }

  if (llvm::Error err = saveExecutable(**model, outputPath,
                                       "cannot save '" + outputPath + "'"))
    return err;
  return report;
}

} // namespace ppc
