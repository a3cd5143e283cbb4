//===- tools/ppc/serve/Metrics.cpp - ppc serve's metrics ------------------===//
//
// This file implements Metrics: one prometheus-cpp registry, its families
// named ppc_*.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/serve/Metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace ppc::serve {

namespace {
const char *outcomeName(Outcome o) {
  switch (o) {
  case Outcome::Ok:
    return "ok";
  case Outcome::Cancelled:
    return "cancelled";
  case Outcome::BadRequest:
    return "bad_request";
  case Outcome::Rejected:
    return "rejected";
  case Outcome::Unauthorized:
    return "unauthorized";
  case Outcome::Failed:
    return "failed";
  }
  return "failed";
}

/// Seconds from 1 ms to about 33 s, doubling.
prometheus::Histogram::BucketBoundaries latencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double s = 0.001; s < 40; s *= 2)
    b.push_back(s);
  return b;
}
} // namespace

struct Metrics::Impl {
  prometheus::Registry registry;
  prometheus::Family<prometheus::Counter> &requests =
      prometheus::BuildCounter()
          .Name("ppc_requests_total")
          .Help("Completion requests, by how they ended")
          .Register(registry);
  prometheus::Counter &promptTokens =
      prometheus::BuildCounter()
          .Name("ppc_prompt_tokens_total")
          .Help("Prompt tokens of the requests decoded")
          .Register(registry)
          .Add({});
  prometheus::Counter &generatedTokens = prometheus::BuildCounter()
                                             .Name("ppc_generated_tokens_total")
                                             .Help("New tokens sent to clients")
                                             .Register(registry)
                                             .Add({});
  prometheus::Histogram &firstToken =
      prometheus::BuildHistogram()
          .Name("ppc_time_to_first_token_seconds")
          .Help("From a request's arrival to its first new token")
          .Register(registry)
          .Add({}, latencyBuckets());
  prometheus::Histogram &tokenGap =
      prometheus::BuildHistogram()
          .Name("ppc_time_per_token_seconds")
          .Help("Between two new tokens of one sequence")
          .Register(registry)
          .Add({}, latencyBuckets());
  prometheus::Gauge &queueDepth =
      prometheus::BuildGauge()
          .Name("ppc_queue_depth")
          .Help("Requests waiting for the next round")
          .Register(registry)
          .Add({});
  prometheus::Gauge &slotsInUse =
      prometheus::BuildGauge()
          .Name("ppc_slots_in_use")
          .Help("Groups of sequences being decoded that have not finished")
          .Register(registry)
          .Add({});
};

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {
  // Every outcome from the start, so that a scrape sees zeros.
  for (Outcome o : {Outcome::Ok, Outcome::Cancelled, Outcome::BadRequest,
                    Outcome::Rejected, Outcome::Unauthorized, Outcome::Failed})
    impl_->requests.Add({{"outcome", outcomeName(o)}});
}
Metrics::~Metrics() = default;

void Metrics::countRequest(Outcome o) {
  impl_->requests.Add({{"outcome", outcomeName(o)}}).Increment();
}
void Metrics::countTokens(int64_t prompt, int64_t generated) {
  impl_->promptTokens.Increment(static_cast<double>(prompt));
  impl_->generatedTokens.Increment(static_cast<double>(generated));
}
void Metrics::observeFirstToken(double seconds) {
  impl_->firstToken.Observe(seconds);
}
void Metrics::observeTokenGap(double seconds) {
  impl_->tokenGap.Observe(seconds);
}
void Metrics::setQueueDepth(int64_t requests) {
  impl_->queueDepth.Set(static_cast<double>(requests));
}
void Metrics::setSlotsInUse(int64_t slots) {
  impl_->slotsInUse.Set(static_cast<double>(slots));
}

std::string Metrics::text() const {
  return prometheus::TextSerializer().Serialize(impl_->registry.Collect());
}

} // namespace ppc::serve
