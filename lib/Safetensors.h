//===- lib/Safetensors.h - Hugging Face safetensors files -------*- C++ -*-===//
//
// Reads and writes checkpoints in the safetensors format, as Hugging Face
// transformers' save_pretrained writes them: one `model.safetensors`, or
// shards `model-00001-of-0000N.safetensors` listed by
// `model.safetensors.index.json` ({"metadata": {"total_size": BYTES},
// "weight_map": {TENSOR: SHARD}}). A file is an 8-byte little-endian header
// length N, N bytes of JSON ({NAME: {"dtype", "shape", "data_offsets":
// [BEGIN, END]}, "__metadata__": {KEY: STRING}}), then the tensors' bytes,
// whose offsets count from byte 8+N.
//
// Everything read is untrusted: lengths are checked before any allocation,
// JSON nesting is bounded before parsing (lib/SafeRead.h), every tensor's
// byte range is checked against the file and the others, and each problem
// is one error line naming the file and the tensor. Tensors are served from
// a read-only mapping of the file, without copying. No LibTorch here: a
// caller turns dtypes and bytes into tensors.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_SAFETENSORS_H
#define PPC_LIB_SAFETENSORS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace llvm::sys::fs {
class mapped_file_region;
} // namespace llvm::sys::fs

namespace ppc::safetensors {

/// A header of at most this many bytes, the reference implementation's
/// limit (MAX_HEADER_SIZE), so that ppc reads and writes what it does.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// model.safetensors.index.json: ~100 bytes per tensor.
constexpr uint64_t kMaxIndexBytes = 100'000'000;
/// The index file's name and the single-shard file's name in a checkpoint
/// directory, as transformers writes them.
constexpr llvm::StringLiteral kIndexName = "model.safetensors.index.json";
constexpr llvm::StringLiteral kSingleName = "model.safetensors";

/// One tensor of a safetensors file.
struct TensorEntry {
  std::string name;
  /// The file's spelling: "F32", "BF16", "I64", "BOOL", ...
  std::string dtype;
  std::vector<int64_t> shape;
  /// Absolute byte offsets in the file (8 + N + data_offsets).
  uint64_t begin = 0, end = 0;
};

/// Bytes per element of a safetensors dtype: F64 F32 F16 BF16 I64 I32 I16
/// I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2; 0 for any other string.
size_t dtypeSize(llvm::StringRef dtype);

/// Parses and checks the header of the safetensors file `path` (used only
/// in messages) of `fileSize` bytes, of which `prefix` holds at least the
/// first 8+N (the whole file will do). Returns the tensors sorted by name;
/// `metadata`, when given, receives "__metadata__". Checked, each failure
/// one line:
///   "checkpoint 'PATH': file is 5 bytes, too short for a header length"
///   "checkpoint 'PATH': header length 9223372036854775808 is over the limit
///    of 100000000 bytes"
///   "checkpoint 'PATH': header length 100 is more than the 40 bytes after
///    it"
///   "checkpoint 'PATH': header length 1 is too short for a JSON object"
///   "checkpoint 'PATH': header is cut short: 8 of its 40 bytes were given"
///    (a `prefix` shorter than the contract)
///   "checkpoint 'PATH': header nests deeper than 256 levels"
///   "checkpoint 'PATH': header is not valid JSON: [1:2, byte=2]: ..."
///   "checkpoint 'PATH': header is not a JSON object"
///   "checkpoint 'PATH': header names tensor 'w' twice"
///   "checkpoint 'PATH': header __metadata__ is not an object of strings"
///   "checkpoint 'PATH': header has a tensor with an empty name"
///   "checkpoint 'PATH': tensor 'w' is not an object"
///   "checkpoint 'PATH': tensor 'w' has no dtype string"
///   "checkpoint 'PATH': tensor 'w' has unknown dtype 'F7'"
///   "checkpoint 'PATH': tensor 'w' has no shape array"
///   "checkpoint 'PATH': tensor 'w' shape[1] is -1, not a size"
///   "checkpoint 'PATH': tensor 'w' shape [2, 3] of F32 overflows"
///   "checkpoint 'PATH': tensor 'w' has no data_offsets [begin, end]"
///   "checkpoint 'PATH': tensor 'w' data_offsets [8, 4] begin after they
///    end"
///   "checkpoint 'PATH': tensor 'w' data_offsets [0, 96] pass the end of the
///    data (64 bytes)"
///   "checkpoint 'PATH': tensor 'w' shape [2, 3] of F32 takes 24 bytes, but
///    data_offsets [0, 20] hold 20"
///   "checkpoint 'PATH': tensor 'b' bytes [8, 24] overlap tensor 'a' bytes
///    [0, 16]"
/// Names in messages are printable and at most 64 bytes (then "...").
/// Tensors of 0 bytes may share offsets with any tensor; bytes that no
/// tensor covers are allowed (the reference refuses gaps). Keys of a tensor
/// other than the three are ignored.
llvm::Expected<std::vector<TensorEntry>>
parseHeader(llvm::StringRef prefix, uint64_t fileSize, llvm::StringRef path,
            std::map<std::string, std::string> *metadata = nullptr);

/// One safetensors file, open and mapped read-only: its header is read and
/// checked (parseHeader) when it opens, its tensors' bytes are served from
/// the mapping. The file must not shrink while it is open (the mapping
/// would fault, as with any mapped file).
class ShardFile {
public:
  /// Opens the regular file `path`: opened non-blocking and checked with
  /// fstat first, so a FIFO or a device is refused without blocking; the
  /// header is read with reads bounded by the checked length. Errors: those
  /// of parseHeader, and
  ///   "checkpoint 'PATH': cannot open: No such file or directory"
  ///   "checkpoint 'PATH': is a FIFO, not a regular file"
  ///   "checkpoint 'PATH': cannot read: ..." / "cannot map: ..."
  ///   "checkpoint 'PATH': changed while being read"
  static llvm::Expected<std::unique_ptr<ShardFile>> open(llvm::StringRef path);
  ~ShardFile();
  ShardFile(const ShardFile &) = delete;
  ShardFile &operator=(const ShardFile &) = delete;

  const std::string &path() const { return path_; }
  /// Every tensor, sorted by name.
  const std::vector<TensorEntry> &tensors() const { return tensors_; }
  /// "__metadata__" (transformers writes {"format": "pt"}).
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  /// The tensor named `name`, or null.
  const TensorEntry *find(llvm::StringRef name) const;
  /// The bytes of `entry`, one of tensors(), straight from the mapping; they
  /// live as long as this ShardFile. Counted in bytesServed().
  llvm::StringRef bytes(const TensorEntry &entry);
  /// How many bytes bytes() has handed out, so that a caller can show it
  /// read only the tensors it needed. Thread-safe.
  uint64_t bytesServed() const { return bytesServed_.load(); }

private:
  ShardFile() = default;
  std::string path_;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
  std::unique_ptr<llvm::sys::fs::mapped_file_region> mapping_;
  std::atomic<uint64_t> bytesServed_{0};
};

/// A checkpoint: one safetensors file, or a directory holding
/// model.safetensors.index.json and its shards, or holding just
/// model.safetensors. Shards named by an index are opened on first use.
class Checkpoint {
public:
  /// Opens `path`. An index is untrusted as a header is: bounded read and
  /// depth, and each shard it names must be a plain "*.safetensors" file
  /// name (no '/', not "..") in the directory. Errors: ShardFile::open's
  /// (for a file, or model.safetensors), and
  ///   "checkpoint 'DIR': holds neither model.safetensors.index.json nor
  ///    model.safetensors"
  ///   "cannot read checkpoint index 'DIR/model.safetensors.index.json': ..."
  ///   (and readFileBounded's other lines)
  ///   "checkpoint 'DIR/model.safetensors.index.json': index nests deeper
  ///    than 256 levels" / "index is not valid JSON: ..."
  ///   "checkpoint 'DIR/model.safetensors.index.json': index has no
  ///    weight_map object"
  ///   "checkpoint 'DIR/model.safetensors.index.json': index has a tensor
  ///    with an empty name"
  ///   "checkpoint 'DIR/model.safetensors.index.json': tensor 'w' maps to
  ///    '../x.safetensors', not a .safetensors file in the directory"
  static llvm::Expected<Checkpoint> open(llvm::StringRef path);
  Checkpoint(Checkpoint &&) = default;
  Checkpoint &operator=(Checkpoint &&) = default;
  ~Checkpoint();

  /// The path as given.
  const std::string &path() const { return path_; }
  /// Every tensor's name, sorted (for an index: its weight_map's).
  std::vector<std::string> names() const;
  /// The tensor `name` and the shard holding it, opening that shard if
  /// needed (so, unlike ShardFile::bytes, not to be called from several
  /// threads at once). Errors: the shard's open errors, and
  ///   "checkpoint 'PATH': has no tensor 'w'"
  ///   "checkpoint 'DIR/model.safetensors.index.json': tensor 'w' maps to
  ///    'model-00002-of-00002.safetensors', which does not hold it"
  llvm::Expected<std::pair<ShardFile *, const TensorEntry *>>
  find(llvm::StringRef name);
  /// The file that holds (or, by the index, should hold) `name`, for
  /// messages; empty when no file does.
  std::string shardOf(llvm::StringRef name) const;
  /// ShardFile::bytesServed summed over the shards opened so far.
  uint64_t bytesServed() const;

private:
  Checkpoint() = default;
  std::string path_;
  /// The directory's index, or "" for a single file.
  std::string indexPath_;
  /// Tensor name -> shard path (from the index, or the single file).
  std::map<std::string, std::string> shardOf_;
  /// Shard path -> the open shard (opened lazily for an index).
  std::map<std::string, std::unique_ptr<ShardFile>> shards_;
};

/// One tensor to write: `bytes` must be exactly shape's element count times
/// dtypeSize(dtype) bytes.
struct WriteTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  llvm::StringRef bytes;
  /// Called once `bytes` are in the shard's stream, if set: ppc join gives
  /// a mapped tensor's pages back there, so that writing a model keeps one
  /// tensor resident, not all of them.
  std::function<void()> written = nullptr;
};

/// Writes `tensors` as a checkpoint in `dir` (created if missing), as
/// transformers' save_pretrained does: model.safetensors if they fit in one
/// shard, else model-00001-of-0000N.safetensors ... and
/// model.safetensors.index.json ({"metadata": {"total_size": the tensors'
/// bytes}, "weight_map": {...}}). Tensors go in the given order; a shard is
/// closed when the next tensor would take it past `maxShardBytes` (a
/// tensor larger than that gets a shard of its own). Headers are padded
/// with spaces to a multiple of 8 bytes, as the reference does. Each file
/// is written atomically (writeFileAtomically); on failure the files
/// already written are removed. Errors, one line each:
///   "cannot write checkpoint 'DIR': it already holds 'model.safetensors'"
///   "cannot write checkpoint 'DIR': tensor 'w' ..." (an empty or repeated
///    name, an unknown dtype, a negative dimension, bytes that do not match
///    the shape)
///   "cannot write checkpoint 'DIR': header of shard 1 is over the limit of
///    100000000 bytes"
///   "cannot create checkpoint directory 'DIR': ..."
///   writeFileAtomically's errors.
llvm::Error writeCheckpoint(
    llvm::StringRef dir, const std::vector<WriteTensor> &tensors,
    uint64_t maxShardBytes,
    const std::map<std::string, std::string> &metadata = {{"format", "pt"}});

} // namespace ppc::safetensors

#endif // PPC_LIB_SAFETENSORS_H
