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
  llvm::SmallString<256> tmp;
  int fd = -1;
  llvm::SmallString<256> model(path);
  model += ".tmp-%%%%%%";
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(model, fd, tmp))
    return makeError("cannot write '" + path + "': " + ec.message());
  llvm::Error err = llvm::Error::success();
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    err = write(os);
    os.flush();
    if (!err && os.has_error())
      err = makeError("cannot write '" + path + "': " + os.error().message());
    os.clear_error();
  }
  if (!err) {
    if (std::error_code ec = llvm::sys::fs::rename(tmp, path))
      err = makeError("cannot write '" + path + "': " + ec.message());
  }
  if (err)
    llvm::sys::fs::remove(tmp);
  return err;
}

llvm::Error buildDirectoryAtomically(
    llvm::StringRef dir, llvm::StringRef marker,
    const std::function<llvm::Error(llvm::StringRef tmpDir)> &fill) {
  bool exists = llvm::sys::fs::exists(dir);
  if (exists) {
    if (!llvm::sys::fs::is_directory(dir))
      return makeError("output directory '" + dir +
                       "' exists and is not a directory");
    std::error_code ec;
    llvm::sys::fs::directory_iterator it(dir, ec), end;
    llvm::SmallString<256> markerPath(dir);
    llvm::sys::path::append(markerPath, marker);
    if (!ec && it != end && !llvm::sys::fs::exists(markerPath))
      return makeError("output directory '" + dir +
                       "' is not empty and holds no " + marker +
                       "; refusing to replace it");
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
