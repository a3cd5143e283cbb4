//===- passes/Passes.cpp - The pass registry ------------------------------===//
#include "passes/Passes.h"

#include "lib/Error.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <torch/csrc/jit/ir/ir.h>

#include <cstdlib>
#include <sstream>

namespace ppc {

static const PassInfo kPasses[] = {
#define PPC_PASS(name, fn, description) {name, fn, description},
#include "passes/Passes.def"
};

llvm::ArrayRef<PassInfo> allPasses() { return kPasses; }

static bool debugEnabled(llvm::StringRef pass) {
  const char *env = std::getenv("PPC_DEBUG_PASSES");
  if (!env)
    return false;
  llvm::SmallVector<llvm::StringRef, 4> names;
  llvm::StringRef(env).split(names, ',');
  for (llvm::StringRef n : names)
    if (n.trim() == "all" || n.trim() == pass)
      return true;
  return false;
}

static void dump(const char *when, llvm::StringRef pass,
                 const torch::jit::Graph &graph) {
  std::ostringstream os;
  os << graph;
  llvm::errs() << "*** IR Dump " << when << " " << pass << " ***\n" << os.str();
}

llvm::Error runPasses(const std::shared_ptr<torch::jit::Graph> &graph,
                      llvm::ArrayRef<std::string> names) {
  for (const std::string &name : names) {
    const PassInfo *info = nullptr;
    for (const PassInfo &p : kPasses)
      if (name == p.name)
        info = &p;
    if (!info) {
      std::vector<std::string> known;
      for (const PassInfo &p : kPasses)
        known.push_back(p.name);
      return makeError("unknown pass '" + name +
                       "'; known passes: " + llvm::join(known, ", "));
    }
    bool debug = debugEnabled(info->name);
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

llvm::Error
runPreparePipeline(const std::shared_ptr<torch::jit::Graph> &graph) {
  std::vector<std::string> names;
  for (const PassInfo &p : kPasses)
    names.push_back(p.name);
  return runPasses(graph, names);
}

} // namespace ppc
