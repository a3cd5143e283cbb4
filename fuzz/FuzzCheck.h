//===- fuzz/FuzzCheck.h - What every fuzz target checks beyond crashes -*- C++
//-*-===//
//
// The fuzz targets feed untrusted bytes to the entry points ppc uses on files
// and peers. Crashes, sanitizer reports and uncaught exceptions are findings by
// themselves; these helpers add the properties the rest of ppc relies on once a
// parser has accepted its input, and abort (a libFuzzer crash) when one fails:
//   - metadata the runtime accepted can be allocated: allocateWire() is given
//     it without further checks, so it must be within the caps of
//     runtime/exec/TensorMeta.h (dtype, rank, bytes, int[] length), computed
//     here with overflow checks independently of validateMeta();
//   - what a parser accepted survives the round trip through its writer.
// Inputs reach file-reading entry points through one temporary file per
// process, so the targets exercise the same code as the CLI.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_FUZZ_FUZZCHECK_H
#define PPC_FUZZ_FUZZCHECK_H

#include "runtime/exec/TensorMeta.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace ppc::fuzz {

/// Reports a broken property and aborts, which libFuzzer records as a crash.
[[noreturn]] inline void fail(const llvm::Twine &what) {
  llvm::errs() << "fuzz check failed: " << what << "\n";
  llvm::errs().flush();
  std::abort();
}

/// Accepted metadata up to this size is really allocated (allocateWire and
/// fromWire, as a receiving rank does); larger values are only checked on paper
/// to keep each execution fast.
constexpr int64_t kAllocateBytes = int64_t(1) << 20;

/// Checks that `meta`, which a ppc parser accepted, is safe for allocateWire:
/// an allowed dtype, sizes whose element count and byte size neither overflow
/// nor pass kMaxValueBytes, int[] lengths within kMaxIntListLength. Computed
/// here independently of validateMeta(), which must agree.
inline void checkAllocatable(const ValueMeta &meta, const llvm::Twine &where) {
  if (llvm::Error err = validateMeta(meta))
    fail(where + ": accepted metadata that validateMeta refuses: " +
         llvm::toString(std::move(err)));
  int64_t total = 0;
  auto add = [&](int64_t bytes) {
    if (__builtin_add_overflow(total, bytes, &total) || total > kMaxValueBytes)
      fail(where + ": accepted metadata " + meta.str() +
           " asks for more than " + llvm::Twine(kMaxValueBytes) + " bytes");
  };
  if (meta.kind == ValueKind::IntList) {
    if (meta.length < 0 || meta.length > kMaxIntListLength)
      fail(where + ": accepted int[] length " + llvm::Twine(meta.length));
    add(meta.length * 8);
  }
  if (static_cast<int64_t>(meta.tensors.size()) > kMaxValueTensors)
    fail(where + ": accepted " + llvm::Twine(meta.tensors.size()) + " tensors");
  for (const TensorMeta &t : meta.tensors) {
    if (!isAllowedDtype(t.dtype))
      fail(where + ": accepted dtype " + dtypeName(t.dtype));
    if (t.strides.size() != t.sizes.size() ||
        static_cast<int64_t>(t.sizes.size()) > kMaxMetaNdim)
      fail(where + ": accepted bad rank or strides in " + meta.str());
    // A zero size makes the tensor empty whatever the other sizes are.
    int64_t count = 1;
    bool empty = false;
    for (int64_t s : t.sizes) {
      if (s < 0)
        fail(where + ": accepted a negative size in " + meta.str());
      empty |= s == 0;
    }
    for (int64_t s : t.sizes)
      if (!empty && __builtin_mul_overflow(count, s, &count))
        fail(where + ": accepted sizes of " + meta.str() + " that overflow");
    if (empty)
      count = 0;
    int64_t bytes;
    if (__builtin_mul_overflow(
            count, static_cast<int64_t>(c10::elementSize(t.dtype)), &bytes))
      fail(where + ": byte size of " + meta.str() + " overflows");
    add(bytes);
  }
  if (total > kAllocateBytes)
    return;
  auto wire = allocateWire(meta, c10::Device("cpu"), "fuzz value");
  if (!wire)
    fail(where + ": cannot allocate accepted metadata " + meta.str() + ": " +
         llvm::toString(wire.takeError()));
  auto value = fromWire(std::move(*wire), meta, "fuzz value");
  if (!value)
    fail(where + ": cannot rebuild accepted metadata " + meta.str() + ": " +
         llvm::toString(value.takeError()));
}

/// A file holding the current input, for entry points that read files. One
/// per process and target, removed at exit.
class InputFile {
public:
  explicit InputFile(const char *name) {
    const char *dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/ppc-fuzz-" +
            std::to_string(getpid()) + "-" + name;
  }
  ~InputFile() { std::remove(path_.c_str()); }

  /// Replaces the file's contents with `data`.
  const std::string &write(const uint8_t *data, size_t size) {
    std::FILE *f = std::fopen(path_.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) ||
        std::fclose(f) != 0)
      fail("cannot write the input file '" + path_ + "'");
    return path_;
  }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

} // namespace ppc::fuzz

#endif // PPC_FUZZ_FUZZCHECK_H
