//===- lib/TensorIO.cpp - Tensors in files Python reads and writes --------===//
//
// This file implements reading torch.save files as untrusted input and
// writing files torch.load reads.
//
// Reading does what torch::pickle_load does (open the zip archive, unpickle
// data.pkl, fetch each storage record) with three additions:
//  1. The pickle is walked once before LibTorch's Unpickler sees it: every
//     opcode must be known, no opcode may pop more than the stack holds, and
//     memo indices grow one at a time (the Unpickler resizes its memo to any
//     index it is given). The walk also rewrites APPEND and SETITEM, which
//     Python emits for a list of one element or a dict of one item and which
//     LibTorch 1.13's Unpickler does not know ("Unknown opcode for unpickling
//     at 0x61"), into their batched forms MARK ... APPENDS / SETITEMS.
//  2. Storages are forced onto the CPU, and the size of each record read is
//     remembered: the Unpickler sizes a storage by the element count the
//     pickle claims, not by the bytes the record holds.
//  3. Every tensor is checked as torch.load checks it: an allowed dtype, a
//     dense strided layout, non-negative sizes, strides and offset, and a
//     view that fits in its storage, which fits in its record.
//
//===----------------------------------------------------------------------===//
#include "lib/TensorIO.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/serialize.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace ppc {

namespace {
/// Checks a pickle's opcode stream and rewrites APPEND / SETITEM (see the
/// file comment). It simulates the stack as the start offset of each item,
/// so the MARK that batched forms need can be inserted where the item (or
/// the key) begins.
class PickleCheck {
public:
  explicit PickleCheck(llvm::StringRef bytes) : in(bytes) {}

  /// The rewritten pickle, or a one-line reason it is malformed.
  llvm::Expected<std::string> run();

private:
  struct Mark {
    size_t depth;
    size_t offset;
  };

  llvm::Error fail(const llvm::Twine &why, size_t at) {
    return makeError(llvm::formatv("{0} at byte {1} of data.pkl", why, at));
  }
  /// Reads an n-byte little-endian unsigned argument.
  bool arg(size_t n, uint64_t &out) {
    if (in.size() - pos < n)
      return false;
    out = 0;
    for (size_t i = 0; i < n; ++i)
      out |= static_cast<uint64_t>(static_cast<unsigned char>(in[pos + i]))
             << (8 * i);
    pos += n;
    return true;
  }
  bool skip(uint64_t n) {
    if (in.size() - pos < n)
      return false;
    pos += n;
    return true;
  }
  /// Items above the innermost mark.
  size_t available() const {
    return starts.size() - (marks.empty() ? 0 : marks.back().depth);
  }
  llvm::Error pop(size_t n, size_t at) {
    if (available() < n)
      return fail("a pickle opcode pops an empty stack", at);
    starts.resize(starts.size() - n);
    return llvm::Error::success();
  }
  llvm::Error popToMark(size_t at, bool keepsTarget) {
    if (marks.empty())
      return fail("a pickle opcode needs a MARK", at);
    Mark m = marks.back();
    marks.pop_back();
    if (keepsTarget &&
        (m.depth == 0 || (!marks.empty() && marks.back().depth >= m.depth)))
      return fail("a pickle opcode pops an empty stack", at);
    starts.resize(m.depth);
    return llvm::Error::success();
  }
  llvm::Error step(char op, size_t at);

  llvm::StringRef in;
  size_t pos = 0;
  std::vector<size_t> starts;
  std::vector<Mark> marks;
  std::vector<size_t> inserts;
  std::map<size_t, char> rewritten;
  uint64_t memoSize = 0;
  /// The start of each memoized item (BINPUT), and the starts of the items
  /// that are collections.OrderedDict objects: LibTorch's unpickler turns
  /// one into None (it expects only a tensor's empty backward hooks), and
  /// then asserts on a SETITEM(S) into it ("INTERNAL ASSERT FAILED ...
  /// please report a bug to PyTorch").
  std::map<uint64_t, size_t> memo;
  std::set<size_t> orderedDicts;
  llvm::Error setItemsInto(size_t target, size_t at) {
    if (!orderedDicts.count(target))
      return llvm::Error::success();
    return fail("a collections.OrderedDict holds items, which LibTorch's "
                "reader cannot read (torch.save a dict instead: dict(d))",
                at);
  }
};
} // namespace

llvm::Error PickleCheck::step(char op, size_t at) {
  uint64_t n = 0;
  auto truncated = [&] { return fail("the pickle is truncated", at); };
  auto push = [&] {
    starts.push_back(at);
    return llvm::Error::success();
  };
  switch (static_cast<unsigned char>(op)) {
  case 0x80: // PROTO
    return arg(1, n) ? llvm::Error::success() : truncated();
  case '(': // MARK
    marks.push_back({starts.size(), at});
    return llvm::Error::success();
  case ']':  // EMPTY_LIST
  case ')':  // EMPTY_TUPLE
  case '}':  // EMPTY_DICT
  case 0x8f: // EMPTY_SET
  case 'N':  // NONE
  case 0x88: // NEWTRUE
  case 0x89: // NEWFALSE
    return push();
  case 'K': // BININT1
  case 'M': // BININT2
  case 'J': // BININT
  case 'G': // BINFLOAT
    return arg(op == 'K'   ? 1
               : op == 'M' ? 2
               : op == 'J' ? 4
                           : 8,
               n)
               ? push()
               : truncated();
  case 0x8a: // LONG1
  case 'U':  // SHORT_BINSTRING
  case 'C':  // SHORT_BINBYTES
  case 0x8c: // SHORT_BINUNICODE
    return arg(1, n) && skip(n) ? push() : truncated();
  case 0x8b: // LONG4
  case 'T':  // BINSTRING
  case 'B':  // BINBYTES
  case 'X':  // BINUNICODE
    return arg(4, n) && skip(n) ? push() : truncated();
  case 0x8d: // BINUNICODE8
    return arg(8, n) && skip(n) ? push() : truncated();
  case 'c': { // GLOBAL: module and name, each ending in a newline
    size_t name = pos;
    for (int line = 0; line < 2; ++line) {
      size_t end = in.find('\n', pos);
      if (end == llvm::StringRef::npos)
        return truncated();
      pos = end + 1;
    }
    // REDUCE keeps the callable's start: the object it makes is marked too.
    if (in.slice(name, pos) == "collections\nOrderedDict\n")
      orderedDicts.insert(at);
    return push();
  }
  case 'q': // BINPUT
  case 'r': // LONG_BINPUT
    if (!arg(op == 'q' ? 1 : 4, n))
      return truncated();
    if (available() < 1)
      return fail("a pickle opcode pops an empty stack", at);
    if (n > memoSize)
      return fail("a pickle memo index skips ahead", at);
    memoSize = std::max(memoSize, n + 1);
    memo[n] = starts.back();
    return llvm::Error::success();
  case 'h': // BINGET
  case 'j': // LONG_BINGET
    if (!arg(op == 'h' ? 1 : 4, n))
      return truncated();
    if (n >= memoSize)
      return fail("a pickle memo index is unset", at);
    if (orderedDicts.count(memo[n]))
      orderedDicts.insert(at);
    return push();
  case 'a': { // APPEND: list, item -> MARK item APPENDS
    if (available() < 2)
      return fail("a pickle opcode pops an empty stack", at);
    inserts.push_back(starts.back());
    starts.pop_back();
    rewritten[at] = 'e';
    return llvm::Error::success();
  }
  case 's': { // SETITEM: dict, key, value -> MARK key value SETITEMS
    if (available() < 3)
      return fail("a pickle opcode pops an empty stack", at);
    if (llvm::Error err = setItemsInto(starts[starts.size() - 3], at))
      return err;
    inserts.push_back(starts[starts.size() - 2]);
    starts.resize(starts.size() - 2);
    rewritten[at] = 'u';
    return llvm::Error::success();
  }
  case 'e':  // APPENDS
  case 'u':  // SETITEMS
  case 0x90: // ADDITEMS
    if (op == 'u' && !marks.empty() && marks.back().depth > 0)
      if (llvm::Error err = setItemsInto(starts[marks.back().depth - 1], at))
        return err;
    return popToMark(at, /*keepsTarget=*/true);
  case 't': { // TUPLE
    if (marks.empty())
      return fail("a pickle opcode needs a MARK", at);
    size_t start = marks.back().offset;
    if (llvm::Error err = popToMark(at, /*keepsTarget=*/false))
      return err;
    starts.push_back(start);
    return llvm::Error::success();
  }
  case 0x85:   // TUPLE1
  case 0x86:   // TUPLE2
  case 0x87:   // TUPLE3
  case 'R':    // REDUCE: callable, args
  case 0x81: { // NEWOBJ: class, args
    size_t k = static_cast<unsigned char>(op) >= 0x85 &&
                       static_cast<unsigned char>(op) <= 0x87
                   ? static_cast<unsigned char>(op) - 0x84
                   : 2;
    if (available() < k)
      return fail("a pickle opcode pops an empty stack", at);
    size_t start = starts[starts.size() - k];
    starts.resize(starts.size() - k);
    starts.push_back(start);
    return llvm::Error::success();
  }
  case 'b': // BUILD: object, state
    if (available() < 2)
      return fail("a pickle opcode pops an empty stack", at);
    return pop(1, at);
  case 'Q': // BINPERSID: replaces the persistent id with the storage
    if (available() < 1)
      return fail("a pickle opcode pops an empty stack", at);
    return llvm::Error::success();
  default:
    return fail(llvm::formatv("unsupported pickle opcode 0x{0:x-2}",
                              static_cast<unsigned char>(op)),
                at);
  }
}

llvm::Expected<std::string> PickleCheck::run() {
  while (pos < in.size()) {
    size_t at = pos++;
    char op = in[at];
    if (op == '.') { // STOP
      if (starts.size() != 1 || !marks.empty())
        return fail("the pickle does not end with exactly one value", at);
      std::string out;
      out.reserve(in.size() + inserts.size());
      std::sort(inserts.begin(), inserts.end());
      size_t next = 0;
      for (size_t i = 0; i <= at; ++i) {
        while (next < inserts.size() && inserts[next] == i) {
          out.push_back('(');
          ++next;
        }
        auto it = rewritten.find(i);
        out.push_back(it == rewritten.end() ? in[i] : it->second);
      }
      return out;
    }
    if (llvm::Error err = step(op, at))
      return err;
  }
  return fail("the pickle has no STOP", in.size());
}

/// The dtypes a model input may have: those of lib/DTypes.def.
static bool allowedDtype(at::ScalarType t) {
  switch (t) {
#define PPC_DTYPE(Name, Type)                                                  \
  case at::ScalarType::Type:                                                   \
    return true;
#include "lib/DTypes.def"
  default:
    return false;
  }
}

/// Bytes of storage the view of `t` reaches, or nullopt on overflow.
static std::optional<uint64_t> viewBytes(const at::Tensor &t) {
  uint64_t last = static_cast<uint64_t>(t.storage_offset());
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] == 0)
      return 0;
    uint64_t step;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.sizes()[d] - 1),
                               static_cast<uint64_t>(t.strides()[d]), &step) ||
        __builtin_add_overflow(last, step, &last))
      return std::nullopt;
  }
  uint64_t bytes;
  if (__builtin_add_overflow(last, 1, &last) ||
      __builtin_mul_overflow(last, t.element_size(), &bytes))
    return std::nullopt;
  return bytes;
}

/// Checks a loaded tensor as torch.load does before anything reads it.
/// `recordBytes` maps each storage record's data to its size in the file.
static llvm::Error checkTensor(const at::Tensor &t, size_t index,
                               const std::map<const void *, size_t> &records,
                               llvm::StringRef path) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError(llvm::formatv("input '{0}' tensor {1} is malformed: {2}",
                                   path, index, why.str())
                         .str());
  };
  if (!t.defined())
    return bad("it is undefined");
  if (t.layout() != at::kStrided || !t.device().is_cpu())
    return bad("it is not a dense CPU tensor");
  if (!allowedDtype(t.scalar_type()))
    return bad(llvm::formatv("dtype {0} is not supported",
                             c10::toString(t.scalar_type())));
  if (t.storage_offset() < 0)
    return bad("its storage offset is negative");
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.sizes()[d] < 0 || t.strides()[d] < 0)
      return bad("a size or stride is negative");
  const c10::Storage &storage = t.storage();
  std::optional<uint64_t> needed = viewBytes(t);
  if (!needed)
    return bad("its sizes and strides overflow");
  if (*needed > storage.nbytes())
    return bad(llvm::formatv("its view needs {0} bytes but its storage holds "
                             "{1}",
                             *needed, storage.nbytes()));
  if (storage.nbytes() == 0)
    return llvm::Error::success();
  auto record = records.find(storage.data());
  if (record == records.end() || storage.nbytes() > record->second)
    return bad(llvm::formatv("its storage claims {0} bytes but the file "
                             "holds {1}",
                             storage.nbytes(),
                             record == records.end() ? 0 : record->second));
  return llvm::Error::success();
}

/// Checks, from the zip central directory, that no record of the archive in
/// `bytes` claims more bytes than the file holds: LibTorch's reader
/// allocates a record's claimed (uncompressed) size before reading it, so a
/// crafted 500-byte file could make it allocate gigabytes (found by
/// fuzz_tensor_file). torch.save stores records uncompressed, so a real
/// record always fits in its file. Every directory a reader may take is
/// walked (zipDirectories); a malformed one is left to LibTorch's reader,
/// which reports it.
static llvm::Error checkRecordSizes(llvm::StringRef bytes,
                                    llvm::StringRef path) {
  auto u16 = [&](size_t at) -> uint64_t {
    return at <= bytes.size() && bytes.size() - at >= 2
               ? llvm::support::endian::read16le(bytes.data() + at)
               : 0;
  };
  auto u32 = [&](size_t at) -> uint64_t {
    return at <= bytes.size() && bytes.size() - at >= 4
               ? llvm::support::endian::read32le(bytes.data() + at)
               : 0;
  };
  auto u64 = [&](size_t at) -> uint64_t {
    return at <= bytes.size() && bytes.size() - at >= 8
               ? llvm::support::endian::read64le(bytes.data() + at)
               : 0;
  };
  constexpr uint32_t kEntrySignature = 0x02014b50;
  for (const ZipDirectory &dir : zipDirectories(bytes)) {
    size_t at = dir.offset;
    for (uint64_t i = 0; i < dir.entries && u32(at) == kEntrySignature; ++i) {
      uint64_t size = u32(at + 24);
      size_t nameLength = u16(at + 28), extraLength = u16(at + 30);
      size_t extra = at + 46 + nameLength, extraEnd = extra + extraLength;
      // Zip64: the real size is in extra field 0x0001.
      for (size_t e = extra; size == 0xffffffff && e + 4 <= extraEnd;
           e += 4 + u16(e + 2))
        if (u16(e) == 0x0001)
          size = u64(e + 4);
      if (size > bytes.size())
        return makeError(llvm::formatv("input '{0}' is not a valid torch.save "
                                       "file: a record claims {1} bytes in a "
                                       "file of {2}",
                                       path, size, bytes.size())
                             .str());
      at = extraEnd + u16(at + 32);
    }
  }
  return llvm::Error::success();
}

/// Unpickles data.pkl of a torch.save archive held in `bytes`, recording the
/// size of every storage record it reads in `records`.
static llvm::Expected<c10::IValue>
unpickleArchive(llvm::StringRef bytes, llvm::StringRef path,
                std::map<const void *, size_t> &records,
                llvm::StringRef noun = "input") {
  std::string what = ("cannot read " + noun + " '" + path + "'").str();
  if (llvm::Error err = checkRecordSizes(bytes, path))
    return err;
  auto reader = torchCall(what, [&] {
    return std::make_shared<caffe2::serialize::PyTorchStreamReader>(
        makeArchiveReader(bytes));
  });
  if (!reader)
    return reader.takeError();
  auto pickle = torchCall(what, [&] {
    auto [data, size] = (*reader)->getRecord("data.pkl");
    return std::string(static_cast<const char *>(data.get()), size);
  });
  if (!pickle)
    return pickle.takeError();
  auto checked = PickleCheck(*pickle).run();
  if (!checked)
    return withContext(checked.takeError(), what);
  return torchCall(what, [&] {
    size_t offset = 0;
    auto read = [&](char *out, size_t n) {
      n = std::min(n, checked->size() - offset);
      std::memcpy(out, checked->data() + offset, n);
      offset += n;
      return n;
    };
    auto readRecord = [&](const std::string &name) {
      auto [data, size] = (*reader)->getRecord("data/" + name);
      records[data.get()] = size;
      return std::move(data);
    };
    torch::jit::Unpickler unpickler(read, nullptr, nullptr, readRecord,
                                    c10::Device(c10::kCPU));
    unpickler.set_version((*reader)->version());
    return unpickler.parse_ivalue();
  });
}

/// The model inputs of one batch held by `value`: a tensor (one input) or a
/// tuple/list of tensors (one each), every tensor checked. `what` names the
/// batch in messages ("input 'x.pt'", "input 'x.pt' batch 2"); `index`
/// numbers the tensors of the file.
llvm::Expected<std::vector<c10::IValue>>
inputsByName(const c10::Dict<c10::IValue, c10::IValue> &dict,
             llvm::ArrayRef<std::string> names, const std::string &what) {
  std::map<std::string, c10::IValue> byName;
  for (const auto &entry : dict) {
    if (!entry.key().isString())
      return makeError(what + " holds a dict with a key that is not a str");
    std::string key = entry.key().toStringRef();
    if (!llvm::is_contained(names, key))
      return makeError(what + " names '" + printable(key) +
                       "', which the model does not take (its inputs: " +
                       llvm::join(names, ", ") + ")");
    byName[key] = entry.value();
  }
  std::vector<c10::IValue> out;
  for (const std::string &name : names) {
    auto it = byName.find(name);
    if (it == byName.end())
      return makeError(what + " lacks model input '" + name + "'");
    out.push_back(it->second);
  }
  return out;
}

static llvm::Expected<std::vector<c10::IValue>>
batchInputs(const c10::IValue &value, const std::string &what, size_t &index,
            const std::map<const void *, size_t> &records, llvm::StringRef path,
            llvm::ArrayRef<std::string> names) {
  std::vector<c10::IValue> out;
  if (value.isTensor())
    out.push_back(value);
  else if (value.isTuple())
    out = value.toTupleRef().elements().vec();
  else if (value.isList())
    out = value.toList().vec();
  else if (value.isGenericDict() && !names.empty()) {
    auto named = inputsByName(value.toGenericDict(), names, what);
    if (!named)
      return named.takeError();
    out = std::move(*named);
  } else if (value.isGenericDict())
    return makeError(what +
                     " holds a dict; expected a tensor or a tuple/list of "
                     "tensors (one per model input)");
  else
    return makeError(what + " holds a " + value.tagKind() +
                     "; expected a tensor or a tuple/list of tensors");
  for (const c10::IValue &v : out) {
    if (!v.isTensor())
      return makeError(what + " holds a " + v.tagKind() +
                       " element; expected only tensors");
    if (llvm::Error err = checkTensor(v.toTensor(), index++, records, path))
      return err;
  }
  return out;
}

/// Reads the torch.save file at `path` (bounded, a regular file) and
/// unpickles it; `noun` names it in messages ("input", "data").
static llvm::Expected<c10::IValue>
readArchive(llvm::StringRef path, llvm::StringRef noun,
            std::map<const void *, size_t> &records) {
  auto buffer = readFileBounded(path, kMaxInputFileBytes, noun);
  if (!buffer)
    return buffer.takeError();
  return unpickleArchive((*buffer)->getBuffer(), path, records, noun);
}

llvm::Expected<std::vector<c10::IValue>>
loadTensors(llvm::StringRef path, llvm::ArrayRef<std::string> names) {
  std::map<const void *, size_t> records;
  auto value = readArchive(path, "input", records);
  if (!value)
    return value.takeError();
  size_t index = 0;
  return batchInputs(*value, ("input '" + path + "'").str(), index, records,
                     path, names);
}

/// Whether `value` is a list of batches rather than one batch (the rule in
/// TensorIO.h).
static bool isListOfBatches(const c10::IValue &value, size_t modelInputs) {
  if (!value.isList())
    return false;
  c10::List<c10::IValue> items = value.toList();
  if (modelInputs == 1 && items.size() > 1)
    return true;
  for (const c10::IValue &item : items)
    if (item.isTuple() || item.isList() || item.isGenericDict())
      return true;
  return false;
}

llvm::Expected<InputBatches>
loadInputBatches(llvm::StringRef path, llvm::ArrayRef<std::string> names) {
  size_t modelInputs = names.size();
  std::map<const void *, size_t> records;
  auto value = readArchive(path, "input", records);
  if (!value)
    return value.takeError();
  std::string what = ("input '" + path + "'").str();
  InputBatches out;
  size_t index = 0;
  if (!isListOfBatches(*value, modelInputs)) {
    auto batch = batchInputs(*value, what, index, records, path, names);
    if (!batch)
      return batch.takeError();
    out.batches.push_back(std::move(*batch));
    return out;
  }
  out.isList = true;
  c10::List<c10::IValue> items = value->toList();
  for (size_t b = 0; b < items.size(); ++b) {
    auto batch =
        batchInputs(items.get(b), llvm::formatv("{0} batch {1}", what, b).str(),
                    index, records, path, names);
    if (!batch)
      return batch.takeError();
    out.batches.push_back(std::move(*batch));
  }
  return out;
}

/// Checks every tensor of `value`, tuples, lists and dicts `depth` levels deep
/// at most; `where` names the element ("data 'd.pt'[1][0]").
static llvm::Error checkTree(const c10::IValue &value, int depth,
                             const std::string &where, size_t &index,
                             const std::map<const void *, size_t> &records,
                             llvm::StringRef path) {
  if (value.isTensor())
    return checkTensor(value.toTensor(), index++, records, path);
  // Each element and how it is named: "[1]", or "['input_ids']" in a dict.
  std::vector<std::pair<std::string, c10::IValue>> items;
  if (value.isTuple() || value.isList()) {
    std::vector<c10::IValue> elements =
        value.isTuple() ? value.toTupleRef().elements().vec()
                        : value.toList().vec();
    for (size_t i = 0; i < elements.size(); ++i)
      items.emplace_back("[" + std::to_string(i) + "]", elements[i]);
  } else if (value.isGenericDict()) {
    for (const auto &entry : value.toGenericDict()) {
      if (!entry.key().isString())
        return makeError(where + " is a dict with a key that is not a str");
      items.emplace_back("['" + printable(entry.key().toStringRef()) + "']",
                         entry.value());
    }
  } else {
    return makeError(where + " is a " + value.tagKind() +
                     "; expected a tensor, tuple, list or dict");
  }
  if (depth == 0)
    return makeError(where + " nests tuples, lists and dicts too deeply");
  for (const auto &[name, item] : items)
    if (llvm::Error err =
            checkTree(item, depth - 1, where + name, index, records, path))
      return err;
  return llvm::Error::success();
}

llvm::Expected<c10::IValue> loadTensorTree(llvm::StringRef path,
                                           llvm::StringRef noun, int depth) {
  std::map<const void *, size_t> records;
  auto value = readArchive(path, noun, records);
  if (!value)
    return value.takeError();
  size_t index = 0;
  if (llvm::Error err =
          checkTree(*value, depth, (noun + " '" + path + "'").str(), index,
                    records, path))
    return err;
  return value;
}

llvm::Expected<c10::Dict<std::string, at::Tensor>>
loadNamedTensors(llvm::StringRef path, llvm::StringRef noun) {
  std::map<const void *, size_t> records;
  auto value = readArchive(path, noun, records);
  if (!value)
    return value.takeError();
  std::string what = (noun + " '" + path + "'").str();
  if (!value->isGenericDict())
    return makeError(what + " holds a " + value->tagKind() +
                     "; expected a dict from str to tensor");
  c10::Dict<std::string, at::Tensor> out;
  size_t index = 0;
  for (const auto &entry : value->toGenericDict()) {
    if (!entry.key().isString())
      return makeError(what + " holds a dict with a key that is not a str");
    const std::string &key = entry.key().toStringRef();
    if (!entry.value().isTensor())
      return makeError(what + " holds '" + printable(key) + "', a " +
                       entry.value().tagKind() + "; expected a tensor");
    if (llvm::Error err =
            checkTensor(entry.value().toTensor(), index++, records, path))
      return err;
    out.insert(key, entry.value().toTensor());
  }
  return out;
}

/// One batch's outputs as saveTensors writes them.
static c10::IValue outputValue(const std::vector<c10::IValue> &values,
                               bool asTuple) {
  return asTuple || values.size() != 1
             ? c10::IValue(c10::ivalue::Tuple::create(values))
             : values[0];
}

/// torch::pickle_save's bytes without its type tags on lists and dicts
/// (Pickler's tag_aggregates).
static std::vector<char> pickleUntagged(const c10::IValue &value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char *data, size_t size) {
        pickled.insert(pickled.end(), data, data + size);
      },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
      /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
      /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer(
      [&](const void *data, size_t size) {
        const char *bytes = static_cast<const char *>(data);
        archive.insert(archive.end(), bytes, bytes + size);
        return size;
      });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(),
                                     pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

llvm::Error saveValue(llvm::StringRef path, const c10::IValue &value) {
  auto bytes = torchCall("cannot write '" + path + "'",
                         [&] { return pickleUntagged(value); });
  if (!bytes)
    return bytes.takeError();
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    os.write(bytes->data(), bytes->size());
    return llvm::Error::success();
  });
}

llvm::Error saveTensors(llvm::StringRef path,
                        const std::vector<c10::IValue> &values, bool asTuple) {
  return saveValue(path, outputValue(values, asTuple));
}

llvm::Error saveTensorList(llvm::StringRef path,
                           const std::vector<std::vector<c10::IValue>> &batches,
                           bool asTuple) {
  // A list typed Any pickles as a plain Python list; a Tensor-typed one
  // would need torch.jit._pickle.build_tensorlist to load.
  c10::impl::GenericList list(c10::AnyType::get());
  list.reserve(batches.size());
  for (const std::vector<c10::IValue> &values : batches)
    list.push_back(outputValue(values, asTuple));
  return saveValue(path, c10::IValue(std::move(list)));
}

} // namespace ppc
