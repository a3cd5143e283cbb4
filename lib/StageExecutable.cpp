//===- lib/StageExecutable.cpp - A model format's runnable module ---------===//
//
// This file implements saveExecutable(), shared by every format.
//
//===----------------------------------------------------------------------===//
#include "lib/StageExecutable.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"

#include "llvm/Support/raw_ostream.h"

#include <streambuf>

namespace ppc {

StageExecutable::~StageExecutable() = default;

namespace {

/// A std::ostream sink over an llvm::raw_ostream, so a save streams
/// into writeFileAtomically's temporary file instead of a second in-memory
/// copy of the model. raw_fd_ostream records write errors itself, and
/// writeFileAtomically checks them.
class RawOstreamBuf : public std::streambuf {
public:
  explicit RawOstreamBuf(llvm::raw_ostream &os) : os_(os) {}

protected:
  std::streamsize xsputn(const char *s, std::streamsize n) override {
    os_.write(s, static_cast<size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof()))
      os_ << traits_type::to_char_type(c);
    return traits_type::not_eof(c);
  }

private:
  llvm::raw_ostream &os_;
};

} // namespace

llvm::Error saveExecutable(const StageExecutable &executable,
                           llvm::StringRef path, const llvm::Twine &what) {
  std::string context = what.str();
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    RawOstreamBuf buf(os);
    std::ostream out(&buf);
    return torchCall(context, [&] { executable.save(out); });
  });
}

} // namespace ppc
