//===- runtime/link/LaunchEnv.cpp - The torchrun environment of one rank --===//
//
// This file implements LaunchEnv::fromEnvironment.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/LaunchEnv.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <optional>

namespace ppc {

namespace {
/// ppc's knobs that no launcher sets: they change how, not whether, the
/// rank runs. Errors: a PPC_HOST_ID that is no one-line name (it travels
/// in the store's values and in messages).
llvm::Error readKnobs(llvm::function_ref<const char *(const char *)> get,
                      LaunchEnv &env) {
  if (const char *id = get("PPC_HOST_ID"); id && *id) {
    llvm::StringRef text(id);
    if (text.size() > 256 ||
        llvm::any_of(text, [](char c) { return llvm::isPrint(c) == 0; }))
      return makeError("PPC_HOST_ID '" + printable(text) +
                       "' must be at most 256 printable characters");
    env.hostId = id;
  }
  const char *coalesce = get("PPC_COALESCE");
  env.coalesce = !coalesce || llvm::StringRef(coalesce) != "0";
  const char *overlap = get("PPC_OVERLAP_ALLREDUCE");
  env.overlapAllReduce = !overlap || llvm::StringRef(overlap) != "0";
  env.blasWarned = get("PPC_BLAS_WARNED") != nullptr;
  if (const char *dir = get("PPC_STATUS_DIR"))
    env.statusDir = dir;
  if (const char *ifname = get("GLOO_SOCKET_IFNAME"))
    env.glooSocketIfname = ifname;
  if (const char *visible = get("CUDA_VISIBLE_DEVICES"))
    env.cudaVisibleDevices = visible;
  return llvm::Error::success();
}
} // namespace

llvm::Expected<LaunchEnv> LaunchEnv::fromEnvironment(
    const std::function<const char *(const char *)> &getenv) {
  auto get = [&](const char *name) -> const char * {
    return getenv ? getenv(name) : std::getenv(name);
  };
  // Each variable is read under its rule: a value from the environment is
  // untrusted, and one out of an int's range must not wrap.
  auto readInt = [&](const char *name, IntegerRule rule,
                     std::optional<int> fallback, int &out) -> llvm::Error {
    const char *text = get(name);
    if (!text || !*text) {
      if (fallback) {
        out = *fallback;
        return llvm::Error::success();
      }
      return makeError(
          llvm::Twine(name) +
          " is not set; start each rank under ppc launch or torchrun");
    }
    int64_t value = 0;
    std::string problem = rule.parse(llvm::StringRef(text).trim(), value);
    if (!problem.empty())
      return makeError(llvm::Twine(name) + "=" + problem);
    out = static_cast<int>(value);
    return llvm::Error::success();
  };
  const IntegerRule index{0, INT32_MAX}, count{1, INT32_MAX};

  LaunchEnv env;
  if (llvm::Error err = readInt("RANK", index, std::nullopt, env.rank))
    return err;
  if (llvm::Error err =
          readInt("WORLD_SIZE", count, std::nullopt, env.worldSize))
    return err;
  if (llvm::Error err = readInt("LOCAL_RANK", index, env.rank, env.localRank))
    return err;
  if (llvm::Error err =
          readInt("LOCAL_WORLD_SIZE", count, env.worldSize, env.localWorldSize))
    return err;
  const char *addr = get("MASTER_ADDR");
  if (!addr || !*addr)
    return makeError(
        "MASTER_ADDR is not set; start each rank under ppc launch or torchrun");
  // Messages show the address ("rendezvous at ADDR:PORT failed").
  if (llvm::StringRef(addr).size() > 255 ||
      llvm::any_of(llvm::StringRef(addr),
                   [](char c) { return llvm::isPrint(c) == 0; }))
    return makeError("MASTER_ADDR '" + printable(addr) +
                     "' is not a host name or address (at most 255 printable "
                     "characters)");
  env.masterAddr = addr;
  if (llvm::Error err = readInt("MASTER_PORT", IntegerRule{1, 65535},
                                std::nullopt, env.masterPort))
    return err;

  if (env.rank >= env.worldSize)
    return makeError(llvm::formatv("RANK={0} is not below WORLD_SIZE={1}",
                                   env.rank, env.worldSize)
                         .str());
  if (env.localRank >= env.localWorldSize)
    return makeError(
        llvm::formatv("LOCAL_RANK={0} is not below LOCAL_WORLD_SIZE={1}",
                      env.localRank, env.localWorldSize)
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
  if (const char *secret = get("PPC_JOB_SECRET"); secret && *secret) {
    llvm::StringRef text(secret);
    if (text.size() < 16 || text.size() > 1024 ||
        llvm::any_of(text, [](char c) { return c <= ' ' || c >= 0x7f; }))
      return makeError("PPC_JOB_SECRET must be 16 to 1024 printable "
                       "characters without spaces, e.g. the output of "
                       "'openssl rand -hex 32'");
    env.jobSecret = text.str();
  }
  if (llvm::Error err = readKnobs(get, env))
    return err;
  return env;
}

} // namespace ppc
