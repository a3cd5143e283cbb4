//===- tests/unit/lib/SafeReadTest.cpp - Bounded reads of untrusted files -===//
#include "lib/SafeRead.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

using namespace ppc;

namespace {
/// A fresh directory, removed with everything in it at the end of a test.
class TempDir {
public:
  TempDir() {
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-saferead", dir));
  }
  ~TempDir() { llvm::sys::fs::remove_directories(dir); }
  std::string path(llvm::StringRef name) const {
    return (dir + "/" + name).str();
  }
  std::string write(llvm::StringRef name, llvm::StringRef bytes) const {
    std::string p = path(name);
    std::error_code ec;
    llvm::raw_fd_ostream os(p, ec);
    EXPECT_FALSE(ec);
    os << bytes;
    return p;
  }

private:
  llvm::SmallString<128> dir;
};

std::string readError(llvm::StringRef path, uint64_t cap) {
  auto buffer = readFileBounded(path, cap, "manifest");
  if (buffer)
    return "";
  return llvm::toString(buffer.takeError());
}

std::string parseError(llvm::StringRef text, unsigned depth = 4) {
  auto json = parseJSONBounded(text, depth, "cache 'c.json'");
  if (json)
    return "";
  return llvm::toString(json.takeError());
}
} // namespace

TEST(SafeReadTest, ReadsARegularFileExactly) {
  TempDir d;
  std::string bytes("a\0b\n", 4);
  std::string p = d.write("f", bytes);
  auto buffer = readFileBounded(p, 4, "manifest");
  ASSERT_TRUE(static_cast<bool>(buffer)) << llvm::toString(buffer.takeError());
  EXPECT_EQ((*buffer)->getBuffer(), bytes);
  auto empty = readFileBounded(d.write("e", ""), 0, "manifest");
  ASSERT_TRUE(static_cast<bool>(empty)) << llvm::toString(empty.takeError());
  EXPECT_EQ((*empty)->getBufferSize(), 0u);
}

TEST(SafeReadTest, RefusesFilesOverTheCapBeforeReading) {
  TempDir d;
  std::string p = d.write("big", "12345");
  EXPECT_EQ(readError(p, 4),
            "manifest '" + p + "' is 5 bytes, over the limit of 4");
}

TEST(SafeReadTest, NamesAMissingFile) {
  TempDir d;
  std::string p = d.path("missing");
  EXPECT_EQ(readError(p, 10),
            "cannot read manifest '" + p + "': No such file or directory");
}

TEST(SafeReadTest, RefusesAFIFOWithoutBlocking) {
  // Without O_NONBLOCK the open itself would wait forever for a writer.
  TempDir d;
  std::string p = d.path("fifo");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_EQ(readError(p, 10),
            "manifest '" + p + "' is not a regular file (a FIFO)");
}

TEST(SafeReadTest, RefusesADeviceBehindASymlink) {
  // /dev/zero reports size 0 but never ends: it must be refused by type.
  TempDir d;
  std::string p = d.path("zero.json");
  ASSERT_EQ(::symlink("/dev/zero", p.c_str()), 0);
  EXPECT_EQ(readError(p, 1 << 20),
            "manifest '" + p + "' is not a regular file (a character device)");
}

TEST(SafeReadTest, RefusesADirectory) {
  TempDir d;
  std::string p = d.path("sub");
  ASSERT_FALSE(llvm::sys::fs::create_directory(p));
  EXPECT_EQ(readError(p, 10),
            "manifest '" + p + "' is not a regular file (a directory)");
}

TEST(SafeReadTest, ParsesJSONWithinTheDepth) {
  auto json = parseJSONBounded(R"({"a": [[1, {"b": "]]]]"}]]})", 4, "x");
  ASSERT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
  EXPECT_EQ(*json->getAsObject()
                 ->getArray("a")
                 ->front()
                 .getAsArray()
                 ->front()
                 .getAsInteger(),
            1);
}

TEST(SafeReadTest, CountsDepthOutsideStringsOnly) {
  // Four levels exactly: accepted.
  EXPECT_EQ(parseError("[[[[1]]]]"), "");
  EXPECT_EQ(parseError("[[[[[1]]]]]"),
            "cache 'c.json' nests deeper than 4 levels");
  EXPECT_EQ(parseError(R"({"k": [{"v": [1]}]})"), "");
  EXPECT_EQ(parseError(R"({"k": [{"v": [{}]}]})"),
            "cache 'c.json' nests deeper than 4 levels");
  // Brackets in strings, and an escaped quote that does not end one.
  EXPECT_EQ(parseError(R"(["[[[[[[", "\"[[[[[[[", {"{{{{": "\\"}])"), "");
  // A closing bracket in a string does not lower the depth either.
  EXPECT_EQ(parseError(R"([[[["]]]]", [1]]]])"),
            "cache 'c.json' nests deeper than 4 levels");
}

TEST(SafeReadTest, RejectsHugeNestingWithoutRecursing) {
  // ~50,000 '[' overflowed the stack inside llvm::json::parse.
  std::string deep(200000, '[');
  EXPECT_EQ(parseError(deep, kMaxJSONDepth),
            "cache 'c.json' nests deeper than 256 levels");
  std::string ok =
      std::string(kMaxJSONDepth, '[') + std::string(kMaxJSONDepth, ']');
  EXPECT_EQ(parseError(ok, kMaxJSONDepth), "");
}

TEST(SafeReadTest, NamesInvalidJSON) {
  EXPECT_EQ(parseError("[1,"),
            "cache 'c.json' is not valid JSON: [1:3, byte=3]: Unexpected EOF");
}
