//===- fuzz/fuzz_pt2.cpp - Fuzz the torch.export (.pt2) reader ------------===//
//
// Feeds bytes to pt2::readPt2, the archive and JSON reader `ppc split`,
// `verify`, `inspect` and `run` use on a .pt2 file (lib/Pt2Archive.cpp), and
// each program it accepts to pt2::lowerPt2 (lib/Pt2Lower.cpp). Both take
// untrusted input: every problem must come back as one llvm::Error line, never
// as a crash, an uncaught exception, a leak or a hang. What the reader accepted
// must also be what the lowering may index without further checks: each
// weight a tensor, and a lowered graph whose first input is the module; and
// its tensors must be bounded by the archive's size. The archive is given as
// ppc gives a mapped file, with an owner, so stored records are viewed in
// place: each such view must lie inside the archive.
//
// Built only against LibTorch 2.x (PPC_HAVE_PT2): scripts/test.sh's pytorch2
// stage builds it in build-pt2-fuzz/.
//
//===----------------------------------------------------------------------===//
#include "lib/Pt2Program.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

using namespace ppc;

namespace {

/// FuzzCheck.h's fail(): that header brings runtime/exec/TensorMeta.h, whose
/// llvm/Support/JSON.h this C++20 target cannot include with clang 14
/// (fuzz/ClangCxx20Json.h), and nothing here checks metadata.
[[noreturn]] void fail(const std::string &what) {
  llvm::errs() << "fuzz check failed: " << what << "\n";
  llvm::errs().flush();
  std::abort();
}

} // namespace

/// Checks an accepted program, then lowers it. A storage that views the
/// archive `bytes` in place lies inside it; the others are bounded by the
/// archive: at most the inflation budget of lib/SafeRead.h (32 times the
/// archive, at least 64 MiB; that header's llvm/Support/JSON.h is not for
/// this target), each storage counted once.
static void checkAccepted(const pt2::Pt2Program &program,
                          llvm::StringRef bytes) {
  uint64_t budget =
      std::max<uint64_t>(uint64_t(64) << 20, uint64_t(32) * bytes.size());
  auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  uintptr_t end = begin + bytes.size();
  std::set<const void *> seen;
  uint64_t held = 0;
  for (const auto *list : {&program.weights, &program.constants})
    for (const pt2::Pt2Tensor &t : *list) {
      if (t.fqn.empty() || !t.tensor.defined())
        fail("readPt2 accepted a tensor with no name or no data");
      // A weight of a program exported on the meta device holds no bytes.
      if (t.tensor.is_meta())
        continue;
      const c10::Storage &storage = t.tensor.storage();
      auto data = reinterpret_cast<uintptr_t>(storage.data_ptr().get());
      if (data >= begin && data < end) {
        if (end - data < storage.nbytes())
          fail("readPt2 viewed a record past the end of the archive");
        continue;
      }
      if (seen.insert(storage.unsafeGetStorageImpl()).second)
        held += storage.nbytes();
    }
  if (held > budget)
    fail("readPt2 holds " + std::to_string(held) +
         " bytes of tensors, more than the archive may hold");
  auto lowered = pt2::lowerPt2(program, "fuzz.pt2");
  if (!lowered) {
    std::string message = llvm::toString(lowered.takeError());
    if (message.empty() || message.find('\n') != std::string::npos)
      fail("lowerPt2 error is not one line: '" + message + "'");
    return;
  }
  if (!lowered->graph || lowered->graph->inputs().empty())
    fail("lowerPt2 gave a graph without the module input");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A buffer the tensors may view and keep alive, as ppc's mapped files.
  auto owner = std::make_shared<const std::string>(
      reinterpret_cast<const char *>(data), size);
  llvm::StringRef bytes(*owner);
  auto program = pt2::readPt2(bytes, "fuzz.pt2", owner);
  if (!program) {
    std::string message = llvm::toString(program.takeError());
    if (message.empty() || message.find('\n') != std::string::npos)
      fail("readPt2 error is not one line: '" + message + "'");
    return 0;
  }
  checkAccepted(*program, bytes);
  return 0;
}
