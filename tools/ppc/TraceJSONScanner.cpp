//===- tools/ppc/TraceJSONScanner.cpp - JSON, one value at a time ---------===//
//
// This file implements TraceJSONScanner: finding where JSON values end
// without parsing them, and checking what lies between them with
// llvm::json::parse's messages.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/TraceJSONScanner.h"

#include "lib/SafeRead.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace ppc {

size_t TraceJSONScanner::skipWhitespace(size_t p) const {
  while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' ||
                              text_[p] == '\r' || text_[p] == '\n'))
    ++p;
  return p;
}

size_t TraceJSONScanner::valueEnd(size_t begin) const {
  size_t end = text_.size();
  if (begin >= end)
    return end;
  switch (text_[begin]) {
  case '"':
    return stringEnd(begin);
  case 'n':
  case 't':
    return charEnd(std::min(end, begin + 4));
  case 'f':
    return charEnd(std::min(end, begin + 5));
  case '[':
  case '{':
    return containerEnd(begin);
  default: {
    size_t p = begin;
    while (p < end && isNumberChar(text_[p]))
      ++p;
    // Not a value: llvm::json::parse stops past its first character.
    return p > begin ? p : charEnd(begin + 1);
  }
  }
}

size_t TraceJSONScanner::containerEnd(size_t begin) const {
  size_t end = text_.size();
  size_t depth = 0;
  for (size_t p = begin; p < end;) {
    char c = text_[p];
    if (c == '"') {
      p = stringEnd(p);
      continue;
    }
    ++p;
    if (c == '[' || c == '{')
      ++depth;
    else if ((c == ']' || c == '}') && --depth == 0)
      return p;
  }
  return end;
}

std::optional<llvm::json::Value> TraceJSONScanner::parse(size_t begin,
                                                         size_t end) {
  auto value = llvm::json::parse(text_.slice(begin, end));
  if (value)
    return std::move(*value);
  // llvm::json::ParseError keeps its position to itself; its message is
  // "[line:column, byte=offset]: what".
  std::string message = llvm::toString(value.takeError());
  llvm::StringRef rest(message);
  size_t at = rest.find("byte="), close = rest.find("]: ");
  uint64_t offset = 0;
  if (at == llvm::StringRef::npos || close == llvm::StringRef::npos ||
      close < at || rest.slice(at + 5, close).getAsInteger(10, offset))
    fail(begin, message);
  else
    fail(begin + offset, rest.drop_front(close + 3));
  return std::nullopt;
}

bool TraceJSONScanner::forEachElement(
    size_t &p, llvm::function_ref<bool(size_t index, size_t begin, size_t end)>
                   onElement) {
  p = skipWhitespace(p + 1);
  if (p < text_.size() && text_[p] == ']') {
    ++p;
    return true;
  }
  for (size_t index = 0;; ++index) {
    size_t begin = skipWhitespace(p);
    p = valueEnd(begin);
    if (!onElement(index, begin, p))
      return false;
    p = skipWhitespace(p);
    char c = next(p);
    if (c == ']')
      return true;
    if (c != ',')
      return fail(p, "Expected , or ] after array element");
  }
}

bool TraceJSONScanner::forEachMember(
    size_t &p,
    llvm::function_ref<bool(llvm::StringRef key, size_t begin, size_t end)>
        onMember) {
  p = skipWhitespace(p + 1);
  if (p < text_.size() && text_[p] == '}') {
    ++p;
    return true;
  }
  for (;;) {
    p = skipWhitespace(p);
    size_t keyBegin = p;
    if (next(p) != '"')
      return fail(p, "Expected object key");
    size_t keyEnd = stringEnd(keyBegin);
    std::optional<llvm::json::Value> key = parse(keyBegin, keyEnd);
    if (!key)
      return false;
    p = skipWhitespace(keyEnd);
    if (next(p) != ':')
      return fail(p, "Expected : after object key");
    size_t begin = skipWhitespace(p);
    p = valueEnd(begin);
    if (!onMember(*key->getAsString(), begin, p))
      return false;
    p = skipWhitespace(p);
    char c = next(p);
    if (c == '}')
      return true;
    if (c != ',')
      return fail(p, "Expected , or } after object property");
  }
}

bool TraceJSONScanner::validate(size_t begin, size_t end, unsigned depth) {
  char c = begin < end ? text_[begin] : 0;
  if (end - begin <= kMaxParseBytes || (c != '[' && c != '{'))
    return parse(begin, end).has_value();
  if (depth > kMaxJSONDepth)
    return fail(begin, "Nested too deeply");
  size_t p = begin;
  if (c == '[')
    return forEachElement(p, [&](size_t, size_t b, size_t e) {
      return validate(b, e, depth + 1);
    });
  return forEachMember(p, [&](llvm::StringRef, size_t b, size_t e) {
    return validate(b, e, depth + 1);
  });
}

bool TraceJSONScanner::checkEnd(size_t p) {
  p = skipWhitespace(p);
  return p == text_.size() || fail(p, "Text after end of document");
}

std::string TraceJSONScanner::describe(const SyntaxError &e) const {
  llvm::StringRef before = text_.take_front(e.offset);
  size_t line = 1 + before.count('\n');
  size_t lineStart = before.rfind('\n');
  size_t column =
      lineStart == llvm::StringRef::npos ? e.offset : e.offset - lineStart - 1;
  return llvm::formatv("[{0}:{1}, byte={2}]: {3}", line, column, e.offset,
                       e.message);
}

bool TraceJSONScanner::isNumberChar(char c) {
  return (c >= '0' && c <= '9') || c == 'e' || c == 'E' || c == '+' ||
         c == '-' || c == '.';
}

size_t TraceJSONScanner::charEnd(size_t p) const {
  while (p < text_.size() &&
         (static_cast<unsigned char>(text_[p]) & 0xC0) == 0x80)
    ++p;
  return p;
}

size_t TraceJSONScanner::stringEnd(size_t begin) const {
  size_t end = text_.size();
  for (size_t p = begin + 1; p < end;) {
    char c = text_[p++];
    if (c == '"')
      return p;
    if (c == '\\' && p < end && text_[p++] == 'u')
      p = std::min(end, p + 4);
  }
  return end;
}

bool TraceJSONScanner::fail(size_t offset, llvm::StringRef message) {
  if (!error_)
    error_ = SyntaxError{offset, message.str()};
  return false;
}

} // namespace ppc
