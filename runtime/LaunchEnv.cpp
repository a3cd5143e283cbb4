//===- runtime/LaunchEnv.cpp - The torchrun environment of one rank -------===//
//
// This file implements LaunchEnv::fromEnvironment.
//
//===----------------------------------------------------------------------===//
#include "runtime/LaunchEnv.h"

#include "lib/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <optional>

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
    return err;
  if (llvm::Error err = readInt("WORLD_SIZE", std::nullopt, env.worldSize))
    return err;
  if (llvm::Error err = readInt("LOCAL_RANK", env.rank, env.localRank))
    return err;
  if (llvm::Error err =
          readInt("LOCAL_WORLD_SIZE", env.worldSize, env.localWorldSize))
    return err;
  const char *addr = get("MASTER_ADDR");
  if (!addr || !*addr)
    return makeError(
        "MASTER_ADDR is not set; start ppc run under ppc launch or torchrun");
  env.masterAddr = addr;
  if (llvm::Error err = readInt("MASTER_PORT", std::nullopt, env.masterPort))
    return err;

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
  if (const char *hosted = get("TORCHELASTIC_USE_AGENT_STORE"))
    env.launcherHostsStore = llvm::StringRef(hosted) == "True";
  const char *token = get("PPC_JOB_TOKEN");
  if (!token || !*token)
    token = get("TORCHELASTIC_RUN_ID");
  if (token && *token) {
    llvm::StringRef text(token);
    if (text.size() > 256 ||
        llvm::any_of(text, [](char c) { return llvm::isPrint(c) == 0; }))
      return makeError("PPC_JOB_TOKEN must be at most 256 printable "
                       "characters");
    env.jobToken = text.str();
  }
  return env;
}

} // namespace ppc
