//===- lib/Error.cpp - Errors as values at library boundaries -------------===//
#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/FormatVariadic.h"

#include <optional>

namespace ppc {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::make_error<llvm::StringError>(message,
                                             llvm::inconvertibleErrorCode());
}

char TypedError::ID;
char OptionError::ID;

void TypedError::log(llvm::raw_ostream &os) const {
  os << context_ << describe();
}

llvm::Error makeOptionError(const llvm::Twine &field,
                            const llvm::Twine &problem) {
  return llvm::make_error<OptionError>(field.str(), problem.str());
}

std::string printable(llvm::StringRef raw, size_t limit) {
  std::string out;
  for (char c : raw.take_front(limit)) {
    if (llvm::isPrint(c))
      out += c;
    else
      out += llvm::formatv("\\x{0:x-2}", static_cast<unsigned char>(c)).str();
  }
  if (raw.size() > limit)
    out += "...";
  return out;
}

std::string terminalText(llvm::StringRef text) {
  const auto *begin = reinterpret_cast<const llvm::UTF8 *>(text.data());
  bool utf8 = llvm::isLegalUTF8String(&begin, begin + text.size());
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f || (byte >= 0x80 && !utf8))
      out += llvm::formatv("\\x{0:x-2}", byte).str();
    else
      out += c;
  }
  return out;
}

llvm::Error withContext(llvm::Error err, const llvm::Twine &context) {
  if (!err)
    return err;
  std::string prefix = context.str();
  return llvm::handleErrors(
      std::move(err),
      [&](std::unique_ptr<TypedError> typed) {
        typed->addContext(prefix);
        return llvm::Error(std::move(typed));
      },
      [&](const llvm::ErrorInfoBase &other) {
        return makeError(prefix + ": " + other.message());
      });
}

/// The line of a TorchScript interpreter error that names the cause. Its
/// message reads:
///   The following operation failed in the TorchScript interpreter.
///   Traceback of TorchScript (most recent call last):
///     File "code/__torch__.py", line 9, in forward
///       ...
///   RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x5 and 3x4)
/// (a loaded module may show two tracebacks, serialized and original code).
/// The cause is the first unindented line after the header and tracebacks.
static std::optional<llvm::StringRef>
torchScriptCause(llvm::StringRef message) {
  llvm::SmallVector<llvm::StringRef, 16> lines;
  message.split(lines, '\n', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  if (lines.empty() ||
      !lines.front().trim().endswith("failed in the TorchScript interpreter."))
    return std::nullopt;
  for (llvm::StringRef line : llvm::drop_begin(lines)) {
    if (line.trim().empty() || line.startswith(" ") || line.startswith("\t") ||
        line.startswith("Traceback of TorchScript") ||
        line.endswith("failed in the TorchScript interpreter."))
      continue;
    // "RuntimeError" is the interpreter's default class and says nothing;
    // a Python exception raised by the model keeps its name ("ValueError:").
    line = line.trim();
    if (line.consume_front("RuntimeError: "))
      return line;
    line.consume_front("builtins.");
    return line;
  }
  return std::nullopt;
}

std::string firstLine(const std::string &message) {
  if (auto cause = torchScriptCause(message))
    if (!cause->empty())
      return cause->str();
  size_t start = message.find_first_not_of(" \n\t");
  if (start == std::string::npos)
    return "unknown error";
  size_t end = message.find('\n', start);
  std::string line = message.substr(
      start, end == std::string::npos ? std::string::npos : end - start);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r'))
    line.pop_back();
  return line;
}

} // namespace ppc
