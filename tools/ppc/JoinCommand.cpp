//===- tools/ppc/JoinCommand.cpp - ppc join -------------------------------===//
#include "tools/ppc/Commands.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/WeightFlags.h"

#include "lib/Error.h"
#include "lib/Join.h"
#include "lib/JoinSafetensors.h"
#include "runtime/train/Checkpoint.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace ppc {

namespace {
struct JoinOptions {
  std::string manifestPath, outputPath;
  /// "model" (the manifest's format) or "safetensors".
  std::string format = "model";
  SafetensorsJoin safetensors;
};
} // namespace

static std::string plural(size_t n, llvm::StringRef word) {
  return llvm::formatv("{0} {1}{2}", n, word, n == 1 ? "" : "s").str();
}

/// ppc join --format safetensors.
static llvm::Expected<int> joinSafetensors(JoinOptions &o,
                                           const std::string &manifest) {
  o.safetensors.outputDir = o.outputPath;
  o.safetensors.prefix = o.safetensors.weights.prefix;
  auto report = joinToSafetensors(manifest, o.safetensors);
  if (!report)
    return report.takeError();
  llvm::outs() << llvm::formatv(
      "joined {0}: {1} ({2} bytes) into {3} in {4}{5}\n",
      plural(report->stages, "stage"), plural(report->tensors, "tensor"),
      report->bytes, plural(report->shards, "shard"), o.outputPath,
      report->prefix.empty()
          ? std::string()
          : " (without the prefix '" + report->prefix + "')");
  return 0;
}

Command addJoinCommand(CLI::App &parent) {
  auto o = std::make_shared<JoinOptions>();
  CLI::App *app = parent.add_subcommand(
      "join", "Write the original model with the parameters and buffers of "
              "the stage files: use after ppc train --save");
  app->footer(
      "Load the model MANIFEST was split from (its source path; its size and "
      "SHA-256 must match the manifest), put every parameter and buffer of "
      "the stage files back under its name, and save the result as one "
      "TorchScript module that torch.jit.load reads. Use after 'ppc train "
      "--save OUTDIR' to get the trained model back: "
      "'ppc join OUTDIR/manifest.json -o trained.pt'. Stage files are checked "
      "against the manifest's hashes; each stage tensor must exist in the "
      "original with the same dtype and shape, and the copies of a tensor "
      "held by several stages (tied weights) must be equal. The original's "
      "training/eval mode is kept. OUT is written whole or not at all and "
      "must not be the manifest, a stage file or the original model. "
      "MANIFEST may also be a --save directory, or a ppc train "
      "--checkpoint-dir (its newest complete checkpoint, verified) or one "
      "checkpoint in it. See docs/join.md.");
  app->add_option("manifest", o->manifestPath,
                  "manifest.json of the (trained) stages, or a directory "
                  "holding one or checkpoints")
      ->required()
      ->check(pathOption());
  app->add_option(
         "-o,--output", o->outputPath,
         "The joined model to write, in the manifest's format (OUT.pt, "
         "OUT.pt2); with --format safetensors, a directory of shards")
      ->required()
      ->check(pathOption());
  app->add_option("--format", o->format,
                  "model (the default): the original model in its format; "
                  "safetensors: the weights as Hugging Face shards in the "
                  "directory OUT, with model.safetensors.index.json, under "
                  "the model's own names (docs/weights.md)")
      ->check(CLI::IsMember({"model", "safetensors"}));
  app->add_option("--max-shard-size", o->safetensors.maxShardBytes,
                  "With --format safetensors: the most bytes a shard holds "
                  "(a larger tensor gets one of its own), with a suffix K, "
                  "M, G (powers of 1024); default 5000000000, as "
                  "save_pretrained's 5GB")
      ->transform(byteCountOption());
  // The stages' weights may come from a checkpoint (a program exported on
  // the meta device); --weights-prefix also names the prefix to drop.
  addWeightFlags(*app, o->safetensors.weights);
  return {app, [o]() -> llvm::Expected<int> {
            if (llvm::Error err = checkOutputsOutsideCheckpoints(
                    o->manifestPath, "the checkpoint",
                    {{"--output", o->outputPath}}))
              return err;
            auto manifest = manifestForJoin(o->manifestPath);
            if (!manifest)
              return manifest.takeError();
            if (o->format == "safetensors")
              return joinSafetensors(*o, *manifest);
            if (o->safetensors.weights.given())
              return makeError("--weights is only read with --format "
                               "safetensors");
            auto report = joinStages(*manifest, o->outputPath);
            if (!report)
              return report.takeError();
            llvm::outs() << llvm::formatv(
                "joined {0}: {1} and {2} into {3}",
                plural(report->stages, "stage"),
                plural(report->parameters, "parameter"),
                plural(report->buffers, "buffer"), o->outputPath);
            if (report->unchanged > 0)
              llvm::outs() << llvm::formatv(
                  " ({0} kept from the original: no stage holds {1})",
                  report->unchanged, report->unchanged == 1 ? "it" : "them");
            llvm::outs() << "\n";
            return 0;
          }};
}

} // namespace ppc
