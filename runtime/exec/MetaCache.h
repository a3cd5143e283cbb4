//===- runtime/exec/MetaCache.h - Boundary metadata saved between runs ----===//
//
// Each rank keeps the metadata of the values it produces and receives in its
// own JSON file, "meta_cache.rank<R>of<W>.json" in the cache directory (the
// manifest's by default). A file is valid for one key: the manifest's
// SHA-256, the SHA-256 of each of the rank's stage files, and the placement
// of stages on ranks. Inside, entries are keyed by microbatch signature
// (dtypes and shapes of a microbatch's inputs), so several input shapes and
// an uneven last microbatch each have their own entry. docs/runtime.md shows
// the format.
//
// The cache never fails a run: a missing, corrupt or stale file loads as an
// empty cache with a warning, and saving is atomic (temporary file, rename).
// The file is untrusted: it is read with a size cap and a JSON depth bound,
// its entries must match the "entries_sha256" checksum written beside them,
// and every record must pass validateMeta(); anything else is "corrupt".
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_METACACHE_H
#define PPC_RUNTIME_EXEC_METACACHE_H

#include "runtime/exec/TensorMeta.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

struct MetaCacheKey {
  std::string manifestSha256;
  /// (stage index, file SHA-256) of the rank's stages.
  std::vector<std::pair<int, std::string>> stages;
  /// Placement::describe().
  std::string layout;
  /// The precision the stages run in, whose boundary dtypes differ: "bf16",
  /// or "" for fp32 (then absent from the JSON, as before it was recorded).
  std::string precision;

  llvm::json::Value toJSON() const;
  bool operator==(const MetaCacheKey &o) const {
    return manifestSha256 == o.manifestSha256 && stages == o.stages &&
           layout == o.layout && precision == o.precision;
  }
};

class MetaCache {
public:
  /// The cache file of `rank` of `worldSize` in `dir`.
  static std::string filePath(llvm::StringRef dir, int rank, int worldSize);

  /// Reads `path`. A missing, unreadable, corrupt or stale (different key)
  /// file gives an empty cache and sets `warning` to a one-line reason
  /// ("no meta cache at 'x'", "meta cache 'x' is corrupt (...)", "meta
  /// cache 'x' is stale (the manifest changed)"; "... (a stage file
  /// changed)", "... (the placement changed)", "... (the precision
  /// changed)").
  static MetaCache load(llvm::StringRef path, const MetaCacheKey &key,
                        std::string &warning);

  /// Whether load() found no usable file for a routine reason: none yet, or
  /// one written for another manifest, stage files or placement (the first
  /// run after a split, a re-split or a --save). A corrupt, unreadable or
  /// other-version file is not routine: the user may want to know.
  bool missIsRoutine() const { return routineMiss_; }

  /// The entry for `signature` if it holds every key in `required`.
  const MetaTable *find(llvm::StringRef signature,
                        const std::vector<std::pair<int, int>> &required) const;

  void put(llvm::StringRef signature, MetaTable table) {
    entries_[signature.str()] = std::move(table);
  }
  size_t size() const { return entries_.size(); }

  /// Writes the cache atomically. Errors: the file cannot be written.
  llvm::Error save() const;

  llvm::json::Value toJSON() const;

private:
  MetaCache(std::string path, MetaCacheKey key)
      : path_(std::move(path)), key_(std::move(key)) {}

  std::string path_;
  MetaCacheKey key_;
  std::map<std::string, MetaTable> entries_;
  bool routineMiss_ = false;
};

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_METACACHE_H
