//===- tools/ppc/serve/Service.h - ppc serve's service ----------*- C++ -*-===//
//
// A pipelined decoder behind HTTP (docs/serve.md). Every rank of the job
// runs Service::run over its Generator (runtime/generate/Generator.h). The
// rank that picks the tokens, the generator's outputRank(), serves HTTP
// (cpp-httplib): POST /v1/completions, GET /health, GET /metrics. The
// ranks work in rounds: the serving rank takes every request that waits,
// hands them to every rank (Generator::share), and all ranks submit them
// and flush them together, their groups queued for the slots; tokens go to
// their clients as they are picked (GenerateOptions::onToken, routed by
// onToken here). A round with nothing to do is sent at least every second,
// so that the other ranks' waits never time out while the service idles.
//
// Requests that arrive during a round wait for the next one: a round is a
// flush() of the generator, which takes no request once it has started. A
// round starts ServeOptions::gatherSeconds after the first request waits,
// so that requests sent together decode together.
//
// SIGTERM or SIGINT on the serving rank stops taking requests (503), ends
// the rounds once the requests taken are answered, and tells every rank to
// exit; the other ranks wait for that word. A rank lost mid-round fails
// every open request with a 503 naming it, and run() returns the error.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_SERVE_SERVICE_H
#define PPC_TOOLS_PPC_SERVE_SERVICE_H

#include "runtime/generate/Generator.h"
#include "tools/ppc/serve/Completion.h"

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ppc::serve {

struct ServeOptions {
  /// Where the serving rank listens; port 0: any free port.
  std::string host = "127.0.0.1";
  int port = 8000;
  /// Requests must carry "Authorization: Bearer KEY"; empty: none needed.
  std::string apiKey;
  /// Bodies above this get 413; requests beyond this many waiting get 429.
  size_t maxRequestBytes = 1 << 20;
  int64_t maxQueue = 256;
  /// What a request is checked against: its sequences and max_tokens here;
  /// run() fills in the program's vocabulary, cache and sampling.
  RequestLimits limits;
  /// Slots of the generator (0: every group at once), for the slots-in-use
  /// gauge.
  int slots = 0;
  /// The longest a round may wait for requests.
  double idleRoundSeconds = 1;
  /// Once a request waits, how long the round waits for others to join
  /// it (clients that send together then share groups).
  double gatherSeconds = 0.01;
};

class Service {
public:
  explicit Service(ServeOptions options);
  ~Service();

  /// GenerateOptions::onToken of the generator run() gets.
  void onToken(const PickedToken &token);

  /// Serves until the end (above). The serving rank prints "serving on
  /// http://HOST:PORT" on stdout once it listens. Errors: the address
  /// cannot be bound ("cannot listen on 127.0.0.1:80: ..."), the
  /// generator's (a lost rank), a round that cannot be read.
  llvm::Error run(Generator &generator);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace ppc::serve

#endif // PPC_TOOLS_PPC_SERVE_SERVICE_H
