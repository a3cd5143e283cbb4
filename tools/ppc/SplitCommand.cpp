//===- tools/ppc/SplitCommand.cpp - ppc split -----------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "passes/Compile.h"
#include "runtime/platform/Threads.h"
#include "runtime/schedule/Placement.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/WeightFlags.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

/// Reads a cost model name into a CostKind with parseCostKind(). Not
/// CLI::CheckedTransformer: it would also accept the enum's integer values
/// ("--cost 2") and name them in its error message.
static CLI::Validator costKindOption() {
  std::vector<std::string> names;
  for (CostKind kind : kAllCostKinds)
    names.push_back(costKindName(kind).str());
  std::string list = llvm::join(names, ", ");
  return CLI::Validator(
      [list](std::string &value) -> std::string {
        std::optional<CostKind> kind = parseCostKind(value);
        if (!kind)
          return "'" + printable(value) + "' is not a cost model (" + list +
                 ")";
        value = std::to_string(static_cast<int>(*kind));
        return "";
      },
      llvm::join(names, "|"));
}

/// What `ppc split` prints of `result`, written to `outDir`: the stages,
/// the rank counts they run on, what each runs, then notes and warnings.
static void printSplit(const CompileResult &result, const std::string &outDir) {
  const Manifest *manifest = &result.manifest;
  double total = 0;
  for (const StageInfo &s : manifest->stages)
    total += s.predictedCost;
  llvm::outs() << llvm::formatv("wrote {0} stages to {1} (cost model: {2})\n",
                                manifest->stages.size(), terminalText(outDir),
                                manifest->costModel);
  // Where the user picks the stage count, what it allows.
  llvm::outs() << "  they run on "
               << rankCountsText(static_cast<int>(manifest->stages.size()))
               << " (stage k on rank k mod WORLD_SIZE)\n";
  for (const StageInfo &s : manifest->stages)
    llvm::outs() << llvm::formatv(
        "  stage {0}: {1,5:f1}% of predicted cost, {2} parameters, "
        "{3} inputs, {4} outputs{5}{6}\n",
        s.index, total > 0 ? 100.0 * s.predictedCost / total : 0.0,
        s.parameterCount, s.inputs.size(), s.outputs.size(),
        result.stageMemory.empty()
            ? std::string()
            : llvm::formatv(", memory {0} ({1} bytes)",
                            formatBytes(result.stageMemory[s.index]),
                            result.stageMemory[s.index])
                  .str(),
        s.beginsAt.empty() ? ""
                           : " (begins at " + terminalText(s.beginsAt) + ")");
  for (const StageInfo &s : manifest->stages)
    if (s.modules && !s.modules->empty())
      llvm::outs() << llvm::formatv("  stage {0} runs {1}\n", s.index,
                                    terminalText(describeModules(*s.modules)));
  for (const std::string &note : result.notes)
    llvm::errs() << "note: " << terminalText(note) << "\n";
  for (const std::string &warning : result.warnings)
    llvm::errs() << "warning: " << terminalText(warning) << "\n";
}

Command addSplitCommand(CLI::App &parent) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *app = parent.add_subcommand(
      "split", "Compile a model into pipeline stages and a manifest");
  app->footer("Compile a model (a torch.export program saved by "
              "torch.export.save, or a TorchScript module saved by "
              "torch.jit.save) into N "
              "standalone stage modules OUTDIR/stage_K.pt2 (or .pt), each "
              "holding only "
              "its own weights, and a JSON manifest OUTDIR/manifest.json "
              "describing the values that flow between them (see "
              "docs/manifest.md; choosing the stages: docs/split.md). OUTDIR "
              "is replaced atomically, and only "
              "when it is empty or holds nothing but an earlier ppc output "
              "(its manifest, the stage files it names and meta caches); on "
              "any error it is left as it was. OUTDIR must not hold the "
              "model.");
  app->add_option("model", opts->modelPath,
                  "Model file: a torch.export program (MODEL.pt2) or a "
                  "TorchScript module (MODEL.pt)")
      ->required()
      ->check(pathOption());
  app->add_option(
         "-o,--output", opts->outDir,
         "Output directory; created, or replaced if it holds only an earlier "
         "ppc split output")
      ->required()
      ->check(pathOption());
  auto *stages = app->add_option("--stages", opts->partition.stages,
                                 "Number of stages: contiguous in graph order, "
                                 "chosen to minimize the most "
                                 "expensive stage under --cost")
                     ->transform(intInRange(1));
  auto *splitAt = app->add_option("--split-at", opts->partition.splitAt,
                                  "Module paths where stages begin, in "
                                  "execution order, as in named_modules() "
                                  "(e.g. layer3,fc); a stage begins at the "
                                  "first operation run on behalf of "
                                  "that module")
                      ->delimiter(',');
  stages->excludes(splitAt);
  splitAt->excludes(stages);
  app->add_option(
         "--cost", opts->cost,
         "Cost model for --stages: params (parameter and buffer bytes, the "
         "default), flops (estimated FLOPs on --example-input), nodes (one per "
         "operation), profile (each operation timed on --example-input on this "
         "machine, one thread, median of several runs, then the chosen stages "
         "timed alone; docs/split.md)")
      ->transform(costKindOption());
  app->add_option(
      "--example-input", opts->exampleInput,
      "Input file (torch.save of a tensor or tuple of tensors, one "
      "microbatch) that --cost flops and --cost profile run the model on");
  auto *memory =
      app->add_option("--max-stage-memory", opts->partition.maxStageMemory,
                      "Cap on each stage's parameters and buffers plus the "
                      "activations it keeps for one microbatch (measured on "
                      "--example-input; needs --cost profile or flops), in "
                      "bytes or with a suffix K, M, G (powers of 1024)")
          ->transform(byteCountOption());
  memory->excludes(splitAt);
  addWeightFlags(*app, opts->weights);

  return {app, [=]() -> llvm::Expected<int> {
            if (opts->partition.splitAt.empty() && app->count("--stages") == 0)
              return makeError(
                  "ppc split needs --stages N or --split-at PATHS");
            // Times add up to stage times only if every operation runs as a
            // rank with --threads 1 runs it.
            if (opts->cost == CostKind::Profile)
              boundThreads(1);
            auto result = compileModel(*opts);
            if (!result)
              return result.takeError();
            printSplit(*result, opts->outDir);
            return 0;
          }};
}

} // namespace ppc
