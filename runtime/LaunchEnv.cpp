//===- runtime/LaunchEnv.cpp - The torchrun environment of one rank -------===//
//
// This file implements LaunchEnv::fromEnvironment and the small name tables
// of the public API (schedules, metadata sources, stats lines).
//
//===----------------------------------------------------------------------===//
#include "runtime/Pipeline.h"

#include "lib/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>

namespace ppc {

llvm::Expected<LaunchEnv> LaunchEnv::fromEnvironment(
    const std::function<const char *(const char *)> &getenv) {
  auto get = [&](const char *name) -> const char * {
    return getenv ? getenv(name) : std::getenv(name);
  };
  auto readInt = [&](const char *name, std::optional<int> fallback,
                     int &out) -> llvm::Error {
    const char *text = get(name);
    if (!text || !*text) {
      if (fallback) {
        out = *fallback;
        return llvm::Error::success();
      }
      return makeError(
          llvm::Twine(name) +
          " is not set; start ppc run under ppc launch or torchrun");
    }
    long long value;
    if (llvm::StringRef(text).trim().getAsInteger(10, value) ||
        value < INT32_MIN || value > INT32_MAX)
      return makeError(
          llvm::formatv("{0}='{1}' is not an integer", name, text).str());
    out = static_cast<int>(value);
    return llvm::Error::success();
  };

  LaunchEnv env;
  if (llvm::Error err = readInt("RANK", std::nullopt, env.rank))
    return std::move(err);
  if (llvm::Error err = readInt("WORLD_SIZE", std::nullopt, env.worldSize))
    return std::move(err);
  if (llvm::Error err = readInt("LOCAL_RANK", env.rank, env.localRank))
    return std::move(err);
  if (llvm::Error err =
          readInt("LOCAL_WORLD_SIZE", env.worldSize, env.localWorldSize))
    return std::move(err);
  const char *addr = get("MASTER_ADDR");
  if (!addr || !*addr)
    return makeError(
        "MASTER_ADDR is not set; start ppc run under ppc launch or torchrun");
  env.masterAddr = addr;
  if (llvm::Error err = readInt("MASTER_PORT", std::nullopt, env.masterPort))
    return std::move(err);

  if (env.worldSize < 1)
    return makeError(
        llvm::formatv("WORLD_SIZE={0} must be at least 1", env.worldSize)
            .str());
  if (env.rank < 0 || env.rank >= env.worldSize)
    return makeError(llvm::formatv("RANK={0} is not below WORLD_SIZE={1}",
                                   env.rank, env.worldSize)
                         .str());
  if (env.localWorldSize < 1)
    return makeError(llvm::formatv("LOCAL_WORLD_SIZE={0} must be at least 1",
                                   env.localWorldSize)
                         .str());
  if (env.localRank < 0 || env.localRank >= env.localWorldSize)
    return makeError(
        llvm::formatv("LOCAL_RANK={0} is not below LOCAL_WORLD_SIZE={1}",
                      env.localRank, env.localWorldSize)
            .str());
  if (env.masterPort < 1 || env.masterPort > 65535)
    return makeError(
        llvm::formatv("MASTER_PORT={0} is not a port number", env.masterPort)
            .str());
  return env;
}

llvm::StringRef scheduleName(ScheduleKind kind) {
  return kind == ScheduleKind::GPipe ? "gpipe" : "1f1b";
}

std::optional<ScheduleKind> parseScheduleName(llvm::StringRef name) {
  if (name == "gpipe")
    return ScheduleKind::GPipe;
  if (name == "1f1b")
    return ScheduleKind::OneFOneB;
  return std::nullopt;
}

llvm::StringRef metaSourceName(MetaSource source) {
  switch (source) {
  case MetaSource::Inferred:
    return "inferred";
  case MetaSource::Cache:
    return "cache";
  case MetaSource::User:
    return "user";
  }
  return "inferred";
}

std::string RunStats::line() const {
  return llvm::formatv(
      "stats: rank={0} meta={1} meta_messages_sent={2} "
      "messages_sent={3} first_output_ms={4:f3} total_ms={5:f3} "
      "cache_written={6}",
      rank, metaSourceName(metaSource), metaMessagesSent, messagesSent,
      firstOutputMs, totalMs, cacheWritten ? 1 : 0);
}

} // namespace ppc
