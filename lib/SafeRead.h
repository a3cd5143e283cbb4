//===- lib/SafeRead.h - Reading untrusted files -----------------*- C++ -*-===//
//
// Everything ppc reads from outside (manifests, stage files, meta caches,
// user metadata, input tensors) is untrusted. These helpers read such files
// whole without letting the file decide how much memory or time that takes:
// only regular files are read (a FIFO would block, a device such as
// /dev/zero would never end), the size is checked against a cap before any
// allocation, and JSON nesting is bounded before llvm::json::parse, which
// recurses once per level and overflows the stack on ~50,000 '['. Secrets
// received are compared in constant time (sameSecret).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_SAFEREAD_H
#define PPC_LIB_SAFEREAD_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <sys/types.h>
#include <unistd.h>
#include <vector>

namespace caffe2::serialize {
class ReadAdapterInterface;
}

namespace ppc {

/// Size caps for files read whole: far above anything ppc writes, yet small
/// enough that a hostile file cannot exhaust memory before it is rejected.
constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kGiB = uint64_t(1) << 30;
/// manifest.json takes ~700 bytes per stage (indented), so 256 MiB holds a
/// 100k-stage manifest with room for per-stage "meta".
constexpr uint64_t kMaxManifestBytes = 256 * kMiB;
/// A meta cache file written by ppc run: one entry per boundary value, so
/// it grows with the stage count like the manifest.
constexpr uint64_t kMaxMetaCacheBytes = 256 * kMiB;
/// A user metadata file (--input-meta), written by hand or a script.
constexpr uint64_t kMaxUserMetaBytes = 16 * kMiB;
/// A stage module file: it holds the stage's parameters, so it is as large
/// as the model allows; the cap only turns a runaway size into a message.
constexpr uint64_t kMaxStageFileBytes = 256 * kGiB;
/// An input tensor file (torch.save): a batch of model inputs.
constexpr uint64_t kMaxInputFileBytes = 256 * kGiB;
/// JSON nesting depth: ppc's own files nest at most ~6 levels; user
/// metadata a little more. 256 keeps the parser's recursion shallow.
constexpr unsigned kMaxJSONDepth = 256;

/// Closes a file descriptor on every path out of a reader.
class FileDescriptor {
public:
  explicit FileDescriptor(int fd) : fd(fd) {}
  FileDescriptor(const FileDescriptor &) = delete;
  FileDescriptor &operator=(const FileDescriptor &) = delete;
  ~FileDescriptor() {
    if (fd >= 0)
      ::close(fd);
  }
  int get() const { return fd; }

private:
  int fd;
};

/// What a file that is not a regular one is, for a message ("a FIFO", "a
/// directory", ...), from its st_mode.
const char *fileTypeName(mode_t mode);

/// Reads the regular file `path` whole, refusing anything else before
/// reading a byte. `what` names the file's role in messages ("manifest",
/// "stage 1 file"). The file is opened once (non-blocking, so a FIFO cannot
/// stall the open), checked with fstat on the open descriptor (so a symlink
/// to a device is caught), and exactly the checked size is read. Errors,
/// one line each:
///   "cannot read manifest 'm.json': No such file or directory"
///   "manifest 'm.json' is not a regular file (a FIFO)"
///   "manifest 'm.json' is 300000000 bytes, over the limit of 268435456"
///   "manifest 'm.json' changed while being read"
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readFileBounded(llvm::StringRef path, uint64_t maxBytes, llvm::StringRef what);

/// A file's bytes, shared: whatever views them in place (the tensors of a
/// stored archive record, lib/MappedTensor.h) holds the buffer alive.
using FileBuffer = std::shared_ptr<const llvm::MemoryBuffer>;

/// readFileBounded's checks and errors, then maps the file copy-on-write
/// instead of reading it: pages are read as they are touched and can be
/// given back (lib/MappedTensor.h's pageOut), writes through the mapping
/// stay in this process. For model and stage files, which hold weights
/// that tensors view in place. The file must not shrink while it is
/// mapped (as with any mapping: reading a page past its new end raises
/// SIGBUS); ppc replaces its own files by rename, never in place. One more
/// error: "cannot map model 'm.pt2': ..." (mmap's reason).
llvm::Expected<FileBuffer>
mapFileBounded(llvm::StringRef path, uint64_t maxBytes, llvm::StringRef what);

/// Whether `text` nests arrays and objects more than `maxDepth` deep: a
/// linear scan in which brackets inside strings do not count and a
/// backslash escapes the next byte, so "\"" does not end a string.
/// Malformed text is left to the parser.
bool nestsDeeperThan(llvm::StringRef text, unsigned maxDepth);

/// Parses `text` as JSON after checking, with a linear scan that respects
/// strings and escapes, that arrays and objects nest at most `maxDepth`
/// levels. `what` names the text in messages ("manifest 'm.json'"). Errors:
///   "manifest 'm.json' nests deeper than 256 levels"
///   "manifest 'm.json' is not valid JSON: [1:5, byte=4]: Expected , or ]"
llvm::Expected<llvm::json::Value>
parseJSONBounded(llvm::StringRef text, unsigned maxDepth, llvm::StringRef what);

/// How much a zip archive's records may inflate to, in all: kMaxInflation
/// times the archive's size, and never less than kMinInflationBudget (a
/// small deflated archive of JSON legitimately inflates tenfold). Archives
/// that LibTorch and torch.export.save write are stored, not deflated, and
/// inflate to less than their own size.
constexpr uint64_t kMaxInflation = 32;
constexpr uint64_t kMinInflationBudget = 64 * kMiB;

/// A zip's central directory: where it starts and how many entries it has.
struct ZipDirectory {
  uint64_t offset, entries;
};

/// The central directories a zip reader may take from `bytes`, found from
/// the last end-of-central-directory record (within the 64 KiB a comment
/// may take): the one its 32-bit fields give (unless one is saturated),
/// and the zip64 end record's where a zip64 locator precedes it. LibTorch
/// 1.13's miniz takes the zip64 one whenever the locator is there, newer
/// ones only for saturated fields; a check must walk both (a crafted end
/// record pointing elsewhere than its zip64 twin slipped past a check of
/// one: found by fuzz_tensor_file). Empty when there is none.
std::vector<ZipDirectory> zipDirectories(llvm::StringRef bytes);

/// Checks, from the zip's central directories alone (zip64 fields included),
/// that the records of the archive `bytes` declare at most the inflation
/// budget above: LibTorch's reader allocates each record's declared size
/// before inflating it, and reads .data/version as it opens the archive.
/// Bytes that are not a zip are left to LibTorch's reader. Errors, one line:
///   "record m/data/weights/weight_0 inflates to 314572800 bytes, more than
///    a 305117-byte archive may hold (67108864 in all)"
///   "its records inflate to 70000000 bytes or more, more than a
///    1000-byte archive may hold (67108864)"
///   "record m/data/0 has the zip64 size marker 0xFFFFFFFF without a zip64
///    field that holds its size" (either size field; miniz would read the
///    marker as 4 GiB)
llvm::Error checkZipInflation(llvm::StringRef bytes);

/// A LibTorch archive reader (for torch::jit::load and PyTorchStreamReader)
/// over `bytes`, which must outlive it: a file is loaded from exactly the
/// bytes that were read and checked. Unlike LibTorch's MemoryReadAdapter,
/// reads are clipped to the buffer, since the zip offsets come from the
/// untrusted file; the archive reader reports the short read.
std::shared_ptr<caffe2::serialize::ReadAdapterInterface>
makeArchiveReader(llvm::StringRef bytes);

/// Whether a secret from outside (a MAC, an API key) equals the expected
/// one, compared without an early exit, so that the time taken says nothing
/// about how much of a forged one was right. Only the length may show.
bool sameSecret(llvm::StringRef given, llvm::StringRef expected);

} // namespace ppc

#endif // PPC_LIB_SAFEREAD_H
