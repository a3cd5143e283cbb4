//===- fuzz/fuzz_meta_header.cpp - Fuzz the metadata header decoder -------===//
//
// A receiving rank decodes the int64 words a peer sent (decodeHeader) and
// allocates receive buffers from the result. The input is four bytes of
// expectations (producer, consumer, microbatch, value count, as the receiver
// knows them from its schedule) followed by the words, little-endian; seeds
// come from encodeHeader (make_header_seeds). Everything decodeHeader accepts
// must be allocatable and decode the same after encoding again.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include <algorithm>
#include <cstring>

using namespace ppc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4)
    return 0;
  int producer = data[0] % 8, consumer = data[1] % 8, microbatch = data[2];
  size_t valueCount = data[3] % 16;
  std::vector<int64_t> words((size - 4) / 8);
  if (!words.empty())
    std::memcpy(words.data(), data + 4, words.size() * 8);

  // The records after the six header words, even when the header itself is
  // not the expected one.
  for (size_t pos = std::min<size_t>(6, words.size()); pos < words.size();) {
    size_t start = pos;
    auto meta = decodeMeta(words, pos);
    if (!meta) {
      llvm::consumeError(meta.takeError());
      break;
    }
    if (pos <= start || pos > words.size())
      fuzz::fail("decodeMeta moved to a bad position");
    fuzz::checkAllocatable(*meta, "decodeMeta");
  }

  auto values = decodeHeader(words, producer, consumer, microbatch, valueCount);
  if (!values) {
    llvm::consumeError(values.takeError());
    return 0;
  }
  if (values->size() != valueCount)
    fuzz::fail("decodeHeader returned another number of values");
  for (const ValueMeta &v : *values)
    fuzz::checkAllocatable(v, "decodeHeader");
  std::vector<int64_t> again =
      encodeHeader(producer, consumer, microbatch, *values);
  auto decoded =
      decodeHeader(again, producer, consumer, microbatch, valueCount);
  if (!decoded)
    fuzz::fail("a re-encoded header does not decode: " +
               llvm::toString(decoded.takeError()));
  if (*decoded != *values)
    fuzz::fail("a re-encoded header decodes to other values");
  return 0;
}
