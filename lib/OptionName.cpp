//===- lib/OptionName.cpp - How messages name an option ------------------===//

#include "lib/OptionName.h"

#include <atomic>

namespace ppc {

namespace {
struct Spelling {
  const char *field;
  const char *flag;
};
constexpr Spelling kSpellings[] = {
#define PPC_OPTION(Id, Field, Flag) {Field, Flag},
#include "lib/Options.def"
};
// Set once, before any rank starts; read from any thread.
std::atomic<OptionNaming> naming{OptionNaming::Field};
} // namespace

std::string optionName(Option option) {
  const Spelling &s = kSpellings[static_cast<int>(option)];
  if (naming.load(std::memory_order_relaxed) == OptionNaming::Flag)
    return std::string("--") + s.flag;
  return s.field;
}

void nameOptions(OptionNaming how) {
  naming.store(how, std::memory_order_relaxed);
}

std::string flagOfField(llvm::StringRef field) {
  for (const Spelling &s : kSpellings)
    if (field == s.field)
      return std::string("--") + s.flag;
  if (field.endswith("Seconds"))
    field = field.drop_back(llvm::StringRef("Seconds").size());
  std::string flag = "--";
  for (char c : field) {
    if (c >= 'A' && c <= 'Z') {
      flag += '-';
      c = static_cast<char>(c - 'A' + 'a');
    }
    flag += c;
  }
  return flag;
}

} // namespace ppc
