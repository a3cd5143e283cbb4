//===- tools/ppc/VerifyCommand.cpp - ppc verify ---------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Compare.h"
#include "lib/Error.h"
#include "lib/ModelFormat.h"
#include "lib/Stage.h"
#include "lib/StageExecutable.h"
#include "lib/TensorIO.h"
#include "lib/TorchScriptStage.h"
#include "lib/WeightBinding.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/WeightFlags.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>

namespace ppc {

namespace {
struct VerifyOptions {
  std::string modelPath, manifestPath, inputPath;
  double rtol = 1e-5, atol = 1e-5;
  WeightOptions weights;
};
} // namespace

/// Runs one batch through the stages and the model and prints one line per
/// output, each prefixed with `label` ("" or "batch 2: "). Returns whether
/// every output matched.
static llvm::Expected<bool>
verifyBatch(const VerifyOptions &o, const Manifest &manifest,
            StageExecutable &model, WeightSource *weights,
            const std::vector<c10::IValue> &inputs, const std::string &label) {
  auto actual = runSequentially(manifest, manifestDirectory(o.manifestPath),
                                inputs, weights);
  if (!actual)
    return actual.takeError();
  auto expected = torchCall("the unsplit model failed",
                            [&] { return model.forward(inputs); });
  if (!expected)
    return expected.takeError();

  std::vector<c10::IValue> expectedOutputs;
  if (manifest.outputIsTuple && expected->isTuple())
    expectedOutputs = expected->toTupleRef().elements().vec();
  else
    expectedOutputs.push_back(*expected);
  if (expectedOutputs.size() != actual->size())
    return makeError(
        llvm::formatv("the model returns {0} outputs, the stages {1}",
                      expectedOutputs.size(), actual->size()));

  bool all = true;
  for (size_t i = 0; i < actual->size(); ++i) {
    auto compared =
        torchCall("cannot compare output " + std::to_string(i), [&] {
          return compareValues(expectedOutputs[i], (*actual)[i], o.rtol,
                               o.atol);
        });
    if (!compared)
      return compared.takeError();
    const OutputComparison &c = *compared;
    all &= c.match;
    llvm::outs() << llvm::formatv("{0}output {1}: {2}: {3}\n", label, i,
                                  c.match ? "match" : "MISMATCH", c.detail);
  }
  return all;
}

/// The unsplit model's weights from `weights`, as the stages get theirs;
/// its buffers without data start as zeros (the model's own graph is not at
/// hand to tell state from other buffers; a stage refuses a non-state one).
static llvm::Error bindModelWeights(StageExecutable &model,
                                    WeightSource *weights) {
  std::vector<WeightSlot> slots = moduleSlots(model, {});
  for (WeightSlot &slot : slots)
    slot.isState = !slot.isParameter;
  return bindInto(model, slots, weights, /*inPlace=*/true, "the model")
      .takeError();
}

static llvm::Expected<int> runVerify(const VerifyOptions &o) {
  auto manifest = Manifest::load(o.manifestPath);
  if (!manifest)
    return manifest.takeError();
  // The input forms ppc run takes: one batch, or a list of batches.
  std::vector<std::string> names;
  for (const ModelInput &in : manifest->modelInputs)
    names.push_back(in.name);
  auto inputs = loadInputBatches(o.inputPath, names);
  if (!inputs)
    return inputs.takeError();
  auto file = readModelFile(o.modelPath);
  if (!file)
    return file.takeError();
  auto model = file->format->loadExecutable(file->buffer, o.modelPath);
  if (!model)
    return model.takeError();
  if (llvm::Error err = torchCall("cannot load '" + o.modelPath + "'",
                                  [&] { (*model)->setTraining(false); }))
    return err;
  std::shared_ptr<WeightSource> weights;
  if (o.weights.given()) {
    auto source = WeightSource::open(o.weights, manifestWeightNames(*manifest));
    if (!source)
      return source.takeError();
    weights = std::move(*source);
  }
  if (llvm::Error err = bindModelWeights(**model, weights.get()))
    return err;

  bool all = true;
  for (size_t b = 0; b < inputs->batches.size(); ++b) {
    std::string label =
        inputs->isList ? llvm::formatv("batch {0}: ", b).str() : "";
    auto matched = verifyBatch(o, *manifest, **model, weights.get(),
                               inputs->batches[b], label);
    if (!matched)
      return inputs->isList ? withContext(matched.takeError(),
                                          llvm::formatv("batch {0}", b).str())
                            : matched.takeError();
    all &= *matched;
  }
  llvm::outs() << (all ? "verify: stages match the model\n"
                       : "verify: stages DIFFER from the model\n");
  return all ? 0 : 1;
}

Command addVerifyCommand(CLI::App &parent) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App *app = parent.add_subcommand(
      "verify",
      "Run the stages one after the other and compare with the unsplit model");
  app->footer("Load MODEL.pt and the stages of MANIFEST, run both on the "
              "same input in this "
              "process (the stages in order, following the manifest's "
              "dataflow), and compare "
              "every output with torch.isclose semantics (equal NaNs match). "
              "Exit 0 when "
              "all match, 1 with a "
              "per-output report when any differs, 2 on an error.");
  app->add_option("model", o->modelPath, "The unsplit TorchScript model")
      ->required()
      ->check(pathOption());
  app->add_option("manifest", o->manifestPath,
                  "manifest.json written by ppc split")
      ->required()
      ->check(pathOption());
  app->add_option(
         "--input", o->inputPath,
         "Input file written by torch.save, as ppc run reads it: one batch "
         "(a tensor or a tuple/list of tensors, one per model input) or a "
         "list of batches, each verified")
      ->required()
      ->check(pathOption());
  app->add_option("--rtol", o->rtol, "Relative tolerance")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
  app->add_option("--atol", o->atol, "Absolute tolerance")
      ->capture_default_str()
      ->transform(finiteAtLeast(0));
  addWeightFlags(*app, o->weights);
  return {app, [o]() { return runVerify(*o); }};
}

} // namespace ppc
