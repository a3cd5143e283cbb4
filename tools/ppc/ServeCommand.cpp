//===- tools/ppc/ServeCommand.cpp - ppc serve -----------------------------===//
//
// CLI11 wiring for `ppc serve`: one rank of a decoding service, started by
// ppc launch or torchrun. Every rank makes a Generator
// (runtime/generate/Generator.h) and runs the service over it
// (tools/ppc/serve/Service.h); the last stage's rank listens for HTTP.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/NumberRules.h"
#include "runtime/generate/Generator.h"
#include "tools/ppc/DecodeFlags.h"
#include "tools/ppc/OptionChecks.h"
#include "tools/ppc/RankProcess.h"
#include "tools/ppc/RuntimeFlags.h"
#include "tools/ppc/serve/Service.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>

namespace ppc {

namespace {
struct ServeCommandOptions {
  std::string manifestPath, apiKeyFile;
  serve::ServeOptions serve;
  int gatherMs = 10;
  DecodeFlags decode;
  RuntimeFlags flags;
};

/// The key of --api-key-file: its first line, without surrounding
/// whitespace. Errors name the file, never its content.
llvm::Expected<std::string> readApiKey(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return makeError("--api-key-file: cannot read '" + printable(path) +
                     "': " + buffer.getError().message());
  if ((*buffer)->getBufferSize() > 4096)
    return makeError("--api-key-file: '" + printable(path) +
                     "' is over 4096 bytes; expected one line, the key");
  llvm::StringRef key = (*buffer)->getBuffer().split('\n').first.trim();
  if (key.empty())
    return makeError("--api-key-file: '" + printable(path) +
                     "' holds no key (its first line is empty)");
  for (char c : key)
    if (c < 0x21 || c > 0x7e)
      return makeError("--api-key-file: the key in '" + printable(path) +
                       "' has a character outside printable ASCII");
  return key.str();
}

bool isLoopback(llvm::StringRef host) {
  return host == "localhost" || host == "::1" || host.startswith("127.");
}

llvm::Expected<int> runServe(ServeCommandOptions &o) {
  auto env = startRank();
  if (!env)
    return env.takeError();
  GenerateOptions options;
  if (llvm::Error err = o.flags.applyTo(options.run))
    return err;
  o.decode.applyTo(options);
  if (!o.apiKeyFile.empty()) {
    auto key = readApiKey(o.apiKeyFile);
    if (!key)
      return key.takeError();
    o.serve.apiKey = std::move(*key);
  }
  o.serve.slots = o.decode.slots;
  o.serve.gatherSeconds = o.gatherMs / 1000.0;
  serve::Service service(o.serve);
  options.onToken = [&service](const PickedToken &t) { service.onToken(t); };
  auto generator = Generator::create(o.manifestPath, *env, options);
  if (!generator)
    return generator.takeError();
  if ((*generator)->rank() == (*generator)->outputRank() &&
      !isLoopback(o.serve.host) && o.serve.apiKey.empty() && !o.flags.quiet)
    llvm::errs() << "warning: serving on " << o.serve.host
                 << " without --api-key-file: anyone who reaches this port "
                    "can use the model\n";
  if (llvm::Error err = service.run(**generator))
    return err;
  if (llvm::Error err = (*generator)->finish())
    return err;
  return 0;
}
} // namespace

Command addServeCommand(CLI::App &parent) {
  auto o = std::make_shared<ServeCommandOptions>();
  CLI::App *app = parent.add_subcommand(
      "serve", "Serve a split decoder over HTTP, one rank of the service "
               "(start every rank with ppc launch or torchrun)");
  app->footer(
      "The stages of MANIFEST (a decoder that keeps its cache, as for ppc "
      "generate) stay loaded; the last stage's rank listens on --host:--port "
      "and prints 'serving on http://HOST:PORT'. POST /v1/completions takes "
      "OpenAI's completion fields (prompt as token ids, max_tokens, "
      "temperature, top_p, top_k, seed, stop_token_ids, stream; the sampling "
      "flags are their defaults) and answers with token ids; GET /health; GET "
      "/metrics in Prometheus' text format. "
      "Requests are decoded in rounds: those that wait when a round starts "
      "decode together, their groups sharing --slots. SIGTERM (or Ctrl-C) "
      "stops taking requests, answers those taken, and ends every rank. "
      "docs/serve.md has a client.");
  app->add_option("manifest", o->manifestPath,
                  "manifest.json written by ppc split")
      ->required()
      ->check(pathOption());
  app->add_option("--host", o->serve.host,
                  "The address to listen on; anything but loopback wants "
                  "--api-key-file")
      ->capture_default_str();
  app->add_option("--port", o->serve.port, "The port (0: any free one)")
      ->capture_default_str()
      ->transform(intInRange(0, 65535));
  app->add_option("--api-key-file", o->apiKeyFile,
                  "A file whose first line is the key: requests must send "
                  "'Authorization: Bearer KEY' (else 401). The key is never "
                  "printed")
      ->check(pathOption());
  app->add_option("--max-request-bytes", o->serve.maxRequestBytes,
                  "Larger bodies get 413")
      ->capture_default_str()
      ->transform(intInRange(64, 1 << 30));
  app->add_option("--max-queue", o->serve.maxQueue,
                  "Requests that may wait for a round; more get 429")
      ->capture_default_str()
      ->transform(intInRange(1, kMaxMicrobatches));
  app->add_option("--gather-ms", o->gatherMs,
                  "Once a request waits, how long the next round waits for "
                  "others to join it (requests sent together decode "
                  "together)")
      ->capture_default_str()
      ->transform(intInRange(0, 60000));
  app->add_option("--max-tokens", o->serve.limits.defaultMaxTokens,
                  "max_tokens of a request that does not say")
      ->capture_default_str()
      ->transform(intInRange(1, kMaxMicrobatches));
  o->decode.addTo(*app);
  o->flags.addTo(*app);
  for (const char *unused : {"--microbatches", "--print-schedule", "--progress",
                             "--stats-json", "--trace"})
    app->remove_option(app->get_option(unused));
  return {app, [o] { return runServe(*o); }};
}

} // namespace ppc
