//===- tools/ppc/WeightFlags.cpp - --weights and the options beside it ----===//
#include "tools/ppc/WeightFlags.h"

#include "lib/Error.h"
#include "tools/ppc/OptionChecks.h"

namespace ppc {

void addWeightFlags(CLI::App &app, WeightOptions &options) {
  app.add_option("--weights", options.path,
                 "Checkpoint to take the weights from: a .safetensors file, "
                 "or a directory of shards with model.safetensors.index.json "
                 "(as save_pretrained writes it); needed by a program "
                 "exported on the meta device (docs/weights.md)")
      ->check(pathOption());
  app.add_option_function<std::string>(
         "--weights-prefix",
         [&options](const std::string &prefix) { options.prefix = prefix; },
         "The prefix the program's weight names carry and the checkpoint's "
         "lack (e.g. model.); default: the one (or none) under which the "
         "checkpoint holds the most program weights; ppc join --format "
         "safetensors drops it (default: the prefix all names share)")
      ->type_name("PREFIX");
  app.add_option_function<std::string>(
         "--weights-extra",
         [&options](const std::string &policy) {
           options.ignoreExtra = policy == "ignore";
         },
         "What a checkpoint tensor that is no weight of the program gets: "
         "error (the default) or ignore")
      ->check(CLI::IsMember({"error", "ignore"}))
      ->type_name("error|ignore");
  app.add_option_function<std::vector<std::string>>(
         "--weights-tied",
         [&options](const std::vector<std::string> &pairs) {
           for (const std::string &pair : pairs)
             llvm::consumeError(parseTiedPair(pair, options));
         },
         "DST=SRC: the checkpoint lacks DST because it is SRC's tensor (tied "
         "weights; e.g. lm_head.weight=model.embed_tokens.weight), "
         "repeatable; a program exported on the meta device does not record "
         "which weights share a tensor, so name them here unless the "
         "checkpoint's config.json ties word embeddings (then the one "
         "[vocab_size, N] tensor of the head's dtype is taken)")
      ->check(CLI::Validator(
          [](std::string &value) -> std::string {
            WeightOptions scratch;
            llvm::Error err = parseTiedPair(value, scratch);
            return err ? llvm::toString(std::move(err)) : std::string();
          },
          "DST=SRC"));
}

} // namespace ppc
