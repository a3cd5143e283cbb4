//===- fuzz/fuzz_user_meta.cpp - Fuzz the user metadata reader ------------===//
//
// Feeds bytes to the reader of `ppc run --input-meta FILE` (and of a stage's
// "meta" in the manifest): JSON of the form {"stages": [{"outputs": [meta,
// ...]}, ...]}, each meta read by metaFromJSON with the microbatch size put in
// for sizes of -1. Every value it accepts must be allocatable and read back
// the same from metaToJSON.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "lib/SafeRead.h"

using namespace ppc;

/// A microbatch size, as Signature::parse gives it for "float32[4,...]".
constexpr int64_t kBatch = 4;

static void checkOne(const llvm::json::Value &json, int64_t batch) {
  auto meta = metaFromJSON(json, "user meta", batch);
  if (!meta) {
    llvm::consumeError(meta.takeError());
    return;
  }
  fuzz::checkAllocatable(*meta, "user meta");
  auto again = metaFromJSON(metaToJSON(*meta), "user meta again", batch);
  if (!again)
    fuzz::fail("written metadata does not read back: " +
               llvm::toString(again.takeError()));
  if (*again != *meta)
    fuzz::fail("written metadata reads back different: " + meta->str() +
               " vs " + again->str());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The file layer is readFileBounded + parseJSONBounded, as for every JSON
  // file ppc reads; the size cap is the file layer's, so the bytes go to the
  // parser directly.
  auto json = parseJSONBounded(
      llvm::StringRef(reinterpret_cast<const char *>(data), size),
      kMaxJSONDepth, "user meta");
  if (!json) {
    llvm::consumeError(json.takeError());
    return 0;
  }
  const llvm::json::Object *top = json->getAsObject();
  const llvm::json::Array *stages = top ? top->getArray("stages") : nullptr;
  if (!stages)
    return 0;
  for (const llvm::json::Value &stage : *stages)
    if (const llvm::json::Object *o = stage.getAsObject())
      if (const llvm::json::Array *outputs = o->getArray("outputs"))
        for (const llvm::json::Value &meta : *outputs) {
          checkOne(meta, kBatch);
          checkOne(meta, -1); // As the meta cache reads it.
        }
  return 0;
}
