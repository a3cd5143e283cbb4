//===- runtime/exec/MetaCache.cpp - Boundary metadata saved between runs --===//
//
// The cache file is untrusted input like any other: it is read with a size
// cap and a JSON depth bound, its entries must match the checksum ppc wrote
// beside them, and every metadata record is validated before use.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/MetaCache.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/SafeRead.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

using llvm::json::Array;
using llvm::json::Object;
using llvm::json::Value;

namespace ppc {

namespace {
constexpr const char *kFormat = "ppc-meta-cache";
// Version 2 added "entries_sha256"; a version 1 file is re-inferred.
constexpr int64_t kVersion = 2;
} // namespace

Value MetaCacheKey::toJSON() const {
  Array stageArray;
  for (const auto &[index, sha] : stages)
    stageArray.push_back(Object{{"stage", index}, {"sha256", sha}});
  Object out{{"manifest_sha256", manifestSha256},
             {"stages", std::move(stageArray)},
             {"layout", layout}};
  if (!precision.empty())
    out["precision"] = precision;
  return out;
}

std::string MetaCache::filePath(llvm::StringRef dir, int rank, int worldSize) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(
      path, llvm::formatv("meta_cache.rank{0}of{1}.json", rank, worldSize));
  return std::string(path);
}

namespace {
/// One value of a cache entry, as stored.
struct CachedValue {
  int64_t stage = 0;
  int64_t output = 0;
  ValueMeta meta;
};

/// One entry: the metadata of one microbatch signature.
struct CachedEntry {
  std::string signature;
  std::vector<CachedValue> values;
};

bool mapIndex(llvm::json::ObjectMapper &o, llvm::StringLiteral field,
              int64_t &out, llvm::json::Path path) {
  if (!o.map(field, out))
    return false;
  if (out < 0 || out > std::numeric_limits<int>::max()) {
    path.field(field).report("out of range");
    return false;
  }
  return true;
}

bool fromJSON(const Value &json, CachedValue &out, llvm::json::Path path) {
  llvm::json::ObjectMapper o(json, path);
  return o && mapIndex(o, "stage", out.stage, path) &&
         mapIndex(o, "output", out.output, path) && o.map("meta", out.meta);
}

bool fromJSON(const Value &json, CachedEntry &out, llvm::json::Path path) {
  llvm::json::ObjectMapper o(json, path);
  return o && o.map("signature", out.signature) && o.map("values", out.values);
}

/// The checksum of the entries: SHA-256 of their compact JSON (keys sorted,
/// as llvm::json prints them).
std::string entriesChecksum(const Value &entries) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << entries;
  return sha256Hex(os.str());
}
} // namespace

/// Parses the entries of a cache file whose key matched.
static llvm::Error parseEntries(const Object &top,
                                std::map<std::string, MetaTable> &out) {
  const Value *entriesJSON = top.get("entries");
  if (!entriesJSON)
    return makeError("missing 'entries'");
  // A file whose entries were edited after ppc wrote them is not trusted,
  // even when each rank's file was edited the same way.
  if (top.getString("entries_sha256") !=
      llvm::StringRef(entriesChecksum(*entriesJSON)))
    return makeError("the entries do not match 'entries_sha256'");
  auto entries = readJSON<std::vector<CachedEntry>>(*entriesJSON, "entries");
  if (!entries)
    return entries.takeError();
  for (size_t i = 0; i < entries->size(); ++i) {
    MetaTable &table = out[(*entries)[i].signature];
    for (size_t j = 0; j < (*entries)[i].values.size(); ++j) {
      CachedValue &v = (*entries)[i].values[j];
      if (llvm::Error err = resolveMeta(v.meta, /*batchSize=*/-1))
        return withContext(
            std::move(err),
            llvm::formatv("entries[{0}].values[{1}].meta", i, j).str());
      table[{static_cast<int>(v.stage), static_cast<int>(v.output)}] =
          std::move(v.meta);
    }
  }
  return llvm::Error::success();
}

MetaCache MetaCache::load(llvm::StringRef path, const MetaCacheKey &key,
                          std::string &warning) {
  MetaCache cache(path.str(), key);
  warning.clear();
  if (!llvm::sys::fs::exists(path)) {
    warning = "no meta cache at '" + path.str() + "'";
    cache.routineMiss_ = true;
    return cache;
  }
  auto corrupt = [&](const std::string &why) {
    warning = "meta cache '" + path.str() + "' is corrupt (" + why + ")";
  };
  auto buffer = readFileBounded(path, kMaxMetaCacheBytes, "meta cache");
  if (!buffer) {
    warning = llvm::toString(buffer.takeError());
    return cache;
  }
  auto json = parseJSONBounded((*buffer)->getBuffer(), kMaxJSONDepth, "JSON");
  if (!json) {
    corrupt(llvm::toString(json.takeError()));
    return cache;
  }
  const Object *top = json->getAsObject();
  if (!top || top->getString("format") != llvm::StringRef(kFormat)) {
    corrupt("not a ppc meta cache");
    return cache;
  }
  if (top->getInteger("version") != kVersion) {
    warning = "meta cache '" + path.str() + "' has another format version";
    return cache;
  }
  const Value *fileKey = top->get("key");
  if (!fileKey) {
    corrupt("missing 'key'");
    return cache;
  }
  Value expected = key.toJSON();
  if (*fileKey != expected) {
    const Object *k = fileKey->getAsObject();
    std::string what = "the placement changed";
    if (!k ||
        k->getString("manifest_sha256") != llvm::StringRef(key.manifestSha256))
      what = "the manifest changed";
    else if (!k->get("stages") ||
             *k->get("stages") != *expected.getAsObject()->get("stages"))
      what = "a stage file changed";
    else if (k->getString("layout") == llvm::StringRef(key.layout))
      what = "the precision changed";
    warning = "meta cache '" + path.str() + "' is stale (" + what + ")";
    cache.routineMiss_ = true;
    return cache;
  }
  std::map<std::string, MetaTable> entries;
  if (llvm::Error err = parseEntries(*top, entries)) {
    corrupt(llvm::toString(std::move(err)));
    return cache;
  }
  cache.entries_ = std::move(entries);
  return cache;
}

const MetaTable *
MetaCache::find(llvm::StringRef signature,
                const std::vector<std::pair<int, int>> &required) const {
  auto it = entries_.find(signature.str());
  if (it == entries_.end())
    return nullptr;
  for (const auto &key : required)
    if (!it->second.count(key))
      return nullptr;
  return &it->second;
}

Value MetaCache::toJSON() const {
  Array entries;
  for (const auto &[signature, table] : entries_) {
    Array values;
    for (const auto &[key, meta] : table)
      values.push_back(Object{{"stage", key.first},
                              {"output", key.second},
                              {"meta", metaToJSON(meta)}});
    entries.push_back(
        Object{{"signature", signature}, {"values", std::move(values)}});
  }
  Value entriesJSON(std::move(entries));
  std::string checksum = entriesChecksum(entriesJSON);
  return Object{{"format", kFormat},
                {"version", kVersion},
                {"key", key_.toJSON()},
                {"entries", std::move(entriesJSON)},
                {"entries_sha256", checksum}};
}

llvm::Error MetaCache::save() const {
  llvm::StringRef dir = llvm::sys::path::parent_path(path_);
  if (!dir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return makeError("cannot create meta cache directory '" + dir +
                       "': " + ec.message());
  return writeJSONFileAtomically(path_, toJSON());
}

} // namespace ppc
