//===- fuzz/fuzz_pt2.cpp - Fuzz the torch.export (.pt2) reader ------------===//
//
// Feeds bytes to pt2::readPt2, the archive and JSON reader `ppc split`,
// `verify`, `inspect` and `run` use on a .pt2 file (lib/Pt2Archive.cpp), and
// each program it accepts to pt2::lowerPt2 (lib/Pt2Lower.cpp). Both take
// untrusted input: every problem must come back as one llvm::Error line, never
// as a crash, an uncaught exception, a leak or a hang. What the reader accepted
// must also be what the lowering may index without further checks: each
// weight a tensor, and a lowered graph whose first input is the module; and
// its tensors must be bounded by the archive's size.
//
// Built only against LibTorch 2.x (PPC_HAVE_PT2): scripts/test.sh's pytorch2
// stage builds it in build-pt2-fuzz/.
//
//===----------------------------------------------------------------------===//
#include "lib/Pt2Program.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
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

/// Checks an accepted program, then lowers it. Its tensors' storages are
/// bounded by the archive (`size` bytes): at most the inflation budget of
/// lib/SafeRead.h (32 times the archive, at least 64 MiB; that header's
/// llvm/Support/JSON.h is not for this target), each storage counted once.
static void checkAccepted(const pt2::Pt2Program &program, size_t size) {
  uint64_t budget = std::max<uint64_t>(uint64_t(64) << 20, uint64_t(32) * size);
  std::set<const void *> seen;
  uint64_t held = 0;
  for (const auto *list : {&program.weights, &program.constants})
    for (const pt2::Pt2Tensor &t : *list) {
      if (t.fqn.empty() || !t.tensor.defined())
        fail("readPt2 accepted a tensor with no name or no data");
      // A weight of a program exported on the meta device holds no bytes.
      if (t.tensor.is_meta())
        continue;
      if (seen.insert(t.tensor.storage().unsafeGetStorageImpl()).second)
        held += t.tensor.storage().nbytes();
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
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto program = pt2::readPt2(bytes, "fuzz.pt2");
  if (!program) {
    std::string message = llvm::toString(program.takeError());
    if (message.empty() || message.find('\n') != std::string::npos)
      fail("readPt2 error is not one line: '" + message + "'");
    return 0;
  }
  checkAccepted(*program, size);
  return 0;
}
