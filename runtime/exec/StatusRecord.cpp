//===- runtime/exec/StatusRecord.cpp - Where a waiting rank stands --------===//
//
// This file implements withPosition() and beforeRun() (StatusRecord.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/StatusRecord.h"

#include "lib/Error.h"
#include "runtime/link/Link.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Errno.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

namespace ppc {
namespace {
/// setStatusDirectory()'s: read by a rank that fails, after it was set.
std::mutex statusDirMutex;
std::string statusDir;

std::string statusDirectory() {
  std::lock_guard<std::mutex> lock(statusDirMutex);
  return statusDir;
}
/// Says why this rank writes no status record (a rank fails once, so once).
void warnNoRecord(const std::string &dir, const std::string &why) {
  llvm::errs() << "warning: not writing this rank's status record into "
                  "PPC_STATUS_DIR '"
               << printable(dir, 256) << "': " << why << "\n";
}

/// Closes a file descriptor on every path out of writeStatusRecord.
struct OwnedFd {
  int fd;
  explicit OwnedFd(int fd) : fd(fd) {}
  OwnedFd(const OwnedFd &) = delete;
  OwnedFd &operator=(const OwnedFd &) = delete;
  ~OwnedFd() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Writes `record` as $PPC_STATUS_DIR/rank-G.json, through a temporary name.
/// The directory may be shared (ranks started outside `ppc launch`): it
/// must be a directory itself, not a link, of this user, that no one else
/// may write, or nothing is written. The temporary file is created afresh
/// (O_EXCL, O_NOFOLLOW) after removing whatever had its name, so a link
/// planted there is never written through and a FIFO never blocks.
void writeStatusRecord(int jobRank, const llvm::json::Value &record) {
  std::string dirPath = statusDirectory();
  if (dirPath.empty())
    return;
  OwnedFd dir(
      ::open(dirPath.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (dir.fd < 0 || ::fstat(dir.fd, &st) != 0) {
    // Linux says ENOTDIR for a link under O_DIRECTORY | O_NOFOLLOW; lstat
    // only words the message.
    int err = errno;
    struct stat link;
    bool isLink = ::lstat(dirPath.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
    warnNoRecord(dirPath, isLink || err == ELOOP ? "it is a symbolic link"
                          : err == ENOTDIR       ? "it is not a directory"
                                                 : llvm::sys::StrError(err));
    return;
  }
  if (st.st_uid != ::geteuid()) {
    warnNoRecord(dirPath, "it belongs to another user");
    return;
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    warnNoRecord(dirPath, "its group or other users may write into it");
    return;
  }
  std::string name = llvm::formatv("rank-{0}.json", jobRank).str();
  std::string partial = name + ".partial";
  if (::unlinkat(dir.fd, partial.c_str(), 0) != 0 && errno != ENOENT) {
    warnNoRecord(dirPath, "cannot remove '" + partial +
                              "': " + llvm::sys::StrError(errno));
    return;
  }
  OwnedFd file(::openat(
      dir.fd, partial.c_str(),
      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (file.fd < 0) {
    warnNoRecord(dirPath, "cannot create '" + partial +
                              "': " + llvm::sys::StrError(errno));
    return;
  }
  std::string text;
  llvm::raw_string_ostream(text) << record;
  bool written = ::fstat(file.fd, &st) == 0 && S_ISREG(st.st_mode);
  for (size_t done = 0; written && done < text.size();) {
    ssize_t n = llvm::sys::RetryAfterSignal(
        -1, ::write, file.fd, text.data() + done, text.size() - done);
    written = n > 0;
    done += written ? static_cast<size_t>(n) : 0;
  }
  if (!written || ::renameat(dir.fd, partial.c_str(), dir.fd, name.c_str()))
    ::unlinkat(dir.fd, partial.c_str(), 0);
}
} // namespace

void setStatusDirectory(const std::string &dir) {
  std::lock_guard<std::mutex> lock(statusDirMutex);
  statusDir = dir;
}

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
