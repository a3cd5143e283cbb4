//===- tests/unit/lib/SafeReadTest.cpp - Bounded reads of untrusted files -===//
#include "lib/SafeRead.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

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

/// readFileBounded's error for `path` ("" when it reads it), which
/// mapFileBounded gives too: both refuse the same files the same way.
std::string readError(llvm::StringRef path, uint64_t cap) {
  auto buffer = readFileBounded(path, cap, "manifest");
  std::string error = buffer ? "" : llvm::toString(buffer.takeError());
  auto mapped = mapFileBounded(path, cap, "manifest");
  EXPECT_EQ(mapped ? "" : llvm::toString(mapped.takeError()), error);
  return error;
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

TEST(SafeReadTest, MapsARegularFileCopyOnWrite) {
  TempDir d;
  std::string bytes(8192, 'a');
  std::string p = d.write("f", bytes);
  {
    auto mapped = mapFileBounded(p, bytes.size(), "stage 0 file");
    ASSERT_TRUE(static_cast<bool>(mapped)) << llvm::toString(mapped.takeError());
    EXPECT_EQ((*mapped)->getBuffer(), bytes);
    // A write through the mapping stays in this process.
    const_cast<char *>((*mapped)->getBufferStart())[4096] = 'b';
    EXPECT_EQ((*mapped)->getBuffer()[4096], 'b');
  }
  auto again = readFileBounded(p, bytes.size(), "stage 0 file");
  ASSERT_TRUE(static_cast<bool>(again)) << llvm::toString(again.takeError());
  EXPECT_EQ((*again)->getBuffer(), bytes);
  auto empty = mapFileBounded(d.write("e", ""), 0, "stage 0 file");
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

namespace {
/// A zip holding only what checkZipInflation reads: a central directory
/// entry per record (deflated, declaring `size` uncompressed bytes, in a
/// zip64 extra field when `zip64`) and the end-of-central-directory record.
std::string
zipDirectory(const std::vector<std::pair<std::string, uint64_t>> &records,
             bool zip64 = false) {
  std::string out = "(record data)";
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      out.push_back(static_cast<char>(i < 8 ? v >> (8 * i) : 0));
  };
  uint64_t offset = out.size();
  for (const auto &[name, size] : records) {
    put(0x02014b50, 4);
    put(0, 6);
    put(8, 2); // deflated
    put(0, 12);
    put(zip64 ? 0xFFFFFFFF : size, 4);
    put(name.size(), 2);
    put(zip64 ? 12 : 0, 2);
    put(0, 14);
    out += name;
    if (zip64) {
      put(1, 2);
      put(8, 2);
      put(size, 8);
    }
  }
  uint64_t directory = out.size() - offset;
  put(0x06054b50, 4);
  put(0, 4);
  put(records.size(), 2);
  put(records.size(), 2);
  put(directory, 4);
  put(offset, 4);
  put(0, 2);
  return out;
}

std::string inflationError(llvm::StringRef bytes) {
  return llvm::toString(checkZipInflation(bytes));
}
} // namespace

TEST(SafeReadTest, ZipRecordsInflateWithinTheArchivesBudget) {
  // Tests that records declaring what a small archive may hold pass, and
  // that bytes which are no zip are left to LibTorch's reader.
  EXPECT_EQ(inflationError(zipDirectory({{"m/version", 2}, {"m/w", kMiB}})),
            "");
  EXPECT_EQ(inflationError("not a zip"), "");
  // Tests that one record declaring 5 GiB is refused, in the 32-bit field
  // and in a zip64 extra field.
  for (bool zip64 : {false, true}) {
    uint64_t size = zip64 ? 5 * kGiB : 3 * kGiB;
    std::string zip = zipDirectory({{"m/data/weights/w", size}}, zip64);
    EXPECT_EQ(inflationError(zip),
              "record m/data/weights/w inflates to " + std::to_string(size) +
                  " bytes, more than a " + std::to_string(zip.size()) +
                  "-byte archive may hold (67108864 in all)");
  }
  // Tests that records each within the budget are refused together.
  std::string zip = zipDirectory({{"m/a", 40 * kMiB}, {"m/b", 40 * kMiB}});
  EXPECT_EQ(inflationError(zip),
            "its records inflate to 83886080 bytes or more, more than a " +
                std::to_string(zip.size()) +
                "-byte archive may hold (67108864)");
}

TEST(SafeReadTest, EveryDirectoryAReaderMayTakeIsChecked) {
  // An end record whose 32-bit offset points at a harmless directory while
  // its zip64 twin points at one declaring 3 GiB: LibTorch 1.13's miniz
  // reads the zip64 one whenever its locator is there (fuzz_tensor_file).
  std::string big = zipDirectory({{"m/data/w", 3 * kGiB}});
  std::string small = zipDirectory({{"m/version", 2}});
  const size_t head = std::string("(record data)").size(), end = 22;
  std::string zip = big.substr(0, big.size() - end);
  uint64_t smallOffset = zip.size();
  zip += small.substr(head, small.size() - head - end);
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      zip.push_back(static_cast<char>(i < 8 ? v >> (8 * i) : 0));
  };
  uint64_t zip64 = zip.size();
  put(0x06064b50, 4); // zip64 end record: 56 bytes
  put(44, 8);
  put(0, 12);
  put(1, 8);    // entries on this disk
  put(1, 8);    // entries
  put(0, 8);    // directory size
  put(head, 8); // directory offset: the big one
  put(0x07064b50, 4); // its locator
  put(0, 4);
  put(zip64, 8);
  put(1, 4);
  put(0x06054b50, 4); // the end record: the small one
  put(0, 4);
  put(1, 2);
  put(1, 2);
  put(0, 4);
  put(smallOffset, 4);
  put(0, 2);
  std::vector<ZipDirectory> dirs = zipDirectories(zip);
  ASSERT_EQ(dirs.size(), 2u);
  EXPECT_EQ(dirs[0].offset, smallOffset);
  EXPECT_EQ(dirs[1].offset, head);
  EXPECT_EQ(inflationError(zip),
            "record m/data/w inflates to 3221225472 bytes, more than a " +
                std::to_string(zip.size()) +
                "-byte archive may hold (67108864 in all)");
}

TEST(SafeReadTest, ZipSizeMarkerNeedsItsZip64Field) {
  // Tests that a directory entry whose uncompressed or compressed size is
  // the zip64 marker 0xFFFFFFFF, with no zip64 extra field to hold the real
  // size, is refused (miniz would read 4 GiB, and LibTorch allocate it).
  const std::string message = "record m/data/0 has the zip64 size marker "
                              "0xFFFFFFFF without a zip64 field that holds "
                              "its size";
  const size_t entry = std::string("(record data)").size();
  for (size_t field : {entry + 24, entry + 20}) {
    std::string zip = zipDirectory({{"m/data/0", 2}});
    zip.replace(field, 4, "\xFF\xFF\xFF\xFF");
    EXPECT_EQ(inflationError(zip), message);
  }
  // Tests that a zip64 field holding only the uncompressed size does not
  // vouch for a marked compressed size too.
  std::string zip = zipDirectory({{"m/data/0", 2}}, /*zip64=*/true);
  zip.replace(entry + 20, 4, "\xFF\xFF\xFF\xFF");
  EXPECT_EQ(inflationError(zip), message);
  // Tests that the marker with its zip64 field is read through it.
  EXPECT_EQ(inflationError(zipDirectory({{"m/data/0", 2}}, true)), "");
}
