//===- fuzz/fuzz_meta_cache.cpp - Fuzz the meta cache reader --------------===//
//
// Feeds bytes to MetaCache::load as a rank's cache file. The key is fixed
// (the one in the seeds, fuzz/corpus/meta_cache), so mutations reach the
// entries. A cache that loads is trusted by the runtime: every value in it
// must be allocatable, and saving and loading it again must give the same
// cache without a warning.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "runtime/exec/MetaCache.h"

using namespace ppc;

static MetaCacheKey seedKey() {
  MetaCacheKey key;
  key.manifestSha256 = std::string(64, 'a');
  key.stages = {{0, std::string(64, 'b')}, {1, std::string(64, 'c')}};
  key.layout = "0:0 1:1";
  return key;
}

/// Checks every value of a loaded cache, read back from its own toJSON().
static void checkValues(const llvm::json::Value &cache) {
  const llvm::json::Object *top = cache.getAsObject();
  const llvm::json::Array *entries = top ? top->getArray("entries") : nullptr;
  if (!entries)
    fuzz::fail("a loaded cache writes no entries");
  for (const llvm::json::Value &e : *entries) {
    const llvm::json::Object *eo = e.getAsObject();
    const llvm::json::Array *values = eo ? eo->getArray("values") : nullptr;
    if (!values)
      fuzz::fail("a loaded cache writes an entry without values");
    for (const llvm::json::Value &v : *values) {
      const llvm::json::Object *vo = v.getAsObject();
      const llvm::json::Value *meta = vo ? vo->get("meta") : nullptr;
      if (!meta)
        fuzz::fail("a loaded cache writes a value without meta");
      auto parsed = metaFromJSON(*meta, "meta cache value");
      if (!parsed)
        fuzz::fail("a loaded cache writes metadata it cannot read: " +
                   llvm::toString(parsed.takeError()));
      fuzz::checkAllocatable(*parsed, "meta cache value");
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::InputFile input("meta_cache.json");
  static const MetaCacheKey key = seedKey();
  std::string warning;
  MetaCache cache = MetaCache::load(input.write(data, size), key, warning);
  if (!warning.empty()) {
    if (cache.size() != 0)
      fuzz::fail("a cache with a warning still has entries: " + warning);
    return 0;
  }
  llvm::json::Value json = cache.toJSON();
  checkValues(json);
  if (llvm::Error err = cache.save())
    fuzz::fail("cannot save a loaded cache: " + llvm::toString(std::move(err)));
  MetaCache again = MetaCache::load(input.path(), key, warning);
  if (!warning.empty())
    fuzz::fail("a saved cache does not load again: " + warning);
  if (again.toJSON() != json)
    fuzz::fail("a saved cache loads back different");
  return 0;
}
