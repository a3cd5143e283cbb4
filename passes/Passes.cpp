//===- passes/Passes.cpp - The pass registry ------------------------------===//
#include "passes/Passes.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <torch/csrc/jit/ir/ir.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace ppc {

namespace {
struct PassInfo {
  const char *name;
  GraphPass run;
  const char *description;
};
} // namespace

static const PassInfo kPasses[] = {
#define PPC_PASS(name, fn, description) {name, fn, description},
#include "passes/Passes.def"
};

static const PassInfo *findPass(llvm::StringRef name) {
  for (const PassInfo &p : kPasses)
    if (name == p.name)
      return &p;
  return nullptr;
}

static std::string knownPasses() {
  std::vector<std::string> known;
  for (const PassInfo &p : kPasses)
    known.push_back(p.name);
  return llvm::join(known, ", ");
}

/// The passes PPC_DEBUG_PASSES names ("all" for every pass). Errors: a name
/// that is no pass, since a typo would otherwise silently print nothing.
static llvm::Expected<std::vector<const PassInfo *>> debuggedPasses() {
  std::vector<const PassInfo *> out;
  const char *env = std::getenv("PPC_DEBUG_PASSES");
  if (!env)
    return out;
  llvm::SmallVector<llvm::StringRef, 4> names;
  llvm::StringRef(env).split(names, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (llvm::StringRef raw : names) {
    llvm::StringRef name = raw.trim();
    if (name == "all") {
      for (const PassInfo &p : kPasses)
        out.push_back(&p);
    } else if (const PassInfo *p = findPass(name)) {
      out.push_back(p);
    } else {
      return makeError("PPC_DEBUG_PASSES names unknown pass '" + name +
                       "'; known passes: all, " + knownPasses());
    }
  }
  return out;
}

static void dump(const char *when, llvm::StringRef pass,
                 const torch::jit::Graph &graph) {
  std::ostringstream os;
  os << graph;
  llvm::errs() << "*** IR Dump " << when << " " << pass << " ***\n" << os.str();
}

llvm::Error runPasses(const std::shared_ptr<torch::jit::Graph> &graph,
                      llvm::ArrayRef<std::string> names) {
  auto debugged = debuggedPasses();
  if (!debugged)
    return debugged.takeError();
  for (const std::string &name : names) {
    const PassInfo *info = findPass(name);
    if (!info)
      return makeError("unknown pass '" + name +
                       "'; known passes: " + knownPasses());
    bool debug = llvm::is_contained(*debugged, info);
    if (debug)
      dump("Before", info->name, *graph);
    if (llvm::Error err =
            torchCall(llvm::Twine("pass '") + info->name + "' failed",
                      [&] { info->run(graph); }))
      return err;
    if (debug)
      dump("After", info->name, *graph);
  }
  return llvm::Error::success();
}

} // namespace ppc
