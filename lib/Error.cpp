//===- lib/Error.cpp - Errors as values at library boundaries -------------===//
#include "lib/Error.h"

namespace ppc {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::make_error<llvm::StringError>(message,
                                             llvm::inconvertibleErrorCode());
}

llvm::Error withContext(llvm::Error err, const llvm::Twine &context) {
  if (!err)
    return err;
  std::string prefix = context.str();
  return makeError(prefix + ": " + llvm::toString(std::move(err)));
}

std::string firstLine(const std::string &message) {
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
