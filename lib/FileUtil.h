//===- lib/FileUtil.h - Hashes and atomic writes ----------------*- C++ -*-===//
//
// Every file ppc writes appears whole or not at all: contents go to a
// temporary path beside the destination, which is then renamed over it.
// Only regular files are ever replaced.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_FILEUTIL_H
#define PPC_LIB_FILEUTIL_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <string>

namespace llvm {
class raw_ostream;
namespace json {
class Value;
} // namespace json
} // namespace llvm

namespace ppc {

/// Lower-case hex SHA-256 of a file's bytes. Errors: the file cannot be read.
llvm::Expected<std::string> sha256File(llvm::StringRef path);

/// Lower-case hex SHA-256 of a byte string.
std::string sha256Hex(llvm::StringRef bytes);

/// Size of a file in bytes. Errors: the file does not exist.
llvm::Expected<uint64_t> fileSize(llvm::StringRef path);

/// Succeeds when `path` may become an output file: it does not exist or is
/// a regular file (or a link to one). Errors: "cannot write 'PATH': it
/// exists and is not a regular file" (a device, a FIFO, a socket;
/// "/dev/null" always). OutputGuard::claimFile and writeFileAtomically
/// check every output so, before the command starts and again when writing.
llvm::Error checkOutputFile(llvm::StringRef path);

/// Writes `path` whole or not at all (llvm::writeToOutput: `write` fills a
/// temporary file beside `path`, which is then renamed over it). The file
/// gets the usual mode of a new file (0666 less the umask). Errors, each
/// naming the path: `path` exists and is not a regular file (a device, a
/// FIFO, a directory: nothing is replaced), the directory is not writable,
/// the write or rename fails; `write`'s own error is returned as it is. The
/// temporary file is removed in every case.
llvm::Error writeFileAtomically(
    llvm::StringRef path,
    const std::function<llvm::Error(llvm::raw_ostream &)> &write);

/// Writes `value` to `path` as writeFileAtomically does: JSON indented by
/// two spaces, with a final newline (how ppc writes every JSON file it
/// owns: manifests, meta caches, --stats-json).
llvm::Error writeJSONFileAtomically(llvm::StringRef path,
                                    const llvm::json::Value &value);

/// While it lives (until release()), SIGINT, SIGTERM or SIGHUP remove the
/// tree at `path` before the process ends as the signal means to. A
/// StagedDirectory holds one until it is committed or discarded; a process
/// that writes into a StagedDirectory it does not own (a rank writing its
/// stages into rank 0's) holds one until it has reported its part: before
/// that the save cannot be committed, so a signal may take the whole
/// directory. A path of PATH_MAX or more, or a 17th at once, is not
/// removed on a signal.
class RemovedOnSignal {
public:
  explicit RemovedOnSignal(const std::string &path);
  RemovedOnSignal(RemovedOnSignal &&other) noexcept;
  RemovedOnSignal &operator=(RemovedOnSignal &&) = delete;
  ~RemovedOnSignal();
  /// Stops removing it (idempotent).
  void release();

private:
  /// Its slot in the table the signal handler reads (-1: none).
  int slot_ = -1;
};

/// A directory built beside its destination and switched in whole:
///   1. create(dir) makes "DIR.tmp-HOST-PID-XXXXXX" beside `dir` (creating
///      `dir`'s parents): its name says which process of which host (HOST:
///      a hash of the host name) stages it. It first removes the staged
///      directories beside `dir` that a process of this host left behind
///      when it was killed (their PID no longer exists).
///   2. The caller fills path(), possibly from several processes.
///   3. commit() syncs the files to disk and switches the directory in: if
///      `dir` exists and is not empty, `replaceable(dir)` must succeed (the
///      caller proves it holds only an earlier output), and the two are
///      exchanged in one atomic step (renameat2 RENAME_EXCHANGE; two renames
///      where the filesystem cannot exchange), after which the old contents
///      are removed; otherwise path() is renamed to `dir`.
/// So a reader of `dir` sees the old whole directory or the new whole one,
/// whenever the writer dies. Until commit() succeeds, the destructor,
/// discard() and SIGINT, SIGTERM or SIGHUP remove the staged directory;
/// after SIGKILL it stays, for the next create() beside `dir` to remove.
class StagedDirectory {
public:
  static llvm::Expected<StagedDirectory> create(llvm::StringRef dir);
  /// As renamed(), for a staged directory `path` of destination `dir` that
  /// this process does not own (another rank's).
  static llvm::Error renamed(llvm::Error err, llvm::StringRef path,
                             llvm::StringRef dir);
  StagedDirectory(StagedDirectory &&other) noexcept;
  StagedDirectory &operator=(StagedDirectory &&) = delete;
  ~StagedDirectory();

  /// The staged directory (absolute).
  const std::string &path() const { return path_; }
  /// Errors, each naming `dir`: it exists and is not a directory,
  /// `replaceable`'s, a sync or rename that fails. On error the staged
  /// directory is removed and `dir` is as it was.
  llvm::Error
  commit(const std::function<llvm::Error(llvm::StringRef dir)> &replaceable);
  /// Removes the staged directory now (nothing once committed).
  void discard();
  /// `err` with each mention of path() replaced by the destination as
  /// given, so that messages name files where the user will look for them
  /// ("cannot write 'out/stage_0.pt': No space left on device").
  llvm::Error renamed(llvm::Error err) const;

private:
  StagedDirectory(std::string name, std::string dir, std::string path);
  /// `dir` as given (for messages), absolute, and the staged directory.
  std::string name_, dir_, path_;
  RemovedOnSignal removedOnSignal_;
  bool done_ = false;
};

/// Builds directory `dir` atomically with a StagedDirectory: `fill`
/// populates it, then it replaces `dir`. An existing non-empty `dir` is
/// checked with `replaceable` before `fill` runs and again at the switch,
/// so ppc never deletes a user's files. Errors: `dir` exists and is not a
/// directory or cannot be listed, `replaceable`'s, `fill`'s, and failures
/// to create, sync or rename directories. On any error the staged
/// directory is removed and `dir` is left as it was.
llvm::Error buildDirectoryAtomically(
    llvm::StringRef dir,
    const std::function<llvm::Error(llvm::StringRef dir)> &replaceable,
    const std::function<llvm::Error(llvm::StringRef tmpDir)> &fill);

/// Whether `dir` exists and holds at least one entry. Errors: it exists
/// and is not a directory, or cannot be listed.
llvm::Expected<bool> isNonEmptyDirectory(llvm::StringRef dir);

} // namespace ppc

#endif // PPC_LIB_FILEUTIL_H
