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

/// The base of ppc's error types: an error a caller may react to by type
/// (llvm::handleErrors) rather than by reading its text. Its message is
/// describe() behind any context withContext() added, and the type
/// survives the added context.
class TypedError : public llvm::ErrorInfo<TypedError> {
public:
  static char ID;
  /// The message without context.
  virtual std::string describe() const = 0;
  void addContext(llvm::StringRef context) {
    context_ = context.str() + ": " + context_;
  }
  const std::string &context() const { return context_; }
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string context_;
};

/// An option out of its range, named by its field in the options struct
/// ("microbatches", "weightDecay"), so that each front end names it its
/// own way: the CLI as a flag ("--weight-decay", tools/ppc).
class OptionError : public llvm::ErrorInfo<OptionError, TypedError> {
public:
  static char ID;
  /// `problem` follows the option's name: "0 is not in 1..65536".
  OptionError(std::string field, std::string problem)
      : field_(std::move(field)), problem_(std::move(problem)) {}
  const std::string &field() const { return field_; }
  const std::string &problem() const { return problem_; }
  /// "microbatches 0 is not in 1..65536".
  std::string describe() const override { return field_ + " " + problem_; }

private:
  std::string field_;
  std::string problem_;
};

/// Makes an OptionError.
llvm::Error makeOptionError(const llvm::Twine &field,
                            const llvm::Twine &problem);

/// `raw` as a message may show it: at most `limit` bytes (then "..."),
/// every byte that is not printable ASCII as \xHH, so bytes from a file, a
/// peer, the environment or the command line never reach a terminal raw
/// (an ESC, a NUL, a newline that would split the error line).
std::string printable(llvm::StringRef raw, size_t limit = 64);

/// `text` as ppc prints it on a terminal line: every control byte (C0,
/// newline and ESC included, and DEL) as \xHH, and, unless `text` is valid
/// UTF-8, every non-ASCII byte too; the rest as it is. The one rule where
/// ppc prints a line that may hold a name or path from outside (its error
/// line, notes and warnings, `ppc inspect`), so that none can forge a line
/// or drive the terminal, whichever message carries it. Idempotent on what
/// printable() gives.
std::string terminalText(llvm::StringRef text);

/// Prefixes every message in `err` with `context: `, e.g. a file name. A
/// TypedError keeps its type; any other error becomes a plain one.
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
