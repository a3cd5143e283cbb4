//===- passes/ExtractStage.h - Materialize one stage of a plan --*- C++ -*-===//
//
// Builds the standalone graph of one stage of a verified PartitionPlan:
// graph inputs are (self, if the model has one, then) the stage's boundary
// inputs in plan order; the body is the stage's items in order, with every
// rematerializable value they need (constants, attribute reads, cheap
// non-tensor values) cloned in front of its first use; the graph returns a
// tuple of the stage's outputs in plan order.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_EXTRACTSTAGE_H
#define PPC_PASSES_EXTRACTSTAGE_H

#include "lib/PartitionPlan.h"

#include "llvm/Support/Error.h"

#include <memory>

namespace ppc {

/// Materializes stage `stage` of `plan`, which must have passed verify().
/// Module-typed values keep the original model's class types; a module
/// builder (lib/StageModule.h) retypes them. Errors: a value the plan does
/// not provide (a broken plan).
llvm::Expected<std::shared_ptr<torch::jit::Graph>>
extractStage(const PartitionPlan &plan, size_t stage);

} // namespace ppc

#endif // PPC_PASSES_EXTRACTSTAGE_H
