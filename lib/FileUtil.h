//===- lib/FileUtil.h - Hashes and atomic writes ----------------*- C++ -*-===//
//
// Every file ppc writes appears whole or not at all: contents go to a
// temporary path beside the destination, which is then renamed over it.
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

/// Writes `path` by calling `write` on a stream to a temporary file in the
/// same directory, then renaming it over `path`. Errors: the directory is
/// not writable, `write` fails, or the rename fails; the temporary file is
/// removed in every case.
llvm::Error writeFileAtomically(
    llvm::StringRef path,
    const std::function<llvm::Error(llvm::raw_ostream &)> &write);

/// Builds directory `dir` atomically: `fill` populates a fresh temporary
/// directory beside `dir`, which then replaces `dir`. An existing `dir` is
/// replaced only if it is empty or holds a file named `marker` (i.e. it is
/// an earlier output of the same kind); otherwise that is an error, so ppc
/// never deletes a user's unrelated files. On any error the temporary
/// directory is removed and `dir` is left as it was.
llvm::Error buildDirectoryAtomically(
    llvm::StringRef dir, llvm::StringRef marker,
    const std::function<llvm::Error(llvm::StringRef tmpDir)> &fill);

} // namespace ppc

#endif // PPC_LIB_FILEUTIL_H
