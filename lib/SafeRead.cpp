//===- lib/SafeRead.cpp - Reading untrusted files -------------------------===//
//
// This file implements bounded reads of regular files and depth-bounded JSON
// parsing (see SafeRead.h for why each bound exists).
//
//===----------------------------------------------------------------------===//
#include "lib/SafeRead.h"

#include "lib/Error.h"

#include "llvm/Support/Errno.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace ppc {

const char *fileTypeName(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a plain file";
}

namespace {
/// Opens the regular file `path` into `fd` and returns its size, checked
/// against `maxBytes`: what readFileBounded and mapFileBounded do before
/// reading a byte.
llvm::Expected<uint64_t> openBounded(llvm::StringRef path, uint64_t maxBytes,
                                     llvm::StringRef what,
                                     std::optional<FileDescriptor> &fd) {
  auto cannotRead = [&](int err) {
    return makeError("cannot read " + what + " '" + path +
                     "': " + llvm::sys::StrError(err));
  };
  std::string pathStr = path.str();
  // O_NONBLOCK: opening a FIFO without a writer would otherwise block
  // forever, before fstat could tell us what the file is.
  fd.emplace(llvm::sys::RetryAfterSignal(-1, ::open, pathStr.c_str(),
                                         O_RDONLY | O_NONBLOCK | O_NOCTTY |
                                             O_CLOEXEC));
  if (fd->get() < 0)
    return cannotRead(errno);
  struct stat st;
  if (::fstat(fd->get(), &st) != 0)
    return cannotRead(errno);
  if (!S_ISREG(st.st_mode))
    return makeError(llvm::formatv("{0} '{1}' is not a regular file ({2})",
                                   what, path, fileTypeName(st.st_mode))
                         .str());
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > maxBytes)
    return makeError(
        llvm::formatv("{0} '{1}' is {2} bytes, over the limit of {3}", what,
                      path, size, maxBytes)
            .str());
  return size;
}

/// A file mapped copy-on-write: readable, writable in place (the writes
/// stay in this process), unmapped with its last owner.
class MappedBuffer final : public llvm::MemoryBuffer {
public:
  explicit MappedBuffer(std::unique_ptr<llvm::sys::fs::mapped_file_region> m)
      : region(std::move(m)) {
    init(region->const_data(), region->const_data() + region->size(),
         /*RequiresNullTerminator=*/false);
  }
  BufferKind getBufferKind() const override { return MemoryBuffer_MMap; }

private:
  std::unique_ptr<llvm::sys::fs::mapped_file_region> region;
};
} // namespace

llvm::Expected<FileBuffer>
mapFileBounded(llvm::StringRef path, uint64_t maxBytes, llvm::StringRef what) {
  std::optional<FileDescriptor> fd;
  auto size = openBounded(path, maxBytes, what, fd);
  if (!size)
    return size.takeError();
  if (*size == 0) // mmap refuses an empty range
    return FileBuffer(llvm::MemoryBuffer::getMemBuffer("", path, false));
  std::error_code ec;
  auto region = std::make_unique<llvm::sys::fs::mapped_file_region>(
      fd->get(), llvm::sys::fs::mapped_file_region::priv,
      static_cast<size_t>(*size), 0, ec);
  if (ec)
    return makeError("cannot map " + what + " '" + path + "': " + ec.message());
  return FileBuffer(std::make_shared<MappedBuffer>(std::move(region)));
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readFileBounded(llvm::StringRef path, uint64_t maxBytes, llvm::StringRef what) {
  auto cannotRead = [&](int err) {
    return makeError("cannot read " + what + " '" + path +
                     "': " + llvm::sys::StrError(err));
  };
  std::optional<FileDescriptor> fd;
  auto opened = openBounded(path, maxBytes, what, fd);
  if (!opened)
    return opened.takeError();
  uint64_t size = *opened;
  std::unique_ptr<llvm::WritableMemoryBuffer> buffer =
      llvm::WritableMemoryBuffer::getNewUninitMemBuffer(size, path);
  if (!buffer)
    return makeError(llvm::formatv("cannot read {0} '{1}': out of memory "
                                   "for {2} bytes",
                                   what, path, size)
                         .str());
  char *out = buffer->getBufferStart();
  uint64_t done = 0;
  while (done < size) {
    // Large reads are split: read() transfers at most ~2 GiB at a time.
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(size - done, kGiB));
    ssize_t n =
        llvm::sys::RetryAfterSignal(-1, ::read, fd->get(), out + done, chunk);
    if (n < 0)
      return cannotRead(errno);
    if (n == 0)
      break;
    done += static_cast<uint64_t>(n);
  }
  if (done != size)
    return makeError(what + " '" + path + "' changed while being read");
  return std::unique_ptr<llvm::MemoryBuffer>(std::move(buffer));
}

bool nestsDeeperThan(llvm::StringRef text, unsigned maxDepth) {
  unsigned depth = 0;
  bool inString = false;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    switch (c) {
    case '"':
      inString = true;
      break;
    case '[':
    case '{':
      if (++depth > maxDepth)
        return true;
      break;
    case ']':
    case '}':
      if (depth > 0)
        --depth;
      break;
    default:
      break;
    }
  }
  return false;
}

llvm::Expected<llvm::json::Value> parseJSONBounded(llvm::StringRef text,
                                                   unsigned maxDepth,
                                                   llvm::StringRef what) {
  if (nestsDeeperThan(text, maxDepth))
    return makeError(
        llvm::formatv("{0} nests deeper than {1} levels", what, maxDepth)
            .str());
  auto json = llvm::json::parse(text);
  if (!json)
    return makeError(what +
                     " is not valid JSON: " + llvm::toString(json.takeError()));
  return json;
}

namespace {

/// The little-endian integer of `n` bytes at `at`; the caller checked the
/// bounds.
uint64_t littleEndian(llvm::StringRef b, uint64_t at, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i)
    v |= uint64_t(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}

} // namespace

std::vector<ZipDirectory> zipDirectories(llvm::StringRef b) {
  std::vector<ZipDirectory> out;
  if (b.size() < 22)
    return out;
  uint64_t lowest = b.size() > 22 + 65535 ? b.size() - 22 - 65535 : 0;
  for (uint64_t at = b.size() - 22 + 1; at-- > lowest;) {
    if (littleEndian(b, at, 4) != 0x06054b50)
      continue;
    ZipDirectory d{littleEndian(b, at + 16, 4), littleEndian(b, at + 10, 2)};
    if (d.offset != 0xFFFFFFFF && d.entries != 0xFFFF &&
        littleEndian(b, at + 12, 4) != 0xFFFFFFFF)
      out.push_back(d);
    if (at < 20 || littleEndian(b, at - 20, 4) != 0x07064b50)
      return out;
    uint64_t z = littleEndian(b, at - 20 + 8, 8);
    if (z > b.size() || b.size() - z < 56 ||
        littleEndian(b, z, 4) != 0x06064b50)
      return out;
    ZipDirectory zip64{littleEndian(b, z + 48, 8), littleEndian(b, z + 32, 8)};
    if (out.empty() || out[0].offset != zip64.offset ||
        out[0].entries != zip64.entries)
      out.push_back(zip64);
    return out;
  }
  return out;
}

namespace {

/// The 8-byte fields of an entry's zip64 extra field (`extra`, the entry's
/// extra data): one for each of its directory fields that holds the zip64
/// marker 0xFFFFFFFF, uncompressed size first, then compressed size.
/// nullopt when there is no zip64 field or it is too short for them.
std::optional<std::vector<uint64_t>> zip64Fields(llvm::StringRef extra,
                                                 unsigned count) {
  for (uint64_t at = 0; extra.size() - at >= 4;) {
    uint64_t id = littleEndian(extra, at, 2),
             size = littleEndian(extra, at + 2, 2);
    if (extra.size() - at - 4 < size)
      return std::nullopt;
    if (id == 1) {
      if (size < 8 * uint64_t(count))
        return std::nullopt;
      std::vector<uint64_t> fields;
      for (unsigned i = 0; i < count; ++i)
        fields.push_back(littleEndian(extra, at + 4 + 8 * i, 8));
      return fields;
    }
    at += 4 + size;
  }
  return std::nullopt;
}

} // namespace

/// checkZipInflation over the directory `dir` of `b`.
static llvm::Error checkZipInflation(llvm::StringRef b,
                                     const ZipDirectory *dir) {
  uint64_t budget = std::max(kMinInflationBudget, kMaxInflation * b.size());
  uint64_t total = 0, at = dir->offset;
  for (uint64_t i = 0; i < dir->entries; ++i) {
    // A directory LibTorch cannot read either is its reader's to report.
    if (at > b.size() || b.size() - at < 46 ||
        littleEndian(b, at, 4) != 0x02014b50)
      return llvm::Error::success();
    uint64_t nameLength = littleEndian(b, at + 28, 2);
    uint64_t extraLength = littleEndian(b, at + 30, 2);
    uint64_t next =
        at + 46 + nameLength + extraLength + littleEndian(b, at + 32, 2);
    if (next > b.size())
      return llvm::Error::success();
    llvm::StringRef name = b.substr(at + 46, nameLength);
    uint64_t size = littleEndian(b, at + 24, 4);
    bool sizeMarked = size == 0xFFFFFFFF;
    bool compressedMarked = littleEndian(b, at + 20, 4) == 0xFFFFFFFF;
    if (sizeMarked || compressedMarked) {
      // Without the zip64 field, miniz takes the marker for a size of
      // 4 GiB, and LibTorch's reader allocates that much for the record.
      auto fields = zip64Fields(b.substr(at + 46 + nameLength, extraLength),
                                unsigned(sizeMarked) + compressedMarked);
      if (!fields)
        return makeError(llvm::formatv("record {0} has the zip64 size marker "
                                       "0xFFFFFFFF without a zip64 field "
                                       "that holds its size",
                                       printable(name))
                             .str());
      if (sizeMarked)
        size = (*fields)[0];
    }
    if (size > budget)
      return makeError(llvm::formatv("record {0} inflates to {1} bytes, more "
                                     "than a {2}-byte archive may hold ({3} "
                                     "in all)",
                                     printable(name), size, b.size(), budget)
                           .str());
    total += size; // both at most the budget: no overflow
    if (total > budget)
      return makeError(llvm::formatv("its records inflate to {0} bytes or "
                                     "more, more than a {1}-byte archive may "
                                     "hold ({2})",
                                     total, b.size(), budget)
                           .str());
    at = next;
  }
  return llvm::Error::success();
}

llvm::Error checkZipInflation(llvm::StringRef b) {
  for (const ZipDirectory &dir : zipDirectories(b))
    if (llvm::Error err = checkZipInflation(b, &dir))
      return err;
  return llvm::Error::success();
}

namespace {
class BufferReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
public:
  explicit BufferReadAdapter(llvm::StringRef bytes) : bytes(bytes) {}
  size_t size() const override { return bytes.size(); }
  size_t read(uint64_t pos, void *buf, size_t n,
              const char * /*what*/) const override {
    // LibTorch asks for empty records with a null `buf` (memcpy forbids
    // null even for 0 bytes; found by fuzz_tensor_file).
    if (pos >= bytes.size() || n == 0)
      return 0;
    size_t count =
        static_cast<size_t>(std::min<uint64_t>(n, bytes.size() - pos));
    std::memcpy(buf, bytes.data() + pos, count);
    return count;
  }

private:
  llvm::StringRef bytes;
};
} // namespace

std::shared_ptr<caffe2::serialize::ReadAdapterInterface>
makeArchiveReader(llvm::StringRef bytes) {
  return std::make_shared<BufferReadAdapter>(bytes);
}

bool sameSecret(llvm::StringRef given, llvm::StringRef expected) {
  if (given.size() != expected.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

} // namespace ppc
