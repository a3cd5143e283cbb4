//===- lib/Error.h - Errors as values at library boundaries -----*- C++ -*-===//
//
// ppc reports failures as llvm::Error / llvm::Expected out of lib/, passes/
// and runtime/. LibTorch throws c10::Error (and std::exception); those are
// caught at exactly one adapter, torchCall(), and turned into llvm::Error.
// Only main() prints errors, once, as "error: ..." on one line.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_ERROR_H
#define PPC_LIB_ERROR_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <type_traits>

namespace ppc {

/// Makes a one-line error with the given message.
llvm::Error makeError(const llvm::Twine &message);

/// Prefixes every message in `err` with `context: `, e.g. a file name.
llvm::Error withContext(llvm::Error err, const llvm::Twine &context);

/// Returns the one line of a LibTorch exception message that names the
/// problem: LibTorch appends C++ backtraces and TorchScript call stacks that
/// do not belong in a one-line diagnostic. Usually that is the first line;
/// for an error inside the TorchScript interpreter, whose first line is only
/// "The following operation failed in the TorchScript interpreter.", it is
/// the cause after the traceback, without the uninformative "RuntimeError: "
/// ("mat1 and mat2 shapes cannot be multiplied (2x5 and 3x4)").
std::string firstLine(const std::string &message);

/// Runs `fn`, turning any exception it throws into an llvm::Error whose
/// message starts with `what` (e.g. "cannot load 'm.pt'"). `fn` returns
/// either void (torchCall returns llvm::Error) or a value T (torchCall
/// returns llvm::Expected<T>).
template <typename Fn> auto torchCall(const llvm::Twine &what, Fn &&fn) {
  using Result = std::invoke_result_t<Fn>;
  auto fail = [&](const std::string &message) {
    return makeError(what + ": " + firstLine(message));
  };
  if constexpr (std::is_void_v<Result>) {
    try {
      fn();
      return llvm::Error(llvm::Error::success());
    } catch (const c10::Error &e) {
      return llvm::Error(fail(e.what_without_backtrace()));
    } catch (const std::exception &e) {
      return llvm::Error(fail(e.what()));
    }
  } else {
    using Out = llvm::Expected<Result>;
    try {
      return Out(fn());
    } catch (const c10::Error &e) {
      return Out(fail(e.what_without_backtrace()));
    } catch (const std::exception &e) {
      return Out(fail(e.what()));
    }
  }
}

} // namespace ppc

#endif // PPC_LIB_ERROR_H
