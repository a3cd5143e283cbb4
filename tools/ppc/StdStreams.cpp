//===- tools/ppc/StdStreams.cpp - Standard streams of ppc -----------------===//
//
// This file implements prepareStandardStreams() and finishStandardStreams()
// (see StdStreams.h).
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/StdStreams.h"

#include "tools/ppc/Commands.h"

#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace ppc {

namespace {
/// Whether `error` says that the reader of a pipe went away.
bool isBrokenPipe(std::error_code error) {
  return error == std::errc::broken_pipe;
}

/// At exit, after any return from main or std::exit: a stream whose error
/// is still set would make its destructor end the process with LLVM's
/// "IO failure on output stream" (exit 1). A broken pipe is forgotten;
/// finishStandardStreams() has reported anything else already.
void forgetStreamErrors() {
  for (llvm::raw_fd_ostream *os : {&llvm::outs(), &llvm::errs()}) {
    os->flush();
    os->clear_error();
  }
}
} // namespace

void prepareStandardStreams() {
  // open() returns the lowest free descriptor: checked in order, each
  // closed one of 0..2 is the lowest free one when it is opened.
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF)
      continue;
    int opened = ::open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) {
      ::dup2(opened, fd);
      ::close(opened);
    }
  }
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
  // Construct both streams now, so that the handler registered after them
  // runs before their destructors.
  (void)llvm::outs();
  (void)llvm::errs();
  std::atexit(forgetStreamErrors);
}

int finishStandardStreams(int code) {
  llvm::raw_fd_ostream &out = llvm::outs();
  out.flush();
  if (!out.has_error())
    return code;
  std::error_code error = out.error();
  out.clear_error();
  if (isBrokenPipe(error) || code != 0)
    return code;
  std::string line =
      "error: cannot write to standard output: " + error.message() + "\n";
  llvm::errs().write(line.data(), line.size());
  return kErrorExitCode;
}

} // namespace ppc
