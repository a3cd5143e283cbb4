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
}

namespace ppc {

/// Lower-case hex SHA-256 of a file's bytes. Errors: the file cannot be read.
llvm::Expected<std::string> sha256File(llvm::StringRef path);

/// Lower-case hex SHA-256 of a byte string.
std::string sha256Hex(llvm::StringRef bytes);

/// Size of a file in bytes. Errors: the file does not exist.
llvm::Expected<uint64_t> fileSize(llvm::StringRef path);

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

/// Builds directory `dir` atomically: `fill` populates a fresh temporary
/// directory beside `dir`, which then replaces `dir`. An existing `dir` is
/// replaced only if it is empty or `replaceable(dir)` succeeds (the caller
/// proves it holds nothing but an earlier output); otherwise that error is
/// returned, so ppc never deletes a user's files. Errors: `dir` exists and
/// is not a directory or cannot be listed, `replaceable`'s, `fill`'s, and
/// failures to create or rename directories. On any error the temporary
/// directory is removed and `dir` is left as it was.
llvm::Error buildDirectoryAtomically(
    llvm::StringRef dir,
    const std::function<llvm::Error(llvm::StringRef dir)> &replaceable,
    const std::function<llvm::Error(llvm::StringRef tmpDir)> &fill);

} // namespace ppc

#endif // PPC_LIB_FILEUTIL_H
