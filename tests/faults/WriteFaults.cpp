//===- tests/faults/WriteFaults.cpp - A disk that fills, a rank that dies -===//
//
// An LD_PRELOAD library for the CLI tests (tests/cli/test_write_faults.py).
// It interposes the C library's file-changing calls and, for the paths under
// one directory, makes the disk "fill" after a number of bytes or ends the
// process at a chosen operation, so that every write path of ppc can be
// tested at every point without a real full disk. Settings, from the
// environment:
//   PPC_FAULT_DIR         absolute directory: only paths under it count
//                         (a write counts when its file descriptor's file
//                         lies under it); unset: the library does nothing
//   PPC_FAULT_RANK        only the process whose RANK is this value (unset:
//                         every process)
//   PPC_FAULT_ENOSPC_AFTER  bytes the disk takes in all; a write beyond them
//                         is cut short, and the next fails with ENOSPC
//   PPC_FAULT_KILL_AT     N: at the N-th counted operation (1-based: a write,
//                         an open that creates, a mkdir, a rename, an unlink,
//                         an rmdir, an fsync), before doing it, the process
//                         raises PPC_FAULT_SIGNAL (default SIGKILL)
//   PPC_FAULT_SIGNAL      KILL, TERM or INT
//   PPC_FAULT_LOG         a path prefix: each counted operation appends a
//                         line "N KIND PATH" (KIND: write, create, mkdir,
//                         rename, unlink, rmdir or fsync) to PREFIX.RANK
//                         (RANK from the environment, 0 without one), so a
//                         test can tell which operations a kill would
//                         interrupt alike (test_write_faults.py SaveKillTest)
// Calls are forwarded to the next definition (dlsym RTLD_NEXT).
//
//===----------------------------------------------------------------------===//
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

namespace {

struct Settings {
  bool active = false;
  char dir[PATH_MAX] = {};
  size_t dirLength = 0;
  long long enospcAfter = -1;
  long long killAt = -1;
  int signal = SIGKILL;
};

const Settings &settings() {
  static const Settings s = [] {
    Settings out;
    const char *dir = getenv("PPC_FAULT_DIR");
    if (!dir || dir[0] != '/' || strlen(dir) >= PATH_MAX)
      return out;
    const char *rank = getenv("PPC_FAULT_RANK");
    if (rank) {
      const char *mine = getenv("RANK");
      if (!mine || strcmp(mine, rank) != 0)
        return out;
    }
    strcpy(out.dir, dir);
    out.dirLength = strlen(dir);
    while (out.dirLength > 1 && out.dir[out.dirLength - 1] == '/')
      out.dir[--out.dirLength] = '\0';
    if (const char *n = getenv("PPC_FAULT_ENOSPC_AFTER"))
      out.enospcAfter = atoll(n);
    if (const char *n = getenv("PPC_FAULT_KILL_AT"))
      out.killAt = atoll(n);
    if (const char *sig = getenv("PPC_FAULT_SIGNAL")) {
      if (!strcmp(sig, "TERM"))
        out.signal = SIGTERM;
      else if (!strcmp(sig, "INT"))
        out.signal = SIGINT;
    }
    out.active = true;
    return out;
  }();
  return s;
}

std::atomic<long long> written{0};
std::atomic<long long> operations{0};

/// Whether `path` (absolute or relative to the working directory) lies
/// under PPC_FAULT_DIR.
bool under(const char *path) {
  const Settings &s = settings();
  if (!s.active || !path)
    return false;
  char absolute[PATH_MAX];
  if (path[0] != '/') {
    if (!getcwd(absolute, sizeof absolute))
      return false;
    size_t n = strlen(absolute);
    if (n + 1 + strlen(path) >= sizeof absolute)
      return false;
    absolute[n] = '/';
    strcpy(absolute + n + 1, path);
    path = absolute;
  }
  return strncmp(path, s.dir, s.dirLength) == 0 &&
         (path[s.dirLength] == '/' || path[s.dirLength] == '\0');
}

/// Whether file descriptor `fd`'s file lies under PPC_FAULT_DIR; its path
/// goes to `target` (PATH_MAX bytes) when given.
bool fdUnder(int fd, char *target = nullptr) {
  if (!settings().active)
    return false;
  char link[64], own[PATH_MAX];
  if (!target)
    target = own;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, PATH_MAX - 1);
  if (n <= 0)
    return false;
  target[n] = '\0';
  // Pipes, sockets and deleted files read "pipe:[N]", "socket:[N]", ...
  return target[0] == '/' && under(target);
}

/// Appends "N KIND PATH" to PPC_FAULT_LOG.RANK, when set (through the next
/// definitions: the log lies outside PPC_FAULT_DIR, and is no operation).
void logOperation(long long n, const char *kind, const char *path) {
  const char *prefix = getenv("PPC_FAULT_LOG");
  if (!prefix || !*prefix)
    return;
  const char *rank = getenv("RANK");
  char name[PATH_MAX], line[PATH_MAX + 64];
  if (snprintf(name, sizeof name, "%s.%s", prefix, rank ? rank : "0") >=
      static_cast<int>(sizeof name))
    return;
  int length = snprintf(line, sizeof line, "%lld %s %s\n", n, kind, path);
  if (length < 0)
    return;
  if (length >= static_cast<int>(sizeof line))
    length = static_cast<int>(sizeof line) - 1;
  using OpenAt = int (*)(int, const char *, int, ...);
  static auto realOpenAt = reinterpret_cast<OpenAt>(dlsym(RTLD_NEXT, "openat"));
  static auto realWrite =
      reinterpret_cast<ssize_t (*)(int, const void *, size_t)>(
          dlsym(RTLD_NEXT, "write"));
  int fd = realOpenAt(AT_FDCWD, name, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                      0644);
  if (fd < 0)
    return;
  (void)!realWrite(fd, line, static_cast<size_t>(length));
  close(fd);
}

/// Counts one operation (KIND on PATH); raises the signal at
/// PPC_FAULT_KILL_AT.
void operation(const char *kind, const char *path) {
  const Settings &s = settings();
  long long n = ++operations;
  logOperation(n, kind, path);
  if (s.killAt > 0 && n == s.killAt)
    raise(s.signal);
}

/// How many of `n` bytes the disk still takes; -1 (errno ENOSPC) for none.
ssize_t room(size_t n) {
  const Settings &s = settings();
  if (s.enospcAfter < 0)
    return static_cast<ssize_t>(n);
  long long left = s.enospcAfter - written.load();
  if (left <= 0) {
    errno = ENOSPC;
    return -1;
  }
  return static_cast<ssize_t>(n < static_cast<size_t>(left) ? n : left);
}

template <typename Fn> Fn next(const char *name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" {

ssize_t write(int fd, const void *buf, size_t n) {
  static auto real = next<ssize_t (*)(int, const void *, size_t)>("write");
  char path[PATH_MAX];
  if (!fdUnder(fd, path))
    return real(fd, buf, n);
  operation("write", path);
  ssize_t take = room(n);
  if (take < 0)
    return -1;
  ssize_t done = real(fd, buf, static_cast<size_t>(take));
  if (done > 0)
    written += done;
  return done;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
  static auto real =
      next<ssize_t (*)(int, const void *, size_t, off_t)>("pwrite");
  char path[PATH_MAX];
  if (!fdUnder(fd, path))
    return real(fd, buf, n, offset);
  operation("write", path);
  ssize_t take = room(n);
  if (take < 0)
    return -1;
  ssize_t done = real(fd, buf, static_cast<size_t>(take), offset);
  if (done > 0)
    written += done;
  return done;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t offset) {
  return pwrite(fd, buf, n, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
  static auto real =
      next<ssize_t (*)(int, const struct iovec *, int)>("writev");
  if (!fdUnder(fd))
    return real(fd, iov, count);
  // Written one buffer at a time, through write() above.
  ssize_t total = 0;
  for (int i = 0; i < count; ++i) {
    ssize_t done = write(fd, iov[i].iov_base, iov[i].iov_len);
    if (done < 0)
      return total > 0 ? total : -1;
    total += done;
    if (static_cast<size_t>(done) < iov[i].iov_len)
      break;
  }
  return total;
}

static int openCommon(const char *, int dirfd, const char *path, int flags,
                      mode_t mode) {
  if ((flags & O_CREAT) && (dirfd == AT_FDCWD || path[0] == '/') && under(path))
    operation("create", path);
  using OpenAt = int (*)(int, const char *, int, ...);
  static auto real = next<OpenAt>("openat");
  return real(dirfd, path, flags, mode);
}

int open(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return openCommon("open", AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return openCommon("open64", AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return openCommon("openat", dirfd, path, flags, mode);
}

int mkdir(const char *path, mode_t mode) {
  static auto real = next<int (*)(const char *, mode_t)>("mkdir");
  if (under(path))
    operation("mkdir", path);
  return real(path, mode);
}

int rename(const char *from, const char *to) {
  static auto real = next<int (*)(const char *, const char *)>("rename");
  if (under(from) || under(to))
    operation("rename", to);
  return real(from, to);
}

int renameat2(int fromDir, const char *from, int toDir, const char *to,
              unsigned flags) {
  static auto real =
      next<int (*)(int, const char *, int, const char *, unsigned)>(
          "renameat2");
  if (under(from) || under(to))
    operation("rename", to);
  return real(fromDir, from, toDir, to, flags);
}

int unlink(const char *path) {
  static auto real = next<int (*)(const char *)>("unlink");
  if (under(path))
    operation("unlink", path);
  return real(path);
}

int rmdir(const char *path) {
  static auto real = next<int (*)(const char *)>("rmdir");
  if (under(path))
    operation("rmdir", path);
  return real(path);
}

int fsync(int fd) {
  static auto real = next<int (*)(int)>("fsync");
  char path[PATH_MAX];
  if (fdUnder(fd, path))
    operation("fsync", path);
  return real(fd);
}

} // extern "C"
