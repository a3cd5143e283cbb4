//===- tools/ppc/serve/Service.cpp - ppc serve's service ------------------===//
//
// This file implements Service (see Service.h): the serving rank's HTTP
// handlers, which queue checked requests and answer them from what the
// decoding thread delivers, and the rounds every rank takes part in.
//
// One mutex guards the requests; each request has a condition variable its
// handler waits on. The decoding thread (run()) is the only one that calls
// the generator, but for cancel(), which is thread-safe.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/serve/Service.h"

#include "lib/Error.h"
#include "lib/SafeRead.h"
#include "runtime/platform/Duration.h"
#include "tools/ppc/serve/Metrics.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace ppc::serve {

namespace {
using Clock = SteadyClock;

/// Set by SIGTERM and SIGINT.
std::atomic<bool> gStopAsked{false};
extern "C" void askStop(int) { gStopAsked = true; }

/// One request, from its handler's queueing to its last token.
struct Completion {
  int64_t id = 0;
  CompletionRequest request;
  Clock::time_point arrival = Clock::now();
  /// Per row: the new tokens, the finish reason ("" while it runs) and the
  /// time of its last token.
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::string> finish;
  std::vector<Clock::time_point> last;
  int64_t rowsLeft = 0;
  bool sawToken = false;
  /// Streaming: tokens not sent yet (row, token, finish reason).
  struct Event {
    int64_t row, token;
    std::string finish;
  };
  std::deque<Event> events;
  /// Done: answered with `status` (200, or the error's) and `error`, or
  /// cancelled (its client went away).
  bool done = false;
  int status = 200;
  std::string error;
  /// The generator's requests of its items.
  std::vector<int64_t> parts;
  std::condition_variable changed;
};

/// One item of a round being decoded: per real row, its request and that
/// request's row (PlannedItem::owners); the rows not finished; the item's
/// groups of the program's batch.
struct Part {
  std::vector<std::pair<std::shared_ptr<Completion>, int64_t>> rows;
  int64_t rowsLeft = 0, groups = 0;
};

llvm::json::Value errorBody(llvm::StringRef message, llvm::StringRef type) {
  return llvm::json::Object{
      {"error", llvm::json::Object{{"message", message}, {"type", type}}}};
}

std::string text(const llvm::json::Value &v) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << v;
  return os.str();
}

at::Tensor promptTensor(const RoundItem &item) {
  int64_t rows = static_cast<int64_t>(item.prompt.size());
  int64_t length = static_cast<int64_t>(item.prompt[0].size());
  at::Tensor t = at::empty({rows, length}, at::kLong);
  int64_t *p = t.data_ptr<int64_t>();
  for (const std::vector<int64_t> &row : item.prompt)
    for (int64_t id : row)
      *p++ = id;
  return t;
}
} // namespace

struct Service::Impl {
  ServeOptions options;
  Metrics metrics;
  Generator *generator = nullptr;
  int64_t batch = 1;

  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<std::shared_ptr<Completion>> waiting;
  /// The requests takeRound() took for the round it made, and the owners
  /// of each of its items' rows.
  std::vector<std::shared_ptr<Completion>> taken;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> owners;
  /// The round being decoded: its parts by the generator's request number.
  std::map<int64_t, Part> parts;
  int64_t nextId = 0;
  bool stopping = false;
  /// Handlers that have not returned (the server stops once none is left).
  std::atomic<int> handlers{0};

  // Under `mutex`.
  void updateGauges();
  void finishRow(Completion &c, int64_t row, const std::string &reason);
  /// One row of `part` (the generator's request `id`) needs no more
  /// tokens; once none of its rows does, its group's steps stop.
  void dropRow(int64_t id, Part &part, bool byGenerator);
  void cancel(Completion &c);
  /// Answers `c`, unless it is done, with `status` and `message`.
  void fail(Completion &c, int status, const std::string &message,
            Outcome outcome);
  void failAll(const std::string &message);

  // HTTP.
  bool authorized(const httplib::Request &req, httplib::Response &res);
  void reply(httplib::Response &res, int status, const llvm::json::Value &v);
  void complete(const httplib::Request &req, httplib::Response &res);
  llvm::json::Value answer(const Completion &c) const;
  bool streamSome(const std::shared_ptr<Completion> &c,
                  httplib::DataSink &sink);

  void route(httplib::Server &server);

  // Rounds.
  llvm::Error lead(Generator &g, bool listening);
  Round takeRound();
  llvm::Error decode(Round &round, bool serving);
  llvm::Error follow(Generator &g);
};

Service::Service(ServeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}
Service::~Service() = default;

void Service::Impl::updateGauges() {
  metrics.setQueueDepth(static_cast<int64_t>(waiting.size()));
  int64_t groups = 0;
  for (const auto &[id, part] : parts)
    if (part.rowsLeft > 0)
      groups += part.groups;
  if (options.slots > 0)
    groups = std::min<int64_t>(groups, options.slots);
  metrics.setSlotsInUse(groups);
}

void Service::Impl::dropRow(int64_t id, Part &part, bool byGenerator) {
  if (--part.rowsLeft == 0 && !byGenerator)
    generator->cancel(id);
}

void Service::Impl::finishRow(Completion &c, int64_t row,
                              const std::string &reason) {
  c.finish[row] = reason;
  if (--c.rowsLeft > 0)
    return;
  c.done = true;
  int64_t generated = 0;
  for (const std::vector<int64_t> &t : c.tokens)
    generated += static_cast<int64_t>(t.size());
  metrics.countTokens(c.request.promptTokens(), generated);
  metrics.countRequest(Outcome::Ok);
}

void Service::Impl::cancel(Completion &c) {
  if (c.done)
    return;
  c.done = true;
  for (int64_t id : c.parts) {
    auto it = parts.find(id);
    if (it == parts.end())
      continue;
    for (auto &[owner, row] : it->second.rows)
      if (owner.get() == &c && c.finish[row].empty())
        dropRow(id, it->second, /*byGenerator=*/false);
  }
  for (auto it = waiting.begin(); it != waiting.end(); ++it)
    if (it->get() == &c) {
      waiting.erase(it);
      break;
    }
  metrics.countRequest(Outcome::Cancelled);
  updateGauges();
}

void Service::Impl::fail(Completion &c, int status, const std::string &message,
                         Outcome outcome) {
  if (c.done)
    return;
  c.done = true;
  c.status = status;
  c.error = message;
  metrics.countRequest(outcome);
  c.changed.notify_all();
}

void Service::Impl::failAll(const std::string &message) {
  for (auto &[id, part] : parts)
    for (auto &[c, row] : part.rows)
      fail(*c, 503, message, Outcome::Failed);
  for (auto &c : taken)
    fail(*c, 503, message, Outcome::Failed);
  for (auto &c : waiting)
    fail(*c, 503, message, Outcome::Failed);
  taken.clear();
  waiting.clear();
  parts.clear();
  stopping = true;
  updateGauges();
}

void Service::onToken(const PickedToken &t) {
  Impl &s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.parts.find(t.request);
  if (it == s.parts.end() ||
      t.row >= static_cast<int64_t>(it->second.rows.size()))
    return; // a padding row
  Part &part = it->second;
  Completion &c = *part.rows[t.row].first;
  int64_t row = part.rows[t.row].second;
  if (c.done || !c.finish[row].empty())
    return;
  Clock::time_point now = Clock::now();
  if (!c.sawToken)
    s.metrics.observeFirstToken(toMilliseconds(now - c.arrival) / 1000);
  else if (!c.tokens[row].empty())
    s.metrics.observeTokenGap(toMilliseconds(now - c.last[row]) / 1000);
  c.sawToken = true;
  c.last[row] = now;
  c.tokens[row].push_back(t.token);
  std::string reason = finishReasonName(t.finish).str();
  if (reason.empty() && c.request.stopTokenIds.count(t.token))
    reason = "stop";
  c.events.push_back({row, t.token, reason});
  if (!reason.empty()) {
    s.finishRow(c, row, reason);
    // Rows stopped by their own stop tokens: once no row of the item needs
    // more, the rest of its group's steps are not needed.
    s.dropRow(t.request, part, t.finish != FinishReason::None);
    s.updateGauges();
  }
  c.changed.notify_all();
}

// HTTP -----------------------------------------------------------------------

void Service::Impl::reply(httplib::Response &res, int status,
                          const llvm::json::Value &v) {
  res.status = status;
  res.set_content(text(v) + "\n", "application/json");
}

bool Service::Impl::authorized(const httplib::Request &req,
                               httplib::Response &res) {
  if (options.apiKey.empty())
    return true;
  std::string given = req.get_header_value("Authorization");
  if (llvm::StringRef(given).startswith("Bearer ") &&
      sameSecret(llvm::StringRef(given).drop_front(7), options.apiKey))
    return true;
  metrics.countRequest(Outcome::Unauthorized);
  res.set_header("WWW-Authenticate", "Bearer");
  reply(res, 401,
        errorBody("missing or wrong API key: send 'Authorization: Bearer KEY' "
                  "with the key of --api-key-file",
                  "authentication_error"));
  return false;
}

llvm::json::Value Service::Impl::answer(const Completion &c) const {
  llvm::json::Array choices;
  int64_t generated = 0;
  for (size_t row = 0; row < c.tokens.size(); ++row) {
    generated += static_cast<int64_t>(c.tokens[row].size());
    choices.push_back(llvm::json::Object{
        {"index", static_cast<int64_t>(row)},
        {"text", ""},
        {"token_ids", llvm::json::Array(c.tokens[row])},
        {"finish_reason", c.finish[row]},
    });
  }
  int64_t prompt = c.request.promptTokens();
  return llvm::json::Object{
      {"id", "cmpl-" + std::to_string(c.id)},
      {"object", "text_completion"},
      {"choices", std::move(choices)},
      {"usage", llvm::json::Object{{"prompt_tokens", prompt},
                                   {"completion_tokens", generated},
                                   {"total_tokens", prompt + generated}}},
  };
}

void Service::Impl::complete(const httplib::Request &req,
                             httplib::Response &res) {
  if (!authorized(req, res))
    return;
  auto parsed = parseCompletion(req.body, options.limits);
  if (!parsed) {
    metrics.countRequest(Outcome::BadRequest);
    reply(
        res, 400,
        errorBody(llvm::toString(parsed.takeError()), "invalid_request_error"));
    return;
  }
  auto c = std::make_shared<Completion>();
  c->request = std::move(*parsed);
  size_t rows = c->request.prompts.size();
  c->tokens.resize(rows);
  c->finish.resize(rows);
  c->last.resize(rows);
  c->rowsLeft = static_cast<int64_t>(rows);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) {
      metrics.countRequest(Outcome::Rejected);
      reply(res, 503,
            errorBody("the service is stopping", "service_unavailable"));
      return;
    }
    if (static_cast<int64_t>(waiting.size()) >= options.maxQueue) {
      metrics.countRequest(Outcome::Rejected);
      reply(res, 429,
            errorBody(llvm::formatv("{0} requests are waiting already "
                                    "(--max-queue); try again later",
                                    waiting.size())
                          .str(),
                      "rate_limit_error"));
      return;
    }
    c->id = nextId++;
    waiting.push_back(c);
    updateGauges();
  }
  arrived.notify_one();
  if (c->request.stream) {
    res.set_header("Cache-Control", "no-cache");
    ++handlers;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, c](size_t, httplib::DataSink &sink) {
          return streamSome(c, sink);
        },
        [this](bool) { --handlers; });
    return;
  }
  std::unique_lock<std::mutex> lock(mutex);
  c->changed.wait(lock, [&] { return c->done; });
  if (c->status != 200)
    reply(res, c->status, errorBody(c->error, "service_unavailable"));
  else
    reply(res, 200, answer(*c));
}

/// Sends what `c` has picked since the last call (one event per token),
/// and [DONE] at the end. A client gone cancels the request.
bool Service::Impl::streamSome(const std::shared_ptr<Completion> &c,
                               httplib::DataSink &sink) {
  std::unique_lock<std::mutex> lock(mutex);
  // Wake now and then to notice a client that went away.
  c->changed.wait_for(lock, std::chrono::milliseconds(200),
                      [&] { return !c->events.empty() || c->done; });
  std::string out;
  while (!c->events.empty()) {
    const Completion::Event &e = c->events.front();
    llvm::json::Value finish = e.finish.empty() ? llvm::json::Value(nullptr)
                                                : llvm::json::Value(e.finish);
    out += "data: " +
           text(llvm::json::Object{
               {"id", "cmpl-" + std::to_string(c->id)},
               {"object", "text_completion"},
               {"choices", llvm::json::Array{llvm::json::Object{
                               {"index", e.row},
                               {"text", ""},
                               {"token_ids", llvm::json::Array{e.token}},
                               {"finish_reason", std::move(finish)}}}},
           }) +
           "\n\n";
    c->events.pop_front();
  }
  bool done = c->done;
  if (done && c->status != 200)
    out += "data: " + text(errorBody(c->error, "service_unavailable")) + "\n\n";
  lock.unlock();
  if (done)
    out += "data: [DONE]\n\n";
  bool sent =
      out.empty() ? sink.is_writable() : sink.write(out.data(), out.size());
  if (!sent) {
    std::lock_guard<std::mutex> relock(mutex);
    cancel(*c);
    return false;
  }
  if (done)
    sink.done();
  return true;
}

// Rounds ---------------------------------------------------------------------

Round Service::Impl::takeRound() {
  std::unique_lock<std::mutex> lock(mutex);
  arrived.wait_for(lock,
                   std::chrono::milliseconds(
                       static_cast<int64_t>(options.idleRoundSeconds * 1000)),
                   [&] { return !waiting.empty() || gStopAsked; });
  if (!waiting.empty() && !gStopAsked)
    arrived.wait_for(lock,
                     std::chrono::microseconds(
                         static_cast<int64_t>(options.gatherSeconds * 1e6)),
                     [] { return gStopAsked.load(); });
  if (gStopAsked && !stopping) {
    stopping = true;
    llvm::errs() << "ppc serve: stopping: answering the requests taken, "
                    "refusing new ones\n";
  }
  Round round;
  taken.assign(waiting.begin(), waiting.end());
  waiting.clear();
  updateGauges();
  std::vector<std::pair<int64_t, const CompletionRequest *>> requests;
  for (const std::shared_ptr<Completion> &c : taken)
    requests.push_back({c->id, &c->request});
  owners.clear();
  for (PlannedItem &p : planRound(requests, batch)) {
    round.items.push_back(std::move(p.item));
    owners.push_back(std::move(p.owners));
  }
  round.stop = stopping && round.items.empty();
  return round;
}

/// Submits the round's items and decodes them (every rank alike). On the
/// serving rank, its requests' parts are registered first.
llvm::Error Service::Impl::decode(Round &round, bool serving) {
  Generator &g = *generator;
  std::map<int64_t, std::shared_ptr<Completion>> byId;
  if (serving) {
    std::lock_guard<std::mutex> lock(mutex);
    for (std::shared_ptr<Completion> &c : taken)
      byId[c->id] = c;
    taken.clear();
  }
  for (size_t k = 0; k < round.items.size(); ++k) {
    const RoundItem &item = round.items[k];
    auto id = g.submit(promptTensor(item), item.maxTokens, item.sampling);
    if (!serving) {
      // The serving rank checked the requests; every rank refuses alike.
      llvm::consumeError(id.takeError());
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (!id) {
      std::string message = llvm::toString(id.takeError());
      for (const auto &[request, row] : owners[k])
        fail(*byId[request], 400, message, Outcome::BadRequest);
      continue;
    }
    Part &part = parts[*id];
    part.groups = static_cast<int64_t>(item.prompt.size()) / batch;
    for (const auto &[request, row] : owners[k]) {
      std::shared_ptr<Completion> &c = byId[request];
      part.rows.push_back({c, row});
      if (!c->done)
        ++part.rowsLeft;
      if (!llvm::is_contained(c->parts, *id))
        c->parts.push_back(*id);
    }
    if (part.rowsLeft == 0) // every request cancelled while it waited
      g.cancel(*id);
  }
  if (serving) {
    std::lock_guard<std::mutex> lock(mutex);
    updateGauges();
  }
  llvm::Error err = g.flush();
  while (g.next()) {
  }
  if (!serving)
    return err;
  std::lock_guard<std::mutex> lock(mutex);
  if (err) {
    std::string message = llvm::toString(std::move(err));
    failAll(message);
    return makeError(message);
  }
  // Every row ends at its last token; a request still open now would wait
  // forever.
  for (auto &[id, part] : parts)
    for (auto &[owner, row] : part.rows)
      fail(*owner, 500,
           "internal error: the decode ended before the request's last token",
           Outcome::Failed);
  parts.clear();
  updateGauges();
  return llvm::Error::success();
}

/// A rank that does not serve: every round the serving rank sends.
llvm::Error Service::Impl::follow(Generator &g) {
  while (true) {
    std::string bytes;
    if (llvm::Error err = g.share(bytes))
      return err;
    auto round = readRound(bytes);
    if (!round)
      return round.takeError();
    if (round->stop)
      return llvm::Error::success();
    if (llvm::Error err = decode(*round, /*serving=*/false))
      return err;
  }
}

/// The serving rank's routes.
void Service::Impl::route(httplib::Server &server) {
  server.new_task_queue = [] { return new httplib::ThreadPool(64); };
  server.set_payload_max_length(options.maxRequestBytes);
  // cpp-httplib's own refusals (413, a malformed request) get a JSON body.
  server.set_error_handler([this](const httplib::Request &,
                                  httplib::Response &res) {
    if (!res.body.empty())
      return;
    std::string message =
        res.status == 413
            ? llvm::formatv("the body is over {0} bytes (--max-request-bytes)",
                            options.maxRequestBytes)
                  .str()
            : llvm::formatv("HTTP status {0}", res.status).str();
    if (res.status == 413)
      metrics.countRequest(Outcome::BadRequest);
    reply(res, res.status, errorBody(message, "invalid_request_error"));
  });
  server.Post("/v1/completions",
              [this](const httplib::Request &req, httplib::Response &res) {
                ++handlers;
                complete(req, res);
                --handlers;
              });
  server.Get(
      "/health", [this](const httplib::Request &, httplib::Response &res) {
        std::lock_guard<std::mutex> lock(mutex);
        reply(res, stopping ? 503 : 200,
              llvm::json::Object{{"status", stopping ? "stopping" : "ok"}});
      });
  server.Get("/metrics",
             [this](const httplib::Request &req, httplib::Response &res) {
               if (authorized(req, res))
                 res.set_content(metrics.text(), "text/plain; version=0.0.4");
             });
}

/// The serving rank's rounds, until the stop round (sent even after a
/// failure to listen, `listening` false, so that the other ranks exit now
/// rather than at their timeout).
llvm::Error Service::Impl::lead(Generator &g, bool listening) {
  while (true) {
    Round round = listening ? takeRound() : Round{true, {}};
    std::string bytes = writeRound(round);
    if (llvm::Error err = g.share(bytes)) {
      std::lock_guard<std::mutex> lock(mutex);
      std::string message = llvm::toString(std::move(err));
      failAll(message);
      return makeError(message);
    }
    if (round.stop)
      return llvm::Error::success();
    if (llvm::Error err = decode(round, /*serving=*/true))
      return err;
  }
}

llvm::Error Service::run(Generator &g) {
  Impl &s = *impl_;
  s.generator = &g;
  s.batch = g.batchSize().value_or(1);
  RequestLimits &limits = s.options.limits;
  limits.vocab = g.vocabSize();
  limits.positions = g.cachePositions();
  limits.sampling = g.samplingOptions();
  // Every rank catches them: only the serving rank acts, the others wait
  // for its stop round.
  struct sigaction action = {};
  action.sa_handler = askStop;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  if (g.rank() != g.outputRank())
    return s.follow(g);

  httplib::Server server;
  s.route(server);
  int port = s.options.port;
  bool bound = port == 0 ? (port = server.bind_to_any_port(s.options.host)) > 0
                         : server.bind_to_port(s.options.host, port);
  std::thread http;
  if (bound) {
    http = std::thread([&server] { server.listen_after_bind(); });
    llvm::outs() << "serving on http://" << s.options.host << ":" << port
                 << "\n";
    llvm::outs().flush();
  }
  llvm::Error err = s.lead(g, bound);
  // Let the handlers answer what they hold (a few seconds at most).
  for (int i = 0; i < 100 && s.handlers > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.stop();
  if (http.joinable())
    http.join();
  if (!bound) {
    llvm::consumeError(std::move(err));
    return makeError(llvm::formatv("cannot listen on {0}:{1} (is the port "
                                   "taken, or the host not an address of "
                                   "this machine?)",
                                   s.options.host, s.options.port)
                         .str());
  }
  return err;
}

} // namespace ppc::serve
