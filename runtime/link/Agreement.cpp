//===- runtime/link/Agreement.cpp - What every rank of a job must share ---===//
//
// This file implements the records of the start-up agreement, their
// encoding (length-prefixed, checked before anything is allocated: records
// come from other processes through the store), their comparison, and
// their exchange through a c10d store.
//
// Encoding: "ppc-agree-1\n", a u32 entry count, then per entry a u8 (1:
// known), and the name, value and shown text each as a u32 length and its
// bytes; integers little-endian.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Agreement.h"

#include "lib/Error.h"
#include "runtime/link/Link.h"
#include "runtime/platform/TorchCompat.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace ppc {

namespace {
constexpr llvm::StringLiteral kMagic = "ppc-agree-1\n";

void putU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void putText(std::string &out, llvm::StringRef text) {
  putU32(out, static_cast<uint32_t>(text.size()));
  out.append(text.data(), text.size());
}

/// Reads from untrusted bytes; every read checks what is left first.
class Reader {
public:
  explicit Reader(llvm::StringRef bytes) : rest_(bytes) {}
  std::optional<uint32_t> u32() {
    if (rest_.size() < 4)
      return std::nullopt;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<uint32_t>(static_cast<uint8_t>(rest_[i])) << (8 * i);
    rest_ = rest_.drop_front(4);
    return v;
  }
  std::optional<uint8_t> u8() {
    if (rest_.empty())
      return std::nullopt;
    uint8_t v = static_cast<uint8_t>(rest_[0]);
    rest_ = rest_.drop_front(1);
    return v;
  }
  std::optional<std::string> text() {
    std::optional<uint32_t> size = u32();
    if (!size || *size > rest_.size())
      return std::nullopt;
    std::string out = rest_.take_front(*size).str();
    rest_ = rest_.drop_front(*size);
    return out;
  }
  bool done() const { return rest_.empty(); }

private:
  llvm::StringRef rest_;
};

std::string digestText(llvm::StringRef bytes) {
  return llvm::formatv("xxh64 {0:x-16}, {1} bytes", llvm::xxHash64(bytes),
                       bytes.size())
      .str();
}

/// "rank R has X", X printable.
std::string hasText(int rank, const AgreementEntry *entry) {
  return "rank " + std::to_string(rank) + " has " +
         (entry ? printable(entry->shown, 200) : std::string("none"));
}

const AgreementEntry *find(const Agreement &record, llvm::StringRef name) {
  for (const AgreementEntry &e : record.entries())
    if (e.name == name)
      return &e;
  return nullptr;
}

/// The difference between rank 0's and rank `rank`'s records, or "".
std::string differenceOf(const Agreement &first, const Agreement &other,
                         int rank) {
  auto differs = [](const AgreementEntry *a, const AgreementEntry *b) {
    if (!a || !b)
      return true;
    if (!a->known || !b->known)
      return false;
    return a->value != b->value;
  };
  auto line = [&](llvm::StringRef name, const AgreementEntry *a,
                  const AgreementEntry *b) {
    return "ranks disagree on " + printable(name, 100) + ": " + hasText(0, a) +
           ", " + hasText(rank, b);
  };
  for (const AgreementEntry &mine : first.entries()) {
    const AgreementEntry *theirs = find(other, mine.name);
    if (differs(&mine, theirs))
      return line(mine.name, &mine, theirs);
  }
  for (const AgreementEntry &theirs : other.entries())
    if (!find(first, theirs.name))
      return line(theirs.name, nullptr, &theirs);
  return "";
}

std::string agreeKey(int rank) { return "ppc/agree/" + std::to_string(rank); }
/// Counts the ranks that have read every record, when they disagree.
constexpr const char *kReadKey = "ppc/agree/read";
} // namespace

AgreementEntry &Agreement::slot(llvm::StringRef name) {
  for (AgreementEntry &e : entries_)
    if (e.name == name)
      return e;
  entries_.push_back(AgreementEntry{name.str(), "", "", true});
  return entries_.back();
}

void Agreement::set(llvm::StringRef name, llvm::StringRef value,
                    llvm::StringRef shown) {
  AgreementEntry &e = slot(name);
  e.value = value.str();
  e.shown = shown.empty() ? value.str() : shown.str();
  e.known = true;
}

void Agreement::setDefault(llvm::StringRef name, llvm::StringRef value) {
  if (!has(name))
    set(name, value);
}

void Agreement::setPresence(llvm::StringRef name,
                            std::optional<std::string> shown) {
  AgreementEntry &e = slot(name);
  e.value = shown ? "given" : "";
  e.shown = shown ? *shown : "none";
  e.known = true;
}

void Agreement::setNumber(llvm::StringRef name, double value) {
  char text[64];
  // The shortest text that reads back as `value`.
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::isnan(value) || std::strtod(text, nullptr) == value)
      break;
  }
  set(name, text);
}

void Agreement::setFileDigest(llvm::StringRef name, llvm::StringRef path) {
  if (path.empty()) {
    setPresence(name, std::nullopt);
    return;
  }
  if (llvm::sys::fs::is_directory(path)) {
    setDirectoryDigest(name, path);
    return;
  }
  // Only a regular file is read here: a FIFO or a device (/dev/zero) would
  // block or never end; the command's own reader refuses them in one line.
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      std::make_error_code(std::errc::invalid_argument);
  if (llvm::sys::fs::is_regular_file(path))
    buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buffer) {
    AgreementEntry &e = slot(name);
    e.value.clear();
    e.shown = path.str() + " (not readable here)";
    e.known = false;
    return;
  }
  setBytesDigest(name, path, (*buffer)->getBuffer());
}

void Agreement::setDirectoryDigest(llvm::StringRef name, llvm::StringRef path) {
  // The files directly in it, by name: each one's name, digest and size.
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(path, ec), end; !ec && it != end;
       it.increment(ec))
    if (llvm::sys::fs::is_regular_file(it->path()))
      names.push_back(llvm::sys::path::filename(it->path()).str());
  llvm::sort(names);
  std::string listing;
  uint64_t bytes = 0;
  for (const std::string &file : names) {
    llvm::SmallString<256> full(path);
    llvm::sys::path::append(full, file);
    auto buffer = llvm::MemoryBuffer::getFile(full, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer) {
      ec = buffer.getError();
      break;
    }
    llvm::StringRef content = (*buffer)->getBuffer();
    bytes += content.size();
    listing += file + '\0' + digestText(content) + '\0';
  }
  AgreementEntry &e = slot(name);
  if (ec) {
    e.value.clear();
    e.shown = path.str() + " (not readable here)";
    e.known = false;
    return;
  }
  e.value = llvm::formatv("xxh64 {0:x-16}, {1} files, {2} bytes",
                          llvm::xxHash64(listing), names.size(), bytes)
                .str();
  e.shown = path.str() + " (" + e.value + ")";
  e.known = true;
}

void Agreement::setBytesDigest(llvm::StringRef name, llvm::StringRef path,
                               llvm::StringRef bytes) {
  AgreementEntry &e = slot(name);
  e.value = digestText(bytes);
  e.shown = path.str() + " (" + e.value + ")";
  e.known = true;
}

bool Agreement::has(llvm::StringRef name) const {
  return find(*this, name) != nullptr;
}

std::string Agreement::encode() const {
  std::string out = kMagic.str();
  putU32(out, static_cast<uint32_t>(entries_.size()));
  for (const AgreementEntry &e : entries_) {
    out.push_back(e.known ? 1 : 0);
    putText(out, e.name);
    putText(out, e.value);
    putText(out, e.shown);
  }
  return out;
}

llvm::Expected<Agreement> Agreement::decode(llvm::StringRef bytes) {
  auto malformed = [](llvm::StringRef why) {
    return makeError("malformed start-up record (" + why + ")");
  };
  if (bytes.size() > kMaxBytes)
    return malformed(
        llvm::formatv("{0} bytes, over {1}", bytes.size(), kMaxBytes).str());
  if (!bytes.startswith(kMagic))
    return malformed("not a ppc-agree-1 record: another ppc version?");
  Reader in(bytes.drop_front(kMagic.size()));
  std::optional<uint32_t> count = in.u32();
  if (!count)
    return malformed("truncated");
  if (*count > kMaxEntries)
    return malformed(
        llvm::formatv("{0} entries, over {1}", *count, kMaxEntries).str());
  Agreement record;
  llvm::StringSet<> names;
  for (uint32_t i = 0; i < *count; ++i) {
    std::optional<uint8_t> known = in.u8();
    std::optional<std::string> name, value, shown;
    if (known)
      name = in.text();
    if (name)
      value = in.text();
    if (value)
      shown = in.text();
    if (!shown || *known > 1)
      return malformed("truncated");
    if (!names.insert(*name).second)
      return malformed("'" + printable(*name) + "' twice");
    record.entries_.push_back(AgreementEntry{
        std::move(*name), std::move(*value), std::move(*shown), *known == 1});
  }
  if (!in.done())
    return malformed("bytes after its last entry");
  return record;
}

std::string firstDisagreement(const std::vector<Agreement> &records) {
  for (size_t r = 1; r < records.size(); ++r) {
    std::string line =
        differenceOf(records[0], records[r], static_cast<int>(r));
    if (!line.empty())
      return line;
  }
  return "";
}

llvm::Error agreeAcrossRanks(c10d::Store &store, int rank, int worldSize,
                             const Agreement &mine,
                             std::chrono::milliseconds timeout) {
  std::string bytes = mine.encode();
  store.set(agreeKey(rank), std::vector<uint8_t>(bytes.begin(), bytes.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < worldSize; ++r)
    keys.push_back(agreeKey(r));
  try {
    store.wait(keys, timeout);
  } catch (const std::exception &) {
    // This rank's own record was set above: gone, it was deleted.
    if (!store.check({keys[rank]}))
      return makeError(llvm::formatv(
          "this rank's start-up record (rendezvous key '{0}') was deleted "
          "from the store: another process is writing into this job's store",
          keys[rank]));
    for (int r = 0; r < worldSize; ++r)
      if (!store.check({keys[r]}))
        return lostRank(r, llvm::formatv("sent no start-up record within "
                                         "{0} s",
                                         secondsText(timeout)));
    throw;
  }
  std::vector<Agreement> records;
  std::string line;
  for (int r = 0; r < worldSize && line.empty(); ++r) {
    if (r == rank) {
      records.push_back(mine);
      continue;
    }
    std::vector<uint8_t> got = store.get(keys[r]);
    auto record = Agreement::decode(llvm::StringRef(
        reinterpret_cast<const char *>(got.data()), got.size()));
    if (!record)
      line = llvm::formatv("ranks disagree: rank {0} sent a {1}", r,
                           llvm::toString(record.takeError()));
    else
      records.push_back(std::move(*record));
  }
  if (line.empty())
    line = firstDisagreement(records);
  if (line.empty())
    return llvm::Error::success();
  // Rank 0 may serve the store: it stays until every rank has read the
  // records (or a short while), so that the others see the difference too
  // rather than a broken connection.
  store.add(kReadKey, 1);
  if (rank == 0) {
    auto until =
        std::chrono::steady_clock::now() +
        std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10));
    while (store.add(kReadKey, 0) < worldSize &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return makeError(line);
}

} // namespace ppc
