//===- ppc/Error.h - How libppc_runtime's public API fails ------*- C++ -*-===//
//
// Part of libppc_runtime's public API (ppc/ppc.h). Every function of the
// public API that can fail throws ppc::api::Error, as LibTorch throws
// c10::Error; nothing else is thrown on purpose (a std::bad_alloc may
// still escape). Its what() is the one-line message `ppc run` prints after
// "error: " ("lost rank 1 (no answer within 60 s while waiting for ...)",
// "cannot read input 'x.pt': No such file or directory"), except that an
// option is named by its field here ("microbatches 0 is not an integer in
// 1..65536") where the command line names its flag (--microbatches). So a
// program that prints "error: " + what() and exits with status 2 behaves
// like `ppc run` under `ppc launch`.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PUBLIC_ERROR_H
#define PPC_PUBLIC_ERROR_H

#include <stdexcept>
#include <string>

namespace ppc::api {

/// A failure of the public API: one line, no trailing newline.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

} // namespace ppc::api

#endif // PPC_PUBLIC_ERROR_H
