//===- tools/ppc/serve/Metrics.h - ppc serve's metrics ----------*- C++ -*-===//
//
// What GET /metrics reports, in Prometheus' text format (prometheus-cpp's
// registry and text serializer): requests by outcome, prompt and generated
// tokens, time to first token and time per token, the queue's depth and
// the slots in use. Thread-safe (prometheus-cpp's metrics are).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_SERVE_METRICS_H
#define PPC_TOOLS_PPC_SERVE_METRICS_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ppc::serve {

/// How a request ended: "ok", "cancelled" (its client went away),
/// "bad_request" (4xx: malformed, out of range, too large), "rejected"
/// (429: the queue was full; 503: the service was stopping),
/// "unauthorized" (401), "failed" (503: the job lost a rank).
enum class Outcome {
  Ok,
  Cancelled,
  BadRequest,
  Rejected,
  Unauthorized,
  Failed
};

class Metrics {
public:
  Metrics();
  ~Metrics();

  void countRequest(Outcome outcome);
  void countTokens(int64_t prompt, int64_t generated);
  void observeFirstToken(double seconds);
  void observeTokenGap(double seconds);
  void setQueueDepth(int64_t requests);
  void setSlotsInUse(int64_t slots);

  /// The text GET /metrics returns.
  std::string text() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace ppc::serve

#endif // PPC_TOOLS_PPC_SERVE_METRICS_H
