//===- tests/unit/lib/SafetensorsTest.cpp - safetensors reader and writer -===//
#include "lib/Safetensors.h"

#include "tests/unit/ScratchDirTest.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <string>
#include <sys/stat.h>
#include <vector>

using namespace ppc::safetensors;

namespace {

class SafetensorsTest : public ppc::test::ScratchDirTest {
protected:
  /// Writes `bytes` to `name` in the test's directory; returns its path.
  std::string write(llvm::StringRef name, llvm::StringRef bytes) {
    std::string p = path(name);
    std::error_code ec;
    llvm::raw_fd_ostream os(p, ec);
    EXPECT_FALSE(ec);
    os << bytes;
    return p;
  }

  /// The error ShardFile::open gives for a file of `bytes`, without the
  /// "checkpoint 'PATH': " every message starts with; "" when it opens.
  std::string openError(llvm::StringRef bytes) {
    std::string p = write("f.safetensors", bytes);
    auto shard = ShardFile::open(p);
    if (shard)
      return "";
    std::string message = llvm::toString(shard.takeError());
    llvm::StringRef rest(message);
    EXPECT_TRUE(rest.consume_front("checkpoint '" + p + "': ")) << message;
    EXPECT_EQ(rest.find('\n'), llvm::StringRef::npos) << message;
    return rest.str();
  }

  std::string readFile(llvm::StringRef p) {
    auto buffer = llvm::MemoryBuffer::getFile(p);
    EXPECT_TRUE(static_cast<bool>(buffer)) << p.str();
    return buffer ? (*buffer)->getBuffer().str() : "";
  }
};

/// A safetensors file: the 8-byte little-endian `length`, then `rest`.
std::string withLength(uint64_t length, llvm::StringRef rest) {
  std::string out;
  for (unsigned i = 0; i < 8; ++i)
    out += static_cast<char>((length >> (8 * i)) & 0xff);
  return out + rest.str();
}

/// A safetensors file of `header` and `dataBytes` bytes of data.
std::string file(llvm::StringRef header, size_t dataBytes) {
  return withLength(header.size(), header) + std::string(dataBytes, 'x');
}

const std::string kA = std::string(24, '\1'); // F32 [2, 3]
const std::string kB = "bf16bf16";            // BF16 [4]
const std::string kC = std::string(16, '\3'); // I64 [2]

std::vector<WriteTensor> threeTensors() {
  return {
      {"a", "F32", {2, 3}, kA}, {"b", "BF16", {4}, kB}, {"c", "I64", {2}, kC}};
}

} // namespace

TEST_F(SafetensorsTest, RoundTripsThreeTensorsOverTwoShards) {
  std::string out = path("ckpt");
  // a and b fill the first shard exactly (32 bytes); c takes a second.
  ASSERT_FALSE(llvm::errorToBool(writeCheckpoint(out, threeTensors(), 32)));
  for (const char *name : {"model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"}) {
    std::string bytes = readFile(out + "/" + name);
    ASSERT_GE(bytes.size(), 8u);
    uint64_t length = 0;
    for (unsigned i = 0; i < 8; ++i)
      length |= uint64_t(static_cast<uint8_t>(bytes[i])) << (8 * i);
    EXPECT_EQ(length % 8, 0u) << name;
  }
  EXPECT_FALSE(llvm::sys::fs::exists(out + "/model.safetensors"));

  auto index = llvm::json::parse(readFile(out + "/" + kIndexName.str()));
  ASSERT_TRUE(static_cast<bool>(index)) << llvm::toString(index.takeError());
  EXPECT_EQ(
      *index,
      llvm::json::Value(llvm::json::Object{
          {"metadata", llvm::json::Object{{"total_size", 48}}},
          {"weight_map",
           llvm::json::Object{{"a", "model-00001-of-00002.safetensors"},
                              {"b", "model-00001-of-00002.safetensors"},
                              {"c", "model-00002-of-00002.safetensors"}}}}));

  auto ckpt = Checkpoint::open(out);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ckpt->shardOf("c"), out + "/model-00002-of-00002.safetensors");
  for (const WriteTensor &want : threeTensors()) {
    auto found = ckpt->find(want.name);
    ASSERT_TRUE(static_cast<bool>(found)) << llvm::toString(found.takeError());
    auto [shard, entry] = *found;
    EXPECT_EQ(entry->dtype, want.dtype);
    EXPECT_EQ(entry->shape, want.shape);
    EXPECT_EQ(shard->bytes(*entry), want.bytes);
    EXPECT_EQ(shard->metadata().at("format"), "pt");
  }
  EXPECT_EQ(ckpt->bytesServed(), 48u);
}

TEST_F(SafetensorsTest, OneShardIsModelSafetensors) {
  std::string out = path("ckpt");
  ASSERT_FALSE(llvm::errorToBool(writeCheckpoint(out, threeTensors(), 1000)));
  EXPECT_TRUE(llvm::sys::fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(llvm::sys::fs::exists(out + "/" + kIndexName.str()));
  // The directory and the file open alike.
  for (const std::string &p : {out, out + "/model.safetensors"}) {
    auto ckpt = Checkpoint::open(p);
    ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
    EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"a", "b", "c"}));
    auto b = ckpt->find("b");
    ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
    EXPECT_EQ(b->first->bytes(*b->second), kB);
  }
}

TEST_F(SafetensorsTest, ATensorOverTheLimitGetsAShardOfItsOwn) {
  std::string out = path("ckpt");
  std::string big(100, 'b'), small(8, 's');
  ASSERT_FALSE(llvm::errorToBool(writeCheckpoint(out,
                                                 {{"s1", "U8", {8}, small},
                                                  {"big", "U8", {100}, big},
                                                  {"s2", "U8", {8}, small}},
                                                 16)));
  auto ckpt = Checkpoint::open(out);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->shardOf("s1"), out + "/model-00001-of-00003.safetensors");
  EXPECT_EQ(ckpt->shardOf("big"), out + "/model-00002-of-00003.safetensors");
  EXPECT_EQ(ckpt->shardOf("s2"), out + "/model-00003-of-00003.safetensors");
}

TEST_F(SafetensorsTest, BytesServedCountsOnlyWhatWasAsked) {
  std::string out = path("ckpt");
  ASSERT_FALSE(llvm::errorToBool(writeCheckpoint(out, threeTensors(), 8)));
  auto ckpt = Checkpoint::open(out);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  EXPECT_EQ(ckpt->bytesServed(), 0u);
  auto b = ckpt->find("b");
  ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
  EXPECT_EQ(ckpt->bytesServed(), 0u); // finding reads no tensor
  EXPECT_EQ(b->first->bytes(*b->second), kB);
  EXPECT_EQ(b->first->bytesServed(), kB.size());
  EXPECT_EQ(ckpt->bytesServed(), kB.size());
}

TEST_F(SafetensorsTest, RefusesToWriteOverACheckpoint) {
  std::string out = path("ckpt");
  ASSERT_TRUE(!llvm::sys::fs::create_directories(out));
  write("ckpt/old.safetensors", "keep me");
  llvm::Error err = writeCheckpoint(out, threeTensors(), 1000);
  EXPECT_EQ(llvm::toString(std::move(err)),
            "cannot write checkpoint '" + out +
                "': it already holds 'old.safetensors'");
  EXPECT_EQ(readFile(out + "/old.safetensors"), "keep me");
  EXPECT_EQ(llvm::toString(writeCheckpoint(path("other"),
                                           {{"w", "F32", {2}, "abc"}}, 1000)),
            "cannot write checkpoint '" + path("other") +
                "': tensor 'w' has 3 bytes for shape [2] of F32");
}

TEST_F(SafetensorsTest, ReadsPaddingAndEmptyTensorsSharingOffsets) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("e1":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
      R"("e2":{"dtype":"I8","shape":[0],"data_offsets":[4,4]},)"
      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}    )";
  std::string p = write("ok.safetensors", file(header, 8));
  auto shard = ShardFile::open(p);
  ASSERT_TRUE(static_cast<bool>(shard)) << llvm::toString(shard.takeError());
  ASSERT_EQ((*shard)->tensors().size(), 3u);
  const TensorEntry *w = (*shard)->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->begin, 8 + header.size());
  EXPECT_EQ(w->end, 8 + header.size() + 8);
  EXPECT_EQ((*shard)->bytes(*w), "xxxxxxxx");
  EXPECT_EQ((*shard)->find("nothing"), nullptr);
  // parseHeader over the file's bytes, as the fuzz target calls it.
  std::string bytes = file(header, 8);
  auto entries = parseHeader(bytes, bytes.size(), "ok");
  ASSERT_TRUE(static_cast<bool>(entries))
      << llvm::toString(entries.takeError());
  EXPECT_EQ((*entries)[0].name, "e1");
}

TEST_F(SafetensorsTest, RefusesHostileHeadersWithOneLine) {
  auto one = [](llvm::StringRef name, llvm::StringRef dtype,
                llvm::StringRef shape, llvm::StringRef offsets) {
    return ("\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
            ",\"data_offsets\":" + offsets + "}")
        .str();
  };
  struct Case {
    const char *what;
    std::string bytes;
    std::string error;
  };
  std::vector<Case> cases = {
      {"shorter than a length", "12345",
       "file is 5 bytes, too short for a header length"},
      {"length over the file", withLength(100, "{}"),
       "header length 100 is more than the 2 bytes after it"},
      {"length 2^63", withLength(uint64_t(1) << 63, "{}"),
       "header length 9223372036854775808 is over the limit of 100000000 "
       "bytes"},
      {"length 1", withLength(1, "{}"),
       "header length 1 is too short for a JSON object"},
      {"nesting 100000 deep", file(std::string(100000, '['), 0),
       "header nests deeper than 256 levels"},
      {"not JSON", file("{x}", 0),
       "header is not valid JSON: [1:2, byte=2]: Expected object key"},
      {"not an object", file("[1, 2]", 0), "header is not a JSON object"},
      {"an entry not an object", file(R"({"w": 3})", 0),
       "tensor 'w' is not an object"},
      {"unknown dtype", file("{" + one("w", "F7", "[1]", "[0,4]") + "}", 4),
       "tensor 'w' has unknown dtype 'F7'"},
      {"no dtype", file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4),
       "tensor 'w' has no dtype string"},
      {"no shape", file(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4),
       "tensor 'w' has no shape array"},
      {"negative shape",
       file("{" + one("w", "F32", "[2,-1]", "[0,8]") + "}", 8),
       "tensor 'w' shape[1] is -1, not a size"},
      {"shape of a string",
       file("{" + one("w", "F32", "[\"2\"]", "[0,8]") + "}", 8),
       "tensor 'w' shape[0] is not an integer"},
      {"overflowing shape",
       file("{" + one("w", "F32", "[4294967296,4294967296]", "[0,8]") + "}", 8),
       "tensor 'w' shape [4294967296, 4294967296] of F32 overflows"},
      {"shape*size != range",
       file("{" + one("w", "F32", "[2,3]", "[0,20]") + "}", 24),
       "tensor 'w' shape [2, 3] of F32 takes 24 bytes, but data_offsets [0, "
       "20] hold 20"},
      {"offsets past the end",
       file("{" + one("w", "F32", "[2]", "[0,8]") + "}", 4),
       "tensor 'w' data_offsets [0, 8] pass the end of the data (4 bytes)"},
      {"begin > end", file("{" + one("w", "F32", "[1]", "[8,4]") + "}", 8),
       "tensor 'w' data_offsets [8, 4] begin after they end"},
      {"one offset", file("{" + one("w", "F32", "[1]", "[4]") + "}", 8),
       "tensor 'w' has no data_offsets [begin, end]"},
      {"overlapping ranges",
       file("{" + one("a", "F32", "[4]", "[0,16]") + "," +
                one("b", "F32", "[4]", "[8,24]") + "}",
            24),
       "tensor 'b' bytes [8, 24] overlap tensor 'a' bytes [0, 16]"},
      {"__metadata__ not strings", file(R"({"__metadata__":{"format":1}})", 0),
       "header __metadata__ is not an object of strings"},
      {"__metadata__ not an object", file(R"({"__metadata__":[]})", 0),
       "header __metadata__ is not an object of strings"},
      {"a name twice",
       file("{" + one("w", "U8", "[1]", "[0,1]") + ",\"x\":1," +
                one("w", "U8", "[1]", "[1,2]") + "}",
            2),
       "header names tensor 'w' twice"},
      {"a name twice, escaped",
       file("{" + one("w", "U8", "[1]", "[0,1]") + "," +
                one("\\u0077", "U8", "[1]", "[1,2]") + "}",
            2),
       "header names tensor 'w' twice"},
      {"an empty name", file("{" + one("", "U8", "[1]", "[0,1]") + "}", 1),
       "header has a tensor with an empty name"},
      {"a newline in a name",
       file("{" + one("a\\nb", "X", "[1]", "[0,1]") + "}", 1),
       "tensor 'a\\x0ab' has unknown dtype 'X'"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(openError(c.bytes), c.error) << c.what;
}

TEST_F(SafetensorsTest, RefusesAFifoAndAnEmptyDirectory) {
  std::string fifo = path("fifo.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto ckpt = Checkpoint::open(fifo);
  ASSERT_FALSE(static_cast<bool>(ckpt));
  EXPECT_EQ(llvm::toString(ckpt.takeError()),
            "checkpoint '" + fifo + "': is a FIFO, not a regular file");
  std::string empty = path("empty");
  ASSERT_TRUE(!llvm::sys::fs::create_directories(empty));
  auto none = Checkpoint::open(empty);
  ASSERT_FALSE(static_cast<bool>(none));
  EXPECT_EQ(llvm::toString(none.takeError()),
            "checkpoint '" + empty +
                "': holds neither model.safetensors.index.json nor "
                "model.safetensors");
}

TEST_F(SafetensorsTest, RefusesAnIndexNamingAFileOutsideItsDirectory) {
  std::string out = path("ckpt");
  ASSERT_TRUE(!llvm::sys::fs::create_directories(out));
  std::string index =
      write("ckpt/model.safetensors.index.json",
            R"({"metadata":{},"weight_map":{"w":"../x.safetensors"}})");
  auto ckpt = Checkpoint::open(out);
  ASSERT_FALSE(static_cast<bool>(ckpt));
  EXPECT_EQ(llvm::toString(ckpt.takeError()),
            "checkpoint '" + index +
                "': tensor 'w' maps to '../x.safetensors', not a "
                ".safetensors file in the directory");
  write("ckpt/model.safetensors.index.json",
        std::string(300, '[') + std::string(300, ']'));
  ckpt = Checkpoint::open(out);
  ASSERT_FALSE(static_cast<bool>(ckpt));
  EXPECT_EQ(llvm::toString(ckpt.takeError()),
            "checkpoint '" + index + "': index nests deeper than 256 levels");
}

TEST_F(SafetensorsTest, NamesBothFilesWhenAShardLacksAnIndexedTensor) {
  std::string out = path("ckpt");
  ASSERT_FALSE(llvm::errorToBool(writeCheckpoint(out, threeTensors(), 32)));
  std::string index =
      write("ckpt/model.safetensors.index.json",
            R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
            R"("ghost":"model-00002-of-00002.safetensors"}})");
  auto ckpt = Checkpoint::open(out);
  ASSERT_TRUE(static_cast<bool>(ckpt)) << llvm::toString(ckpt.takeError());
  auto ghost = ckpt->find("ghost");
  ASSERT_FALSE(static_cast<bool>(ghost));
  EXPECT_EQ(llvm::toString(ghost.takeError()),
            "checkpoint '" + index +
                "': tensor 'ghost' maps to "
                "'model-00002-of-00002.safetensors', which does not hold it");
  auto missing = ckpt->find("c");
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()),
            "checkpoint '" + out + "': has no tensor 'c'");
}
