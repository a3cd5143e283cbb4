//===- lib/FileUtil.cpp - Hashes and atomic writes ------------------------===//
#include "lib/FileUtil.h"

#include "lib/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

namespace ppc {

std::string sha256Hex(llvm::StringRef bytes) {
  llvm::SHA256 hasher;
  hasher.update(bytes);
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

llvm::Expected<std::string> sha256File(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return makeError("cannot read '" + path +
                     "': " + buffer.getError().message());
  return sha256Hex((*buffer)->getBuffer());
}

llvm::Expected<uint64_t> fileSize(llvm::StringRef path) {
  uint64_t size = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, size))
    return makeError("cannot stat '" + path + "': " + ec.message());
  return size;
}

llvm::Error writeFileAtomically(
    llvm::StringRef path,
    const std::function<llvm::Error(llvm::raw_ostream &)> &write) {
  // Rename replaces whatever the path names: a device such as /dev/null
  // (when run as root), a FIFO or a directory must not become a regular file.
  // writeToOutput also treats two names specially: "/dev/null" (always
  // refused: even where it does not exist, it names no file of ours) and
  // "-" (stdout; ppc's outputs are files, so it means ./-).
  llvm::sys::fs::file_status status;
  if (path == "/dev/null" ||
      (!llvm::sys::fs::status(path, status, /*follow=*/true) &&
       status.type() != llvm::sys::fs::file_type::regular_file))
    return makeError("cannot write '" + path +
                     "': it exists and is not a regular file");
  std::string target = path == "-" ? "./-" : path.str();
  bool writeFailed = false;
  llvm::Error err = llvm::writeToOutput(target, [&](llvm::raw_ostream &os) {
    llvm::Error written = write(os);
    os.flush();
    // For any name but "-" and "/dev/null" (both excluded above)
    // writeToOutput hands a raw_fd_ostream, which reports a write error (e.g.
    // disk full) only through has_error(), and aborts in its destructor if the
    // error stays unchecked.
    auto &fileStream = static_cast<llvm::raw_fd_ostream &>(os);
    if (fileStream.has_error()) {
      std::error_code ec = fileStream.error();
      fileStream.clear_error();
      if (!written)
        written = makeError("cannot write '" + path + "': " + ec.message());
    }
    writeFailed = static_cast<bool>(written);
    return written;
  });
  if (err && writeFailed)
    return err;
  if (err) {
    // writeToOutput's own errors read "'PATH': why" or just "why".
    std::string why = llvm::toString(std::move(err));
    llvm::StringRef reason(why);
    reason.consume_front("'" + target + "': ");
    return makeError("cannot write '" + path + "': " + reason);
  }
  // The temporary file is created with execute permission; give the file
  // the mode any new file gets (0666 less the umask).
  auto mode = static_cast<llvm::sys::fs::perms>(llvm::sys::fs::all_read |
                                                llvm::sys::fs::all_write);
  mode = static_cast<llvm::sys::fs::perms>(mode & ~llvm::sys::fs::getUmask());
  if (std::error_code ec = llvm::sys::fs::setPermissions(target, mode))
    return makeError("cannot write '" + path + "': " + ec.message());
  return llvm::Error::success();
}

llvm::Error buildDirectoryAtomically(
    llvm::StringRef dir,
    const std::function<llvm::Error(llvm::StringRef dir)> &replaceable,
    const std::function<llvm::Error(llvm::StringRef tmpDir)> &fill) {
  bool exists = llvm::sys::fs::exists(dir);
  if (exists) {
    if (!llvm::sys::fs::is_directory(dir))
      return makeError("output directory '" + dir +
                       "' exists and is not a directory");
    std::error_code ec;
    llvm::sys::fs::directory_iterator it(dir, ec), end;
    if (ec)
      return makeError("cannot read output directory '" + dir +
                       "': " + ec.message());
    if (it != end)
      if (llvm::Error err = replaceable(dir))
        return err;
  }

  llvm::SmallString<256> absDir(dir);
  llvm::sys::fs::make_absolute(absDir);
  llvm::StringRef parent = llvm::sys::path::parent_path(absDir);
  if (std::error_code ec = llvm::sys::fs::create_directories(parent))
    return makeError("cannot create output directory '" + dir +
                     "': " + ec.message());

  llvm::SmallString<256> tmp(absDir);
  tmp += ".tmp-%%%%%%";
  llvm::SmallString<256> tmpDir;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(tmp, tmpDir))
    return makeError("cannot create output directory '" + dir +
                     "': " + ec.message());
  // createUniqueDirectory appends its own suffix to the model; keep it.

  llvm::Error err = fill(tmpDir);
  if (!err && exists) {
    llvm::SmallString<256> old(absDir);
    old += ".old-%%%%%%";
    llvm::SmallString<256> oldDir;
    if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(old, oldDir))
      err = makeError("cannot replace '" + dir + "': " + ec.message());
    else if (std::error_code ec2 = llvm::sys::fs::rename(absDir, oldDir))
      err = makeError("cannot replace '" + dir + "': " + ec2.message());
    else if (std::error_code ec3 = llvm::sys::fs::rename(tmpDir, absDir)) {
      llvm::sys::fs::rename(oldDir, absDir);
      err = makeError("cannot replace '" + dir + "': " + ec3.message());
    } else {
      llvm::sys::fs::remove_directories(oldDir);
      return llvm::Error::success();
    }
    llvm::sys::fs::remove_directories(oldDir);
  } else if (!err) {
    if (std::error_code ec = llvm::sys::fs::rename(tmpDir, absDir))
      err = makeError("cannot create output directory '" + dir +
                      "': " + ec.message());
  }
  if (err)
    llvm::sys::fs::remove_directories(tmpDir);
  return err;
}

} // namespace ppc
