//===- fuzz/fuzz_safetensors.cpp - Fuzz the safetensors reader ------------===//
//
// Feeds bytes, as a file, to ShardFile::open (lib/Safetensors.h), the reader
// of Hugging Face checkpoints, and the same bytes to parseHeader. Beyond
// crashes, it checks what the loader of a rank's parameters relies on:
//   - a refusal is one line naming the file, and parseHeader over the bytes
//     refuses them with the same line;
//   - every accepted tensor has a known dtype, lies inside the file's data
//     (after the header), takes exactly its shape's bytes, and no two
//     tensors of non-zero size overlap; names are sorted and unique;
//   - bytes() of each accepted tensor is the file's bytes at its offsets,
//     readable in full, and bytesServed() adds them up.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "lib/Safetensors.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cstring>

using namespace ppc;
using namespace ppc::safetensors;

static void checkOneLine(const std::string &message, const std::string &path) {
  if (message.find('\n') != std::string::npos)
    fuzz::fail("an error of more than one line: " + message);
  if (!llvm::StringRef(message).startswith("checkpoint '" + path + "': "))
    fuzz::fail("an error that does not name the file: " + message);
}

static void checkEntry(const TensorEntry &e, uint64_t dataStart,
                       uint64_t size) {
  std::string what = "tensor '" + e.name + "'";
  size_t item = dtypeSize(e.dtype);
  if (!item)
    fuzz::fail(what + ": accepted dtype " + e.dtype);
  if (e.begin < dataStart || e.begin > e.end || e.end > size)
    fuzz::fail(what + ": accepted bytes " + llvm::Twine(e.begin) + ".." +
               llvm::Twine(e.end) + " of a " + llvm::Twine(size) +
               "-byte file whose data starts at " + llvm::Twine(dataStart));
  // Computed independently of the reader: a zero dimension empties the
  // tensor whatever the others are.
  uint64_t bytes = item;
  bool empty = false;
  for (int64_t d : e.shape) {
    if (d < 0)
      fuzz::fail(what + ": accepted a negative dimension");
    empty |= d == 0;
  }
  for (int64_t d : e.shape)
    if (!empty &&
        __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      fuzz::fail(what + ": accepted a shape whose size overflows");
  if (empty)
    bytes = 0;
  if (bytes != e.end - e.begin)
    fuzz::fail(what + ": accepted " + llvm::Twine(e.end - e.begin) +
               " bytes for a shape of " + llvm::Twine(bytes));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::InputFile input("input.safetensors");
  const std::string &path = input.write(data, size);
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto direct = parseHeader(bytes, size, path);
  auto shard = ShardFile::open(path);
  if (!shard) {
    std::string message = llvm::toString(shard.takeError());
    checkOneLine(message, path);
    if (direct)
      fuzz::fail("parseHeader accepts what ShardFile::open refuses: " +
                 message);
    std::string directMessage = llvm::toString(direct.takeError());
    if (directMessage != message)
      fuzz::fail("parseHeader and ShardFile::open disagree: '" + directMessage +
                 "' and '" + message + "'");
    return 0;
  }
  if (!direct)
    fuzz::fail("parseHeader refuses what ShardFile::open accepts: " +
               llvm::toString(direct.takeError()));

  const std::vector<TensorEntry> &tensors = (*shard)->tensors();
  if (tensors.size() != direct->size())
    fuzz::fail("parseHeader and ShardFile::open see different tensors");
  uint64_t length = 0;
  std::memcpy(&length, data, 8); // accepted, so at least 8 bytes (x86: LE)
  uint64_t dataStart = 8 + length, served = 0;
  std::vector<const TensorEntry *> byBegin;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry &e = tensors[i];
    if (i && tensors[i - 1].name >= e.name)
      fuzz::fail("tensor names not sorted and unique at '" + e.name + "'");
    if (e.name.empty())
      fuzz::fail("accepted an empty tensor name");
    checkEntry(e, dataStart, size);
    if ((*shard)->find(e.name) != &e)
      fuzz::fail("find('" + e.name + "') does not find it");
    if (e.end > e.begin)
      byBegin.push_back(&e);
    llvm::StringRef got = (*shard)->bytes(e);
    if (got != bytes.slice(e.begin, e.end))
      fuzz::fail("bytes() of '" + e.name + "' differ from the file's");
    served += got.size();
  }
  if ((*shard)->bytesServed() != served)
    fuzz::fail("bytesServed() is " + llvm::Twine((*shard)->bytesServed()) +
               ", not " + llvm::Twine(served));
  std::sort(byBegin.begin(), byBegin.end(),
            [](const TensorEntry *a, const TensorEntry *b) {
              return a->begin < b->begin;
            });
  for (size_t i = 1; i < byBegin.size(); ++i)
    if (byBegin[i]->begin < byBegin[i - 1]->end)
      fuzz::fail("accepted overlapping tensors '" + byBegin[i - 1]->name +
                 "' and '" + byBegin[i]->name + "'");
  return 0;
}
