//===- tools/ppc/OutputClaims.cpp - A command's outputs, claimed ----------===//
//
// This file implements claimOutputs() (see OutputClaims.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/OutputClaims.h"

#include "lib/OutputGuard.h"
#include "runtime/train/Checkpoint.h"

#include <vector>

namespace ppc {

llvm::Error
claimOutputs(OutputGuard &guard,
             llvm::ArrayRef<std::pair<std::string, std::string>> checkpoints,
             llvm::ArrayRef<OutputClaim> outputs) {
  std::vector<CommandOutput> kept;
  for (const OutputClaim &out : outputs)
    if (!out.intoCheckpoints)
      kept.push_back(
          {out.option, out.path, out.kind != OutputClaim::Kind::File});
  for (const auto &[source, what] : checkpoints)
    if (llvm::Error err = checkOutputsOutsideCheckpoints(source, what, kept))
      return err;
  for (const OutputClaim &out : outputs) {
    if (out.path.empty() && !out.required)
      continue;
    llvm::Error err = llvm::Error::success();
    switch (out.kind) {
    case OutputClaim::Kind::File:
      err = guard.claimFile(out.option, out.path);
      break;
    case OutputClaim::Kind::Directory:
      err = guard.claimDirectory(out.option, out.path);
      break;
    case OutputClaim::Kind::ReplacedDirectory:
      err = guard.claimReplacedDirectory(out.option, out.path);
      break;
    }
    if (err)
      return err;
  }
  return llvm::Error::success();
}

} // namespace ppc
