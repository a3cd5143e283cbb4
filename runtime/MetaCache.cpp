//===- runtime/MetaCache.cpp - Boundary metadata saved between runs -------===//
#include "runtime/MetaCache.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using llvm::json::Array;
using llvm::json::Object;
using llvm::json::Value;

namespace ppc {

namespace {
constexpr const char *kFormat = "ppc-meta-cache";
constexpr int64_t kVersion = 1;
} // namespace

Value MetaCacheKey::toJSON() const {
  Array stageArray;
  for (const auto &[index, sha] : stages)
    stageArray.push_back(Object{{"stage", index}, {"sha256", sha}});
  return Object{{"manifest_sha256", manifestSha256},
                {"stages", std::move(stageArray)},
                {"layout", layout}};
}

std::string MetaCache::filePath(llvm::StringRef dir, int rank, int worldSize) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(
      path, llvm::formatv("meta_cache.rank{0}of{1}.json", rank, worldSize));
  return std::string(path);
}

/// Parses the entries of a cache file whose key matched.
static llvm::Error parseEntries(const Object &top,
                                std::map<std::string, MetaTable> &out) {
  const Array *entries = top.getArray("entries");
  if (!entries)
    return makeError("missing 'entries'");
  for (size_t i = 0; i < entries->size(); ++i) {
    std::string at = llvm::formatv("entries[{0}]", i);
    const Object *e = (*entries)[i].getAsObject();
    if (!e)
      return makeError(at + ": expected an object");
    auto signature = e->getString("signature");
    const Array *values = e->getArray("values");
    if (!signature || !values)
      return makeError(at + ": needs 'signature' and 'values'");
    MetaTable table;
    for (size_t j = 0; j < values->size(); ++j) {
      std::string vat = llvm::formatv("{0}.values[{1}]", at, j);
      const Object *v = (*values)[j].getAsObject();
      if (!v)
        return makeError(vat + ": expected an object");
      auto stage = v->getInteger("stage");
      auto output = v->getInteger("output");
      const Value *meta = v->get("meta");
      if (!stage || !output || !meta)
        return makeError(vat + ": needs 'stage', 'output' and 'meta'");
      auto parsed = metaFromJSON(*meta, vat);
      if (!parsed)
        return parsed.takeError();
      table[{static_cast<int>(*stage), static_cast<int>(*output)}] =
          std::move(*parsed);
    }
    out[signature->str()] = std::move(table);
  }
  return llvm::Error::success();
}

MetaCache MetaCache::load(llvm::StringRef path, const MetaCacheKey &key,
                          std::string &warning) {
  MetaCache cache(path.str(), key);
  warning.clear();
  if (!llvm::sys::fs::exists(path)) {
    warning = "no meta cache at '" + path.str() + "'";
    return cache;
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    warning = "cannot read meta cache '" + path.str() +
              "': " + buffer.getError().message();
    return cache;
  }
  auto corrupt = [&](const std::string &why) {
    warning = "meta cache '" + path.str() + "' is corrupt (" + why + ")";
  };
  auto json = llvm::json::parse((*buffer)->getBuffer());
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
    warning = "meta cache '" + path.str() + "' is stale (" + what + ")";
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
  return Object{{"format", kFormat},
                {"version", kVersion},
                {"key", key_.toJSON()},
                {"entries", std::move(entries)}};
}

llvm::Error MetaCache::save() const {
  llvm::StringRef dir = llvm::sys::path::parent_path(path_);
  if (!dir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return makeError("cannot create meta cache directory '" + dir +
                       "': " + ec.message());
  return writeFileAtomically(path_, [&](llvm::raw_ostream &os) {
    os << llvm::formatv("{0:2}", toJSON()) << "\n";
    return llvm::Error::success();
  });
}

} // namespace ppc
