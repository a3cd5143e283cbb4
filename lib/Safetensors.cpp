//===- lib/Safetensors.cpp - Hugging Face safetensors files ---------------===//
//
// This file implements the checked safetensors reader (header parsing, the
// mapped shard, the sharded checkpoint and its index) and the sharding
// writer. See Safetensors.h for the format and every check.
//
//===----------------------------------------------------------------------===//
#include "lib/Safetensors.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Errno.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace ppc::safetensors {

namespace {

struct DType {
  llvm::StringLiteral name;
  size_t size;
};
constexpr DType kDTypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

/// The byte size of `shape` elements of `size` bytes, or nothing on
/// overflow. A zero dimension empties the tensor whatever the others are.
std::optional<uint64_t> byteSize(const std::vector<int64_t> &shape,
                                 size_t size) {
  if (llvm::is_contained(shape, 0))
    return 0;
  uint64_t bytes = size;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      return std::nullopt;
  return bytes;
}

/// The key of the top-level member whose text starts at `text[at]` (a
/// '"'), decoded, and the index just past it.
std::pair<std::string, size_t> readKey(llvm::StringRef text, size_t at) {
  size_t end = at + 1;
  while (end < text.size() && text[end] != '"')
    end += text[end] == '\\' ? 2 : 1;
  llvm::StringRef raw = text.slice(at, end + 1);
  std::string key;
  if (auto value = llvm::json::parse(raw))
    if (auto s = value->getAsString())
      key = s->str();
  return {key, end + 1};
}

/// A top-level key of the JSON object `text` (already parsed) that occurs
/// twice, or nothing. llvm::json::parse keeps the last of equal keys, so
/// duplicates are found in the text: each member of the object puts exactly
/// one ':' at depth 1, so when those outnumber `members`, some key repeats,
/// and the keys are then compared decoded ("a" and "\u0061" are equal).
std::optional<std::string> repeatedKey(llvm::StringRef text, size_t members) {
  size_t colons = 0;
  unsigned depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ':' && depth == 1) {
      ++colons;
    }
  }
  if (colons == members)
    return std::nullopt;
  llvm::StringSet<> seen;
  depth = 0;
  bool expectKey = false;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '"') {
      auto [key, next] = readKey(text, i);
      if (depth == 1 && expectKey && !seen.insert(key).second)
        return key;
      expectKey = false;
      i = next;
      continue;
    }
    if (c == '{' || c == '[')
      ++depth;
    else if (c == '}' || c == ']')
      --depth;
    if ((c == '{' && depth == 1) || (c == ',' && depth == 1))
      expectKey = true;
    ++i;
  }
  return std::nullopt;
}

/// Checks one header entry `name` -> `value` of a file whose data holds
/// `dataBytes` bytes from `dataStart`.
llvm::Expected<TensorEntry> parseEntry(llvm::StringRef name,
                                       const llvm::json::Value &value,
                                       uint64_t dataStart, uint64_t dataBytes,
                                       llvm::StringRef path) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("checkpoint '" + path + "': tensor '" + printable(name) +
                     "' " + why);
  };
  const llvm::json::Object *object = value.getAsObject();
  if (!object)
    return bad("is not an object");
  TensorEntry entry;
  entry.name = name.str();
  auto dtype = object->getString("dtype");
  if (!dtype)
    return bad("has no dtype string");
  size_t size = dtypeSize(*dtype);
  if (!size)
    return bad("has unknown dtype '" + printable(*dtype) + "'");
  entry.dtype = dtype->str();
  const llvm::json::Array *shape = object->getArray("shape");
  if (!shape)
    return bad("has no shape array");
  for (size_t i = 0; i < shape->size(); ++i) {
    auto d = (*shape)[i].getAsInteger();
    if (!d)
      return bad(llvm::formatv("shape[{0}] is not an integer", i).str());
    if (*d < 0)
      return bad(llvm::formatv("shape[{0}] is {1}, not a size", i, *d).str());
    entry.shape.push_back(*d);
  }
  auto bytes = byteSize(entry.shape, size);
  if (!bytes)
    return bad("shape " + shapeText(entry.shape) + " of " + entry.dtype +
               " overflows");
  const llvm::json::Array *offsets = object->getArray("data_offsets");
  llvm::Optional<int64_t> begin, end;
  if (offsets && offsets->size() == 2) {
    begin = (*offsets)[0].getAsInteger();
    end = (*offsets)[1].getAsInteger();
  }
  if (!begin || !end || *begin < 0 || *end < 0)
    return bad("has no data_offsets [begin, end]");
  std::string range = llvm::formatv("data_offsets [{0}, {1}]", *begin, *end);
  if (*begin > *end)
    return bad(range + " begin after they end");
  if (static_cast<uint64_t>(*end) > dataBytes)
    return bad(range + " pass the end of the data (" + llvm::Twine(dataBytes) +
               " bytes)");
  uint64_t held = static_cast<uint64_t>(*end - *begin);
  if (*bytes != held)
    return bad(llvm::formatv("shape {0} of {1} takes {2} bytes, but {3} hold "
                             "{4}",
                             shapeText(entry.shape), entry.dtype, *bytes, range,
                             held)
                   .str());
  entry.begin = dataStart + static_cast<uint64_t>(*begin);
  entry.end = dataStart + static_cast<uint64_t>(*end);
  return entry;
}

/// Refuses overlapping byte ranges among `entries` (in any order); tensors
/// of 0 bytes overlap nothing.
llvm::Error checkDisjoint(const std::vector<TensorEntry> &entries,
                          uint64_t dataStart, llvm::StringRef path) {
  std::vector<const TensorEntry *> byBegin;
  for (const TensorEntry &e : entries)
    if (e.end > e.begin)
      byBegin.push_back(&e);
  std::sort(byBegin.begin(), byBegin.end(),
            [](const TensorEntry *a, const TensorEntry *b) {
              return std::tie(a->begin, a->end, a->name) <
                     std::tie(b->begin, b->end, b->name);
            });
  auto range = [&](const TensorEntry *e) {
    return llvm::formatv("bytes [{0}, {1}]", e->begin - dataStart,
                         e->end - dataStart)
        .str();
  };
  // Sorted by begin and pairwise disjoint so far, so the previous range
  // ends last.
  for (size_t i = 1; i < byBegin.size(); ++i)
    if (byBegin[i]->begin < byBegin[i - 1]->end)
      return makeError("checkpoint '" + path + "': tensor '" +
                       printable(byBegin[i]->name) + "' " + range(byBegin[i]) +
                       " overlap tensor '" + printable(byBegin[i - 1]->name) +
                       "' " + range(byBegin[i - 1]));
  return llvm::Error::success();
}

uint64_t littleEndian64(llvm::StringRef b) {
  uint64_t v = 0;
  for (unsigned i = 0; i < 8; ++i)
    v |= uint64_t(static_cast<uint8_t>(b[i])) << (8 * i);
  return v;
}

/// Reads exactly `size` bytes at `offset` of `fd` into `out`; false when
/// the file ends first (errno 0) or a read fails (errno set).
bool readAt(int fd, uint64_t offset, char *out, uint64_t size) {
  errno = 0;
  for (uint64_t done = 0; done < size;) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(size - done, kGiB));
    ssize_t n = llvm::sys::RetryAfterSignal(-1, ::pread, fd, out + done, chunk,
                                            static_cast<off_t>(offset + done));
    if (n <= 0)
      return false;
    done += static_cast<uint64_t>(n);
  }
  return true;
}

/// Whether `name`, a shard named by an index, is a plain file name in the
/// index's directory.
bool isShardName(llvm::StringRef name) {
  return name.endswith(".safetensors") && !name.contains('/') &&
         !name.contains('\0') && name != "." && name != "..";
}

} // namespace

size_t dtypeSize(llvm::StringRef dtype) {
  for (const DType &d : kDTypes)
    if (d.name == dtype)
      return d.size;
  return 0;
}

namespace {
/// The header length N that the first 8 bytes of `prefix` give, checked
/// against the limit and the file before anything is allocated for it.
llvm::Expected<uint64_t> headerLength(llvm::StringRef prefix, uint64_t fileSize,
                                      llvm::StringRef path) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("checkpoint '" + path + "': " + why);
  };
  if (fileSize < 8 || prefix.size() < 8)
    return bad(llvm::formatv("file is {0} bytes, too short for a header "
                             "length",
                             fileSize)
                   .str());
  uint64_t length = littleEndian64(prefix);
  if (length > kMaxHeaderBytes)
    return bad(llvm::formatv("header length {0} is over the limit of {1} "
                             "bytes",
                             length, kMaxHeaderBytes)
                   .str());
  if (length > fileSize - 8)
    return bad(llvm::formatv("header length {0} is more than the {1} bytes "
                             "after it",
                             length, fileSize - 8)
                   .str());
  if (length < 2)
    return bad(llvm::formatv("header length {0} is too short for a JSON "
                             "object",
                             length)
                   .str());
  return length;
}
} // namespace

llvm::Expected<std::vector<TensorEntry>>
parseHeader(llvm::StringRef prefix, uint64_t fileSize, llvm::StringRef path,
            std::map<std::string, std::string> *metadata) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("checkpoint '" + path + "': " + why);
  };
  auto lengthOr = headerLength(prefix, fileSize, path);
  if (!lengthOr)
    return lengthOr.takeError();
  uint64_t length = *lengthOr;
  if (prefix.size() - 8 < length)
    return bad(llvm::formatv("header is cut short: {0} of its {1} bytes "
                             "were given",
                             prefix.size() - 8, length)
                   .str());
  llvm::StringRef text = prefix.substr(8, length);
  auto json = parseJSONBounded(text, kMaxJSONDepth,
                               "checkpoint '" + path.str() + "': header");
  if (!json)
    return json.takeError();
  const llvm::json::Object *object = json->getAsObject();
  if (!object)
    return bad("header is not a JSON object");
  if (auto key = repeatedKey(text, object->size()))
    return bad("header names tensor '" + printable(*key) + "' twice");

  // DenseMap order is arbitrary: go by name, so that of several problems
  // the same one is reported every time.
  std::vector<const llvm::json::Object::value_type *> members;
  for (const auto &member : *object)
    members.push_back(&member);
  std::sort(members.begin(), members.end(), [](auto *a, auto *b) {
    return llvm::StringRef(a->first) < llvm::StringRef(b->first);
  });
  uint64_t dataStart = 8 + length, dataBytes = fileSize - dataStart;
  std::vector<TensorEntry> entries;
  for (const auto *member : members) {
    llvm::StringRef name = member->first;
    if (name == "__metadata__") {
      const llvm::json::Object *meta = member->second.getAsObject();
      if (!meta)
        return bad("header __metadata__ is not an object of strings");
      for (const auto &kv : *meta) {
        auto value = kv.second.getAsString();
        if (!value)
          return bad("header __metadata__ is not an object of strings");
        if (metadata)
          (*metadata)[kv.first.str()] = value->str();
      }
      continue;
    }
    if (name.empty())
      return bad("header has a tensor with an empty name");
    auto entry = parseEntry(name, member->second, dataStart, dataBytes, path);
    if (!entry)
      return entry.takeError();
    entries.push_back(std::move(*entry));
  }
  if (llvm::Error err = checkDisjoint(entries, dataStart, path))
    return err;
  return entries;
}

ShardFile::~ShardFile() = default;

llvm::Expected<std::unique_ptr<ShardFile>>
ShardFile::open(llvm::StringRef path) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("checkpoint '" + path + "': " + why);
  };
  std::string pathStr = path.str();
  // O_NONBLOCK: opening a FIFO without a writer would otherwise block
  // forever, before fstat could tell us what the file is.
  FileDescriptor fd(llvm::sys::RetryAfterSignal(-1, ::open, pathStr.c_str(),
                                                O_RDONLY | O_NONBLOCK |
                                                    O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0)
    return bad("cannot open: " + llvm::sys::StrError(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    return bad("cannot read: " + llvm::sys::StrError(errno));
  if (!S_ISREG(st.st_mode))
    return bad(llvm::Twine("is ") + fileTypeName(st.st_mode) +
               ", not a regular file");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  auto shortRead = [&]() {
    return errno ? bad("cannot read: " + llvm::sys::StrError(errno))
                 : bad("changed while being read");
  };
  // The length first, checked before anything is allocated for the
  // header; then the header itself.
  std::string prefix(std::min<uint64_t>(size, 8), '\0');
  if (!readAt(fd.get(), 0, prefix.data(), prefix.size()))
    return shortRead();
  auto length = headerLength(prefix, size, path);
  if (!length)
    return length.takeError();
  prefix.resize(8 + *length);
  if (!readAt(fd.get(), 8, prefix.data() + 8, *length))
    return shortRead();
  std::unique_ptr<ShardFile> shard(new ShardFile());
  shard->path_ = pathStr;
  auto tensors = parseHeader(prefix, size, path, &shard->metadata_);
  if (!tensors)
    return tensors.takeError();
  shard->tensors_ = std::move(*tensors); // sorted by name
  std::error_code ec;
  shard->mapping_ = std::make_unique<llvm::sys::fs::mapped_file_region>(
      fd.get(), llvm::sys::fs::mapped_file_region::readonly,
      static_cast<size_t>(size), 0, ec);
  if (ec)
    return bad("cannot map: " + ec.message());
  return shard;
}

const TensorEntry *ShardFile::find(llvm::StringRef name) const {
  auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorEntry &e, llvm::StringRef n) { return e.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

llvm::StringRef ShardFile::bytes(const TensorEntry &entry) {
  bytesServed_ += entry.end - entry.begin;
  return llvm::StringRef(mapping_->const_data() + entry.begin,
                         entry.end - entry.begin);
}

Checkpoint::~Checkpoint() = default;

llvm::Expected<Checkpoint> Checkpoint::open(llvm::StringRef path) {
  Checkpoint checkpoint;
  checkpoint.path_ = path.str();
  auto openSingle = [&](const std::string &file) -> llvm::Expected<Checkpoint> {
    auto shard = ShardFile::open(file);
    if (!shard)
      return shard.takeError();
    for (const TensorEntry &e : (*shard)->tensors())
      checkpoint.shardOf_[e.name] = file;
    checkpoint.shards_[file] = std::move(*shard);
    return std::move(checkpoint);
  };
  if (!llvm::sys::fs::is_directory(path))
    return openSingle(path.str());
  llvm::SmallString<256> index(path);
  llvm::sys::path::append(index, kIndexName);
  if (!llvm::sys::fs::exists(index)) {
    llvm::SmallString<256> single(path);
    llvm::sys::path::append(single, kSingleName);
    if (!llvm::sys::fs::exists(single))
      return makeError("checkpoint '" + path + "': holds neither " +
                       kIndexName + " nor " + kSingleName);
    return openSingle(std::string(single));
  }
  checkpoint.indexPath_ = std::string(index);
  auto bad = [&](const llvm::Twine &why) {
    return makeError("checkpoint '" + index + "': " + why);
  };
  auto buffer = readFileBounded(index, kMaxIndexBytes, "checkpoint index");
  if (!buffer)
    return buffer.takeError();
  auto json = parseJSONBounded((*buffer)->getBuffer(), kMaxJSONDepth,
                               "checkpoint '" + index.str().str() + "': index");
  if (!json)
    return json.takeError();
  const llvm::json::Object *top = json->getAsObject();
  const llvm::json::Object *map = top ? top->getObject("weight_map") : nullptr;
  if (!map)
    return bad("index has no weight_map object");
  std::vector<const llvm::json::Object::value_type *> members;
  for (const auto &member : *map)
    members.push_back(&member);
  std::sort(members.begin(), members.end(), [](auto *a, auto *b) {
    return llvm::StringRef(a->first) < llvm::StringRef(b->first);
  });
  for (const auto *member : members) {
    llvm::StringRef name = member->first;
    if (name.empty())
      return bad("index has a tensor with an empty name");
    auto file = member->second.getAsString();
    if (!file || !isShardName(*file))
      return bad(
          llvm::formatv("tensor '{0}' maps to {1}, not a .safetensors "
                        "file in the directory",
                        printable(name),
                        file ? "'" + printable(*file) + "'" : "a non-string")
              .str());
    llvm::SmallString<256> shard(path);
    llvm::sys::path::append(shard, *file);
    checkpoint.shardOf_[name.str()] = std::string(shard);
  }
  return checkpoint;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(shardOf_.size());
  for (const auto &entry : shardOf_)
    out.push_back(entry.first);
  return out;
}

std::string Checkpoint::shardOf(llvm::StringRef name) const {
  auto it = shardOf_.find(name.str());
  return it == shardOf_.end() ? std::string() : it->second;
}

llvm::Expected<std::pair<ShardFile *, const TensorEntry *>>
Checkpoint::find(llvm::StringRef name) {
  auto it = shardOf_.find(name.str());
  if (it == shardOf_.end())
    return makeError("checkpoint '" + path_ + "': has no tensor '" +
                     printable(name) + "'");
  std::unique_ptr<ShardFile> &shard = shards_[it->second];
  if (!shard) {
    auto opened = ShardFile::open(it->second);
    if (!opened) {
      shards_.erase(it->second);
      return opened.takeError();
    }
    shard = std::move(*opened);
  }
  const TensorEntry *entry = shard->find(name);
  if (!entry)
    return makeError("checkpoint '" + indexPath_ + "': tensor '" +
                     printable(name) + "' maps to '" +
                     printable(llvm::sys::path::filename(it->second)) +
                     "', which does not hold it");
  return std::make_pair(shard.get(), entry);
}

uint64_t Checkpoint::bytesServed() const {
  uint64_t total = 0;
  for (const auto &shard : shards_)
    if (shard.second)
      total += shard.second->bytesServed();
  return total;
}

namespace {

/// The header of one shard holding `tensors` (in order, contiguous from
/// offset 0), with its 8-byte length, padded with spaces to a multiple of 8
/// as the reference pads it.
std::string shardHeader(const std::vector<const WriteTensor *> &tensors,
                        const std::map<std::string, std::string> &metadata) {
  llvm::json::Object header;
  if (!metadata.empty()) {
    llvm::json::Object meta;
    for (const auto &kv : metadata)
      meta[kv.first] = kv.second;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const WriteTensor *t : tensors) {
    llvm::json::Array shape;
    for (int64_t d : t->shape)
      shape.push_back(d);
    uint64_t end = offset + t->bytes.size();
    header[t->name] = llvm::json::Object{
        {"dtype", t->dtype},
        {"shape", std::move(shape)},
        {"data_offsets", llvm::json::Array{static_cast<int64_t>(offset),
                                           static_cast<int64_t>(end)}}};
    offset = end;
  }
  std::string text;
  llvm::raw_string_ostream(text) << llvm::json::Value(std::move(header));
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (unsigned i = 0; i < 8; ++i)
    out[i] = static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

/// Checks everything before the first byte is written: TENSORS' names,
/// dtypes and sizes, and DIR (a directory without safetensors files, made
/// when missing). Errors name DIR, as writeCheckpoint's.
llvm::Error checkWrite(llvm::StringRef dir,
                       const std::vector<WriteTensor> &tensors) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("cannot write checkpoint '" + dir + "': " + why);
  };
  llvm::StringSet<> names;
  for (const WriteTensor &t : tensors) {
    auto badTensor = [&](const llvm::Twine &why) {
      return bad("tensor '" + printable(t.name) + "' " + why);
    };
    if (t.name.empty() || t.name == "__metadata__")
      return bad("has a tensor named '" + printable(t.name) + "'");
    if (!names.insert(t.name).second)
      return badTensor("is given twice");
    size_t size = dtypeSize(t.dtype);
    if (!size)
      return badTensor("has unknown dtype '" + printable(t.dtype) + "'");
    if (llvm::any_of(t.shape, [](int64_t d) { return d < 0; }))
      return badTensor("has a negative dimension in shape " +
                       shapeText(t.shape));
    auto bytes = byteSize(t.shape, size);
    if (!bytes || *bytes != t.bytes.size())
      return badTensor(llvm::formatv("has {0} bytes for shape {1} of {2}",
                                     t.bytes.size(), shapeText(t.shape),
                                     t.dtype)
                           .str());
  }
  if (llvm::sys::fs::exists(dir)) {
    if (!llvm::sys::fs::is_directory(dir))
      return bad("it exists and is not a directory");
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      llvm::StringRef file = llvm::sys::path::filename(it->path());
      if (file.endswith(".safetensors") || file == kIndexName)
        return bad("it already holds '" + printable(file) + "'");
    }
    if (ec)
      return bad(ec.message());
  } else if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    return makeError("cannot create checkpoint directory '" + dir +
                     "': " + ec.message());
  }
  return llvm::Error::success();
}

} // namespace

llvm::Error
writeCheckpoint(llvm::StringRef dir, const std::vector<WriteTensor> &tensors,
                uint64_t maxShardBytes,
                const std::map<std::string, std::string> &metadata) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("cannot write checkpoint '" + dir + "': " + why);
  };
  if (llvm::Error err = checkWrite(dir, tensors))
    return err;

  // Shards as transformers cuts them: close the current shard when the next
  // tensor would take it past the limit, unless it is empty.
  std::vector<std::vector<const WriteTensor *>> shards(1);
  uint64_t shardBytes = 0, totalBytes = 0;
  for (const WriteTensor &t : tensors) {
    if (!shards.back().empty() && shardBytes + t.bytes.size() > maxShardBytes) {
      shards.emplace_back();
      shardBytes = 0;
    }
    shards.back().push_back(&t);
    shardBytes += t.bytes.size();
    totalBytes += t.bytes.size();
  }

  std::vector<std::string> written;
  auto removeWritten = [&](llvm::Error err) {
    for (const std::string &file : written)
      llvm::sys::fs::remove(file);
    return err;
  };
  llvm::json::Object weightMap;
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = shards.size() == 1
                           ? kSingleName.str()
                           : llvm::formatv("model-{0:d5}-of-{1:d5}.safetensors",
                                           i + 1, shards.size())
                                 .str();
    std::string header = shardHeader(shards[i], metadata);
    if (header.size() - 8 > kMaxHeaderBytes)
      return removeWritten(
          bad(llvm::formatv("header of shard {0} is over the limit of {1} "
                            "bytes",
                            i + 1, kMaxHeaderBytes)
                  .str()));
    llvm::SmallString<256> file(dir);
    llvm::sys::path::append(file, name);
    if (llvm::Error err = writeFileAtomically(file, [&](llvm::raw_ostream &os) {
          os << header;
          for (const WriteTensor *t : shards[i]) {
            os << t->bytes;
            if (t->written)
              t->written();
          }
          return llvm::Error::success();
        }))
      return removeWritten(std::move(err));
    written.push_back(std::string(file));
    for (const WriteTensor *t : shards[i])
      weightMap[t->name] = name;
  }
  if (shards.size() == 1)
    return llvm::Error::success();
  llvm::SmallString<256> index(dir);
  llvm::sys::path::append(index, kIndexName);
  llvm::json::Object indexJSON{
      {"metadata",
       llvm::json::Object{{"total_size", static_cast<int64_t>(totalBytes)}}},
      {"weight_map", std::move(weightMap)}};
  if (llvm::Error err = writeJSONFileAtomically(
          index, llvm::json::Value(std::move(indexJSON))))
    return removeWritten(std::move(err));
  return llvm::Error::success();
}

} // namespace ppc::safetensors
