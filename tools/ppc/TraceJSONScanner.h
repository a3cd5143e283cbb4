//===- tools/ppc/TraceJSONScanner.h - JSON, one value at a time -*- C++ -*-===//
//
// Reads the structure of a JSON text without building it, so that a trace
// file (tools/ppc/TraceReader.h) is parsed one value at a time and never
// held whole as a DOM.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_TRACEJSONSCANNER_H
#define PPC_TOOLS_PPC_TRACEJSONSCANNER_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <cstddef>
#include <optional>
#include <string>

namespace ppc {

/// A place where a JSON text is malformed, and what is wrong there, in
/// llvm::json::parse's words.
struct SyntaxError {
  size_t offset = 0;
  std::string message;
};

/// Reads the structure of a JSON text (valid UTF-8, which the caller
/// checks) without building it:
///
/// 1. valueEnd() finds where a value ends by reading it the way
///    llvm::json::parse does (strings with their escapes, numbers as runs of
///    number characters, brackets counted outside strings), without checking
///    it.
/// 2. parse() hands that stretch alone to llvm::json::parse. A value that is
///    malformed stops llvm::json::parse at the same byte whether it reads
///    the value alone or the whole text, so the error is the one of the
///    whole text, moved to the value's offset.
/// 3. forEachElement() and forEachMember() check what lies between the
///    values of an array or object (commas, colons, keys) with
///    llvm::json::parse's messages, and visit the values.
///
/// The first problem found is kept (error()); later ones are ignored.
class TraceJSONScanner {
public:
  explicit TraceJSONScanner(llvm::StringRef text) : text_(text) {}

  /// Past the JSON whitespace at `p`.
  size_t skipWhitespace(size_t p) const;

  /// The end of the value that starts at `begin` (past any whitespace). A
  /// malformed value ends no earlier than where llvm::json::parse stops.
  size_t valueEnd(size_t begin) const;

  /// Parses the value [begin, end) alone; on failure records where the
  /// whole text is malformed.
  std::optional<llvm::json::Value> parse(size_t begin, size_t end);

  /// Visits each element of the array at `p` as onElement(index, begin,
  /// end) and leaves `p` past its ']'. False when onElement returns false
  /// or the array is malformed (error() says where).
  bool forEachElement(
      size_t &p,
      llvm::function_ref<bool(size_t index, size_t begin, size_t end)>
          onElement);

  /// Visits each member of the object at `p` as onMember(key, begin, end)
  /// of its value and leaves `p` past its '}'. False when onMember returns
  /// false or the object is malformed.
  bool forEachMember(
      size_t &p,
      llvm::function_ref<bool(llvm::StringRef key, size_t begin, size_t end)>
          onMember);

  /// Checks that [begin, end) is valid JSON while holding at most
  /// kMaxParseBytes of it parsed at a time: a larger array or object is
  /// checked member by member. `depth` bounds the recursion.
  bool validate(size_t begin, size_t end, unsigned depth = 1);

  /// Past the top-level value at `p`: nothing but whitespace may follow.
  bool checkEnd(size_t p);

  /// "[3:7, byte=52]: Expected , or ] after array element", as
  /// llvm::json::ParseError prints it (column counted from 0).
  std::string describe(const SyntaxError &e) const;

  const std::optional<SyntaxError> &error() const { return error_; }
  llvm::StringRef text() const { return text_; }

private:
  /// Values up to this size are parsed whole by validate().
  static constexpr size_t kMaxParseBytes = 64 << 10;

  static bool isNumberChar(char c);

  /// `p`, or past the UTF-8 sequence it is inside, so that a value handed
  /// to llvm::json::parse alone is valid UTF-8 (the whole text is).
  size_t charEnd(size_t p) const;

  /// llvm::json::parse's next(): the byte at `p`, then past it; 0 at the
  /// end, which does not move.
  char next(size_t &p) const { return p < text_.size() ? text_[p++] : 0; }

  /// The end of the string whose quote is at `begin`: past its closing
  /// quote, reading escapes (\uXXXX takes four more bytes) as
  /// llvm::json::parse does.
  size_t stringEnd(size_t begin) const;

  /// The end of the array or object that starts at `begin`.
  size_t containerEnd(size_t begin) const;

  bool fail(size_t offset, llvm::StringRef message);

  llvm::StringRef text_;
  std::optional<SyntaxError> error_;
};

} // namespace ppc

#endif // PPC_TOOLS_PPC_TRACEJSONSCANNER_H
