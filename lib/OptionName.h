//===- lib/OptionName.h - How messages name an option -----------*- C++ -*-===//
//
// The runtime names the options it reports on by their Option (one line
// each in lib/Options.def), never by a flag: "microbatches 8 exceeds the
// smallest replica's slice …" for a library user, and, once ppc's CLI has
// called nameOptions(OptionNaming::Flag), "--microbatches 8 exceeds …" for
// its user.
// The ranks' agreement record (runtime/link/Agreement.h) names its entries
// the same way, so every rank of a job must name them alike (they do: they
// run one front end).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_OPTIONNAME_H
#define PPC_LIB_OPTIONNAME_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace ppc {

enum class Option {
#define PPC_OPTION(Id, Field, Flag) Id,
#include "lib/Options.def"
};

/// How optionName() names options: by the field of the option structs
/// (the default) or by ppc's flag.
enum class OptionNaming { Field, Flag };

/// How messages name `option`: its field ("dataParallel"), or with
/// OptionNaming::Flag its flag ("--data-parallel").
std::string optionName(Option option);

/// Names every option `naming`'s way from now on, in every thread. ppc's
/// CLI asks for flags before it runs a command (tools/ppc/main.cpp).
void nameOptions(OptionNaming naming);

/// The flag of an option struct's field, as the CLI names an OptionError's
/// (lib/Error.h): its Options.def line's when it has one
/// ("streamMicrobatches": "--stream-window"), else the field in kebab case
/// less a unit the flag leaves out ("weightDecay": "--weight-decay",
/// "timeoutSeconds": "--timeout").
std::string flagOfField(llvm::StringRef field);

} // namespace ppc

#endif // PPC_LIB_OPTIONNAME_H
