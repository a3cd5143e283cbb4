//===- passes/Passes.h - Graph passes over TorchScript IR -------*- C++ -*-===//
//
// Every pass transforms a torch::jit::Graph in place. Set PPC_DEBUG_PASSES
// to a comma-separated list of pass names (or "all") to print the graph
// before and after those passes on stderr, without rebuilding; a name that
// is no pass is an error rather than silence.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_PASSES_H
#define PPC_PASSES_PASSES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace torch::jit {
struct Graph;
}

namespace ppc {

using GraphPass = void (*)(const std::shared_ptr<torch::jit::Graph> &);

#define PPC_PASS(name, fn, description)                                        \
  void fn(const std::shared_ptr<torch::jit::Graph> &graph);
#include "passes/Passes.def"

/// Runs the named passes in order. Errors: an unknown name ("unknown pass
/// 'x'; known passes: ..."), an unknown name in PPC_DEBUG_PASSES
/// ("PPC_DEBUG_PASSES names unknown pass 'x'; ..."), or a pass that throws.
llvm::Error runPasses(const std::shared_ptr<torch::jit::Graph> &graph,
                      llvm::ArrayRef<std::string> names);

} // namespace ppc

#endif // PPC_PASSES_PASSES_H
