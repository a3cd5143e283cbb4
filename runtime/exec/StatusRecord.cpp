//===- runtime/exec/StatusRecord.cpp - Where a waiting rank stands --------===//
//
// This file implements withPosition() and beforeRun() (StatusRecord.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/StatusRecord.h"

#include "runtime/link/Link.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <memory>

namespace ppc {
namespace {
/// Writes `record` as $PPC_STATUS_DIR/rank-G.json, through a temporary name.
void writeStatusRecord(int jobRank, const llvm::json::Value &record) {
  const char *dir = std::getenv("PPC_STATUS_DIR");
  if (!dir || !*dir)
    return;
  std::string path = llvm::formatv("{0}/rank-{1}.json", dir, jobRank).str();
  std::string partial = path + ".partial";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(partial, ec);
    if (ec)
      return;
    os << record;
    os.close();
    if (os.has_error()) {
      os.clear_error();
      llvm::sys::fs::remove(partial);
      return;
    }
  }
  if (llvm::sys::fs::rename(partial, path))
    llvm::sys::fs::remove(partial);
}
} // namespace

llvm::Error withPosition(llvm::Error err, int jobRank,
                         llvm::json::Object record,
                         const std::string &position) {
  return llvm::handleErrors(
      std::move(err), [&](const LostRankError &lost) -> llvm::Error {
        std::string message = lost.describe();
        bool timedOut = lost.timedOut();
        record["rank"] = jobRank;
        record["waitingFor"] = lost.rank();
        record["timedOut"] = timedOut;
        writeStatusRecord(jobRank, llvm::json::Value(std::move(record)));
        if (timedOut && !message.empty() && message.back() == ')') {
          message.pop_back();
          message += "; " + position + ")";
        }
        auto located =
            std::make_unique<LostRankError>(lost.rank(), message, timedOut);
        if (!lost.context().empty())
          located->addContext(llvm::StringRef(lost.context()).drop_back(2));
        return llvm::Error(std::move(located));
      });
}

llvm::Error beforeRun(llvm::Error err, int jobRank) {
  return withPosition(std::move(err), jobRank,
                      llvm::json::Object{{"kind", kBeforeRunKind},
                                         {"action", 0},
                                         {"actions", 0}},
                      kBeforeRunText);
}

} // namespace ppc
