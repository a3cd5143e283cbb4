//===- lib/FileUtil.cpp - Hashes and atomic writes ------------------------===//
#include "lib/FileUtil.h"

#include "lib/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ppc {

std::string sha256Hex(llvm::StringRef bytes) {
  llvm::SHA256 hasher;
  hasher.update(bytes);
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

llvm::Expected<std::string> sha256File(llvm::StringRef path) {
  auto cannotRead = [&](std::error_code ec) {
    return makeError("cannot read '" + path + "': " + ec.message());
  };
  auto file = llvm::sys::fs::openNativeFileForRead(path);
  if (!file)
    return cannotRead(llvm::errorToErrorCode(file.takeError()));
  // A chunk at a time: hashing a stage file of gigabytes takes no more
  // memory than hashing a small one.
  llvm::SHA256 hasher;
  std::vector<char> chunk(4 << 20);
  std::error_code failed;
  while (true) {
    auto n = llvm::sys::fs::readNativeFile(
        *file, llvm::makeMutableArrayRef(chunk.data(), chunk.size()));
    if (!n) {
      failed = llvm::errorToErrorCode(n.takeError());
      break;
    }
    if (*n == 0)
      break;
    hasher.update(llvm::StringRef(chunk.data(), *n));
  }
  llvm::sys::fs::closeFile(*file);
  if (failed)
    return cannotRead(failed);
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

llvm::Expected<uint64_t> fileSize(llvm::StringRef path) {
  uint64_t size = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, size))
    return makeError("cannot stat '" + path + "': " + ec.message());
  return size;
}

llvm::Error writeJSONFileAtomically(llvm::StringRef path,
                                    const llvm::json::Value &value) {
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    os << llvm::formatv("{0:2}", value) << "\n";
    return llvm::Error::success();
  });
}

llvm::Error checkOutputFile(llvm::StringRef path) {
  // Rename replaces whatever the path names: a device such as /dev/null
  // (when run as root), a FIFO or a directory must not become a regular
  // file; a file written in place (--log-file) must not block on a FIFO.
  // "/dev/null" is always refused: even where it does not exist, it names
  // no file of ours (and writeToOutput treats it specially).
  llvm::sys::fs::file_status status;
  if (path == "/dev/null" ||
      (!llvm::sys::fs::status(path, status, /*follow=*/true) &&
       status.type() != llvm::sys::fs::file_type::regular_file))
    return makeError("cannot write '" + path +
                     "': it exists and is not a regular file");
  return llvm::Error::success();
}

llvm::Error writeFileAtomically(
    llvm::StringRef path,
    const std::function<llvm::Error(llvm::raw_ostream &)> &write) {
  if (llvm::Error err = checkOutputFile(path))
    return err;
  // writeToOutput treats "-" as stdout; ppc's outputs are files, so it
  // means ./-.
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

namespace {

/// This host, as staged directories' names carry it: 8 hex digits of the
/// SHA-256 of its name.
std::string hostTag() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0)
    std::strcpy(name, "unknown");
  return sha256Hex(name).substr(0, 8);
}

/// ".tmp-HOST-PID": what the name of a staged directory adds to its
/// destination's, before createUniqueDirectory's "-XXXXXX".
std::string stagedSuffix() {
  return ".tmp-" + hostTag() + "-" + std::to_string(::getpid());
}

/// Removes the tree at `path` without following links; safe to call from
/// a signal handler in practice (nftw, unlink, rmdir).
int removeEntry(const char *path, const struct stat *, int flag, struct FTW *) {
  if (flag == FTW_DP)
    ::rmdir(path);
  else
    ::unlink(path);
  return 0;
}
void removeTree(const char *path) {
  ::nftw(path, removeEntry, 16, FTW_DEPTH | FTW_PHYS);
}

/// The staged directories a signal must remove: a fixed table, so that the
/// handler reads it without locks or allocation.
constexpr int kMaxStaged = 16;
char stagedPaths[kMaxStaged][PATH_MAX];
std::atomic<bool> stagedInUse[kMaxStaged];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction previousActions[3];
std::once_flag handlersInstalled;

void onSignal(int sig) {
  for (int i = 0; i < kMaxStaged; ++i) {
    if (!stagedInUse[i].load())
      continue;
    // Another process (a rank writing its stage) may add an entry between
    // nftw's listing and the rmdir: retry, a millisecond apart, until the
    // tree is gone.
    struct stat st;
    for (int attempt = 0; attempt < 50 && ::lstat(stagedPaths[i], &st) == 0;
         ++attempt) {
      if (attempt) {
        struct timespec pause = {0, 1000 * 1000};
        ::nanosleep(&pause, nullptr);
      }
      removeTree(stagedPaths[i]);
    }
  }
  // Whatever ran before (LLVM's own file removal, or the default action)
  // then ends the process as the signal means to.
  for (int i = 0; i < 3; ++i)
    if (kSignals[i] == sig)
      ::sigaction(sig, &previousActions[i], nullptr);
  ::raise(sig);
}

/// Guards the table's writers (the handler only reads a slot once its path
/// is whole).
std::mutex stagedMutex;

void installHandlers() {
  std::call_once(handlersInstalled, [] {
    struct sigaction action = {};
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < 3; ++i) {
      // A signal the process ignores (SIGHUP under nohup) stays ignored:
      // removing the staged directory would only break the save.
      struct sigaction current = {};
      if (::sigaction(kSignals[i], nullptr, &current) == 0 &&
          current.sa_handler == SIG_IGN)
        continue;
      ::sigaction(kSignals[i], &action, &previousActions[i]);
    }
  });
}

/// fsyncs `path` (a file or a directory). Errors name it.
llvm::Error syncPath(llvm::StringRef path) {
  std::string p = path.str();
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return makeError("cannot sync '" + path + "': " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return makeError("cannot sync '" + path + "': " + std::strerror(err));
  return llvm::Error::success();
}

/// fsyncs every file and directory of the tree at `root`.
llvm::Error syncTree(llvm::StringRef root) {
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(root, ec), end;
       !ec && it != end; it.increment(ec))
    if (llvm::Error err = syncPath(it->path()))
      return err;
  if (ec)
    return makeError("cannot read '" + root + "': " + ec.message());
  return syncPath(root);
}

/// Removes the staged directories beside `absDir` that a killed process of
/// this host left: those whose name (stagedSuffix()) names a process of
/// this host that no longer exists.
void removeStale(llvm::StringRef absDir) {
  llvm::StringRef parent = llvm::sys::path::parent_path(absDir);
  std::string prefix =
      (llvm::sys::path::filename(absDir) + ".tmp-" + hostTag() + "-").str();
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(parent, ec, /*follow=*/false), end;
       !ec && it != end; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (!name.consume_front(prefix))
      continue;
    long pid = 0;
    llvm::StringRef digits = name.take_while(llvm::isDigit);
    name = name.drop_front(digits.size());
    if (digits.getAsInteger(10, pid) || pid <= 0 || !name.startswith("-") ||
        name.size() != 7)
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
      continue;
    // Never through a symbolic link, which would empty its target.
    llvm::sys::fs::file_status status;
    if (llvm::sys::fs::status(it->path(), status, /*follow=*/false) ||
        status.type() != llvm::sys::fs::file_type::directory_file)
      continue;
    llvm::sys::fs::remove_directories(it->path());
  }
}

} // namespace

llvm::Expected<bool> isNonEmptyDirectory(llvm::StringRef dir) {
  if (!llvm::sys::fs::exists(dir))
    return false;
  if (!llvm::sys::fs::is_directory(dir))
    return makeError("output directory '" + dir +
                     "' exists and is not a directory");
  std::error_code ec;
  llvm::sys::fs::directory_iterator it(dir, ec), end;
  if (ec)
    return makeError("cannot read output directory '" + dir +
                     "': " + ec.message());
  return it != end;
}

StagedDirectory::StagedDirectory(std::string name, std::string dir,
                                 std::string path)
    : name_(std::move(name)), dir_(std::move(dir)), path_(std::move(path)),
      removedOnSignal_(path_) {}

StagedDirectory::StagedDirectory(StagedDirectory &&other) noexcept
    : name_(std::move(other.name_)), dir_(std::move(other.dir_)),
      path_(std::move(other.path_)),
      removedOnSignal_(std::move(other.removedOnSignal_)), done_(other.done_) {
  other.done_ = true;
}

StagedDirectory::~StagedDirectory() { discard(); }

void StagedDirectory::discard() {
  if (done_)
    return;
  done_ = true;
  llvm::sys::fs::remove_directories(path_);
  removedOnSignal_.release();
}

llvm::Error StagedDirectory::renamed(llvm::Error err, llvm::StringRef path,
                                     llvm::StringRef dir) {
  if (!err || path.empty())
    return err;
  std::string message = llvm::toString(std::move(err));
  std::string out;
  llvm::StringRef rest(message);
  for (size_t at; (at = rest.find(path)) != llvm::StringRef::npos;) {
    out += rest.take_front(at).str() + dir.str();
    rest = rest.drop_front(at + path.size());
  }
  return makeError(out + rest.str());
}

llvm::Error StagedDirectory::renamed(llvm::Error err) const {
  return renamed(std::move(err), path_, name_);
}

llvm::Expected<StagedDirectory> StagedDirectory::create(llvm::StringRef dir) {
  llvm::SmallString<256> absDir(dir);
  llvm::sys::fs::make_absolute(absDir);
  llvm::sys::path::remove_dots(absDir, /*remove_dot_dot=*/true);
  llvm::StringRef parent = llvm::sys::path::parent_path(absDir);
  if (std::error_code ec = llvm::sys::fs::create_directories(parent))
    return makeError("cannot create output directory '" + dir +
                     "': " + ec.message());
  removeStale(absDir);
  llvm::SmallString<256> model(absDir);
  model += stagedSuffix();
  llvm::SmallString<256> tmpDir;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(model, tmpDir))
    return makeError("cannot create output directory '" + dir +
                     "': " + ec.message());
  // createUniqueDirectory appends "-" and 6 random characters.
  StagedDirectory staged(dir.str(), std::string(absDir), std::string(tmpDir));
  // It is created for its owner and group only; give it the mode any new
  // directory gets (0777 less the umask), which it keeps once switched in.
  if (std::error_code ec = llvm::sys::fs::setPermissions(
          tmpDir, static_cast<llvm::sys::fs::perms>(
                      llvm::sys::fs::all_all & ~llvm::sys::fs::getUmask())))
    return makeError("cannot create output directory '" + dir +
                     "': " + ec.message());
  return staged;
}

llvm::Error StagedDirectory::commit(
    const std::function<llvm::Error(llvm::StringRef dir)> &replaceable) {
  auto fail = [&](const llvm::Twine &why) {
    discard();
    return makeError("cannot replace '" + name_ + "': " + why);
  };
  auto nonEmpty = isNonEmptyDirectory(name_);
  if (!nonEmpty) {
    discard();
    return nonEmpty.takeError();
  }
  if (*nonEmpty)
    if (llvm::Error err = replaceable(name_)) {
      discard();
      return err;
    }
  if (llvm::Error err = syncTree(path_)) {
    discard();
    return renamed(std::move(err));
  }
  if (!*nonEmpty) {
    // An empty directory is replaced by rename itself.
    if (std::error_code ec = llvm::sys::fs::rename(path_, dir_))
      return fail(ec.message());
  } else if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, dir_.c_str(),
                         RENAME_EXCHANGE) == 0) {
    // path_ now holds the old contents.
    llvm::sys::fs::remove_directories(path_);
  } else if (errno == EINVAL || errno == ENOSYS) {
    // No exchange on this filesystem: move the old aside, then the new in.
    // Named as staged directories are, so that it is removed as stale if
    // this process dies before removing it.
    llvm::SmallString<256> old(dir_);
    old += stagedSuffix();
    llvm::SmallString<256> oldDir;
    if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(old, oldDir))
      return fail(ec.message());
    if (std::error_code ec = llvm::sys::fs::rename(dir_, oldDir)) {
      llvm::sys::fs::remove_directories(oldDir);
      return fail(ec.message());
    }
    if (std::error_code ec = llvm::sys::fs::rename(path_, dir_)) {
      llvm::sys::fs::rename(oldDir, dir_);
      return fail(ec.message());
    }
    llvm::sys::fs::remove_directories(oldDir);
  } else {
    return fail(std::strerror(errno));
  }
  done_ = true;
  removedOnSignal_.release();
  // The switch is done; making the rename itself durable is best effort.
  llvm::consumeError(syncPath(llvm::sys::path::parent_path(dir_)));
  return llvm::Error::success();
}

RemovedOnSignal::RemovedOnSignal(const std::string &path) {
  if (path.size() >= PATH_MAX)
    return;
  installHandlers();
  std::lock_guard<std::mutex> lock(stagedMutex);
  for (int i = 0; i < kMaxStaged; ++i) {
    if (stagedInUse[i].load())
      continue;
    std::memcpy(stagedPaths[i], path.c_str(), path.size() + 1);
    stagedInUse[i].store(true);
    slot_ = i;
    return;
  }
}

RemovedOnSignal::RemovedOnSignal(RemovedOnSignal &&other) noexcept
    : slot_(other.slot_) {
  other.slot_ = -1;
}

RemovedOnSignal::~RemovedOnSignal() { release(); }

void RemovedOnSignal::release() {
  if (slot_ < 0)
    return;
  std::lock_guard<std::mutex> lock(stagedMutex);
  stagedInUse[slot_].store(false);
  slot_ = -1;
}

llvm::Error buildDirectoryAtomically(
    llvm::StringRef dir,
    const std::function<llvm::Error(llvm::StringRef dir)> &replaceable,
    const std::function<llvm::Error(llvm::StringRef tmpDir)> &fill) {
  auto nonEmpty = isNonEmptyDirectory(dir);
  if (!nonEmpty)
    return nonEmpty.takeError();
  if (*nonEmpty)
    if (llvm::Error err = replaceable(dir))
      return err;
  auto staged = StagedDirectory::create(dir);
  if (!staged)
    return staged.takeError();
  if (llvm::Error err = fill(staged->path()))
    return staged->renamed(std::move(err));
  return staged->commit(replaceable);
}

} // namespace ppc
