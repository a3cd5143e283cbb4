//===- runtime/run/RunStats.cpp - What one rank of a run reports ----------===//
//
// This file implements the --stats line of Pipeline.h's RunStats.
//
//===----------------------------------------------------------------------===//
#include "runtime/run/Pipeline.h"

#include "runtime/platform/Blas.h"
#include "runtime/platform/MemoryMeter.h"

#include "llvm/Support/FormatVariadic.h"

namespace ppc {

std::string RunStats::line() const {
  return llvm::formatv(
             "stats: rank={0} meta={1} meta_messages_sent={2} "
             "messages_sent={3} first_output_ms={4:f3} total_ms={5:f3} "
             "cache_written={6}",
             rank, metaSourceName(metaSource), metaMessagesSent, messagesSent,
             firstOutputMs, totalMs, cacheWritten ? 1 : 0)
             .str() +
         (weightsGiven ? " weight_bytes=" + std::to_string(weightBytes)
                       : std::string()) +
         memoryStatsText() + (link.empty() ? "" : " link=" + link) +
         " blas=" + blasStatsName(loadedBlas());
}

} // namespace ppc
