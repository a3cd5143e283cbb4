//===- tools/ppc/StdStreams.h - Standard streams of ppc ---------*- C++ -*-===//
//
// What every ppc command does with its standard streams, first and last:
// a process started with stdin, stdout or stderr closed (as a supervisor
// may start it) gets them on /dev/null before it opens anything, so that no
// file or socket it opens later (the rendezvous store's) can take fd 1 or 2
// and receive its output lines; SIGPIPE is ignored, so that a reader of
// stdout that went away (`ppc schedule ... | head -1`) is a failed write
// (EPIPE) rather than the end of the process. Such a reader is a normal
// end: the command's exit status stands and nothing is printed about it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_STDSTREAMS_H
#define PPC_TOOLS_PPC_STDSTREAMS_H

namespace ppc {

/// Opens each of fds 0, 1 and 2 that is closed on /dev/null (read-only for
/// stdin, write-only for the others), ignores SIGPIPE for the rest of the
/// process (children ppc launch starts get the default back), and makes
/// sure that a broken stdout or stderr never ends the process with LLVM's
/// "IO failure on output stream" at exit. Call first in main, before any
/// file or socket is opened.
void prepareStandardStreams();

/// The exit status of a command that returned `code`, once stdout is
/// flushed: `code` when every write reached stdout or its reader went away
/// (EPIPE); otherwise (a full disk, an I/O error) it prints "error: cannot
/// write to standard output: REASON" and returns 2 (when `code` was 0).
int finishStandardStreams(int code);

} // namespace ppc

#endif // PPC_TOOLS_PPC_STDSTREAMS_H
