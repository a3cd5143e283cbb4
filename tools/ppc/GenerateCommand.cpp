//===- tools/ppc/GenerateCommand.cpp - ppc generate -----------------------===//
//
// CLI11 wiring for `ppc generate`: one rank of a decoding job, started by
// ppc launch or torchrun. It reads the prompt, checks what it will write
// against what it reads (OutputGuard), runs a Generator
// (runtime/generate/Generator.h) and, on the last stage's rank, writes the
// new tokens once every rank has finished.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/NumberRules.h"
#include "lib/OutputGuard.h"
#include "lib/TensorIO.h"
#include "runtime/generate/Generator.h"
#include "runtime/train/Checkpoint.h"
#include "tools/ppc/DecodeFlags.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/OutputClaims.h"
#include "tools/ppc/Progress.h"
#include "tools/ppc/RankProcess.h"
#include "tools/ppc/RuntimeFlags.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <memory>

namespace ppc {

namespace {
struct GenerateCommandOptions {
  std::string manifestPath, promptPath, outputPath;
  /// One N for every prompt, or one per prompt of the list.
  std::vector<int64_t> maxNewTokens{16};
  DecodeFlags decode;
  RuntimeFlags flags;
  bool stats = false, stream = false;
};

/// --stream: one JSON line per new token of a row on stdout, flushed at
/// once: {"request":0,"row":1,"index":0,"token":42}, with
/// "finish_reason":"stop" or "length" on a row's last token.
void printToken(const PickedToken &t) {
  llvm::json::Object line{{"request", t.request},
                          {"row", t.row},
                          {"index", t.index},
                          {"token", t.token}};
  if (t.finish != FinishReason::None)
    line["finish_reason"] = finishReasonName(t.finish);
  llvm::outs() << llvm::json::Value(std::move(line)) << "\n";
  llvm::outs().flush();
}

/// Claims the outputs against what the job reads. Errors: OutputGuard's.
llvm::Error guardOutputs(const GenerateCommandOptions &o,
                         const RunOptions &run) {
  OutputGuard guard;
  keepManifestFiles(guard, o.manifestPath, metaCacheDirOf(run, o.manifestPath));
  guard.keep(o.promptPath, "the prompt");
  // A manifest inside a training checkpoint: no output lands in it.
  OutputClaim output{"--output", o.outputPath};
  output.required = true;
  return claimOutputs(guard, {{o.manifestPath, "the checkpoint"}},
                      {output,
                       {"--trace", o.flags.tracePath},
                       {"--stats-json", o.flags.statsJsonPath}});
}

/// The prompt file's tensors: one prompt, or several (a tuple or list).
/// Errors: loadTensors's; "--prompt: 'p.pt' holds no prompt (an empty list
/// or tuple)", which would otherwise decode nothing and write [].
llvm::Expected<std::vector<at::Tensor>> loadPrompts(llvm::StringRef path) {
  auto values = loadTensors(path);
  if (!values)
    return values.takeError();
  if (values->empty())
    return makeError("--prompt: '" + printable(path, 4096) +
                     "' holds no prompt (an empty list or tuple)");
  std::vector<at::Tensor> prompts;
  for (const c10::IValue &v : *values)
    prompts.push_back(v.toTensor());
  return prompts;
}

/// Decodes every prompt, each for its --max-new-tokens: one with
/// generate(), several submitted together and flushed, so that their
/// groups share the slots. The tokens on the output rank, undefined
/// elsewhere. Errors: a count of --max-new-tokens other than 1 or one per
/// prompt; generate()'s and flush()'s.
llvm::Expected<std::vector<at::Tensor>>
decodeAll(Generator &generator, const std::vector<at::Tensor> &prompts,
          const std::vector<int64_t> &maxNewTokens) {
  if (maxNewTokens.size() != 1 && maxNewTokens.size() != prompts.size())
    return makeError(llvm::formatv("--max-new-tokens: {0} values for {1} "
                                   "prompt{2}; give one, or one per prompt",
                                   maxNewTokens.size(), prompts.size(),
                                   prompts.size() == 1 ? "" : "s")
                         .str());
  auto newTokens = [&](size_t i) {
    return maxNewTokens[maxNewTokens.size() == 1 ? 0 : i];
  };
  if (prompts.size() == 1) {
    auto tokens = generator.generate(prompts[0], newTokens(0));
    if (!tokens)
      return tokens.takeError();
    return std::vector<at::Tensor>{*tokens};
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    if (auto id = generator.submit(prompts[i], newTokens(i)); !id)
      return withContext(id.takeError(), "prompt " + std::to_string(i));
  if (llvm::Error err = generator.flush())
    return err;
  std::vector<at::Tensor> out;
  while (std::optional<at::Tensor> tokens = generator.next())
    out.push_back(*tokens);
  return out;
}

/// Writes --output and --stats-json and says so: "wrote tokens.pt (4
/// sequences, 128 new tokens, 2.560 s, 50.0 tokens/s overall)": the whole
/// decode's rate, start-up and prefill included (progress lines show the
/// steady rate after the first tokens, which is higher).
llvm::Error writeResults(const GenerateCommandOptions &o,
                         const Generator &generator,
                         const std::vector<at::Tensor> &tokens) {
  std::vector<std::vector<c10::IValue>> each;
  for (const at::Tensor &t : tokens)
    each.push_back({t});
  if (llvm::Error err = tokens.size() == 1
                            ? saveTensors(o.outputPath, each[0], false)
                            : saveTensorList(o.outputPath, each, false))
    return err;
  const GenerateStats &s = generator.stats();
  if (!o.flags.statsJsonPath.empty())
    if (llvm::Error err =
            writeJSONFileAtomically(o.flags.statsJsonPath, s.json()))
      return err;
  if (!o.flags.quiet)
    llvm::errs() << "wrote " << o.outputPath << " (" << s.sequences
                 << " sequences, " << s.generatedTokens << " new tokens, "
                 << formatSeconds(s.totalMs / 1000) << ", "
                 << formatRate(s.tokensPerSecond(), "tokens") << " overall)\n";
  return llvm::Error::success();
}

/// The note for a decode whose groups in flight (min(groups, slots)) are
/// fewer than its stages: each stage then idles while the others work.
/// "" when they are not.
std::string groupsNote(const GenerateStats &s, int stages, int64_t batch) {
  int64_t inFlight = std::min(s.groups, s.slots);
  if (inFlight >= stages || stages < 2)
    return "";
  return llvm::formatv(
             "note: {0} group{1} of sequences in flight on {2} stages: each "
             "stage idles while the others work; at least {2} groups "
             "({3} prompt rows of the program's batch {4}{5}) keep every "
             "stage busy",
             inFlight, inFlight == 1 ? "" : "s", stages, stages * batch, batch,
             s.slots < s.groups ? ", and --slots " + std::to_string(stages)
                                : std::string())
      .str();
}

/// What every rank must have alike besides the runtime's own record
/// (runtime/link/Agreement.h) and DecodeFlags': the prompt, the groups
/// and the new tokens.
static void recordGenerateFlags(const GenerateCommandOptions &o,
                                Agreement &record) {
  record.setFileDigest("--prompt", o.promptPath);
  if (o.flags.microbatchesGiven)
    record.set("--microbatches", std::to_string(o.flags.microbatches));
  else
    record.setPresence("--microbatches", std::nullopt);
  std::vector<std::string> counts;
  for (int64_t n : o.maxNewTokens)
    counts.push_back(std::to_string(n));
  record.set("--max-new-tokens", llvm::join(counts, ","));
}

llvm::Expected<int> runGenerate(const GenerateCommandOptions &o) {
  auto env = startRank();
  if (!env)
    return env.takeError();
  GenerateOptions options;
  if (llvm::Error err = o.flags.applyTo(options.run))
    return err;
  options.groups = o.flags.microbatchesGiven ? o.flags.microbatches : 0;
  o.decode.applyTo(options);
  if (o.stream)
    options.onToken = printToken;
  recordGenerateFlags(o, options.run.agreement);
  if (llvm::Error err = guardOutputs(o, options.run))
    return err;
  auto prompts = loadPrompts(o.promptPath);
  if (!prompts)
    return prompts.takeError();
  std::optional<Progress> progress;
  ProgressStyle style = progressStyle(2, o.flags.quiet, o.flags.progress);
  options.progress = [&](const GenerateProgress &p) {
    if (!progress)
      progress.emplace(llvm::errs(), style, "token", "tokens", p.total);
    progress->update(p.tokens, -1);
  };
  auto generator = Generator::create(o.manifestPath, *env, options);
  if (!generator)
    return generator.takeError();
  auto tokens = decodeAll(**generator, *prompts, o.maxNewTokens);
  if (progress)
    progress->clear();
  if (!tokens)
    return tokens.takeError();
  if (llvm::Error err = (*generator)->finish())
    return err;
  if (o.flags.printSchedule)
    (*generator)->printSchedule(llvm::outs());
  if (o.stats)
    llvm::outs() << (*generator)->stats().line() << "\n";
  llvm::outs().flush();
  if (env->rank == (*generator)->outputRank()) {
    if (llvm::Error err = writeResults(o, **generator, *tokens))
      return err;
    std::string note =
        groupsNote((*generator)->stats(), (*generator)->stageCount(),
                   (*generator)->batchSize().value_or(1));
    if (!note.empty() && !o.flags.quiet)
      llvm::errs() << note << "\n";
  }
  return 0;
}

} // namespace

Command addGenerateCommand(CLI::App &parent) {
  auto o = std::make_shared<GenerateCommandOptions>();
  CLI::App *app = parent.add_subcommand(
      "generate", "Decode tokens with a split decoder, one rank of the job "
                  "(start every rank with ppc launch or torchrun)");
  app->footer(
      "Autoregressive decoding with the stages of MANIFEST, a program that "
      "keeps a cache in its state (a decoder exported the ExecuTorch way: "
      "docs/generate.md). The prompt's B rows run as groups of the program's "
      "static batch b, each with its own copy of every stage's state, kept on "
      "the stage's rank; the groups are in flight together, so with at least "
      "as many groups as stages every stage is busy. The prompt is fed one "
      "token a step, then each picked token; the last stage's rank picks the "
      "tokens and writes --output, int64 [B, N] (the new tokens only).");
  app->add_option("manifest", o->manifestPath,
                  "manifest.json written by ppc split")
      ->required()
      ->check(pathOption());
  app->add_option(
         "--prompt", o->promptPath,
         "Token ids, int64 [B, P], written by torch.save; or a list of "
         "such prompts, decoded together (--output is then the list "
         "of their tokens)")
      ->required()
      ->check(pathOption());
  app->add_option("--output", o->outputPath,
                  "Where the last stage's rank writes the new tokens, int64 "
                  "[B, N] (torch.load reads it)")
      ->required()
      ->check(pathOption());
  app->add_option("--max-new-tokens", o->maxNewTokens,
                  "N: tokens to decode after each prompt; with a list of "
                  "prompts, one N for all or one per prompt (8,16,4)")
      ->default_str("16")
      ->delimiter(',')
      ->transform(intInRange(1, kMaxMicrobatches));
  o->decode.addTo(*app);
  o->flags.addTo(*app);
  app->get_option("--microbatches")
      ->description("Groups of sequences the prompt makes (default: B / b, "
                    "the prompt's rows over the program's batch); given, the "
                    "prompt must make exactly this many")
      ->default_str("B / b");
  app->get_option("--print-schedule")
      ->description("Print this rank's schedule of the decode ('schedule: "
                    "rank=R ...' lines) once it has run");
  app->add_flag("--stats", o->stats,
                "Print one 'stats: rank=R ...' line per rank: tokens/s, time "
                "to the first token, the latency of a decode step");
  app->add_flag("--stream", o->stream,
                "On the last stage's rank, print each new token as soon as it "
                "is picked, one JSON line each on stdout: {\"request\": the "
                "prompt's index in --prompt's list (0 for one prompt), "
                "\"row\", \"index\": the token's among the row's new ones, "
                "\"token\"}, with \"finish_reason\": \"stop\" (--eos-id) or "
                "\"length\" on a row's last; a row's lines come in order");
  return {app, [o] { return runGenerate(*o); }};
}

} // namespace ppc
