//===- passes/CostModel.h - Static cost of each item ------------*- C++ -*-===//
//
// The partitioner balances stage costs under one of these models:
//  - params: bytes of the parameters and buffers an item reads, counted at
//    the first item that reads each tensor (balances memory).
//  - flops: estimated floating-point operations of the item on an example
//    input: 2*M*N*K for linear/matmul/bmm/addmm, 2*out*(Cin/groups*kernel)
//    for convolutions, the output size for everything else (balances time).
//    Shapes come from one run of the model graph on the example input.
//  - nodes: 1 per item (for graphs without weights, e.g. golden tests).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_COSTMODEL_H
#define PPC_PASSES_COSTMODEL_H

#include "lib/ItemGraph.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <torch/csrc/jit/api/module.h>

#include <optional>
#include <vector>

namespace ppc {

enum class CostKind { Params, Flops, Nodes };

/// Every cost kind, in the order --help lists them.
inline constexpr CostKind kAllCostKinds[] = {CostKind::Params, CostKind::Flops,
                                             CostKind::Nodes};

/// The name of a kind on the command line and in the manifest's cost_model.
llvm::StringRef costKindName(CostKind kind);

/// The kind with that name, or nullopt.
std::optional<CostKind> parseCostKind(llvm::StringRef name);

/// Cost of each item of `graph` (which was built from `module`'s forward).
/// `example` is required for CostKind::Flops and holds the model inputs.
/// Errors: flops without an example input, or the example run failing
/// ("cannot run the model on the example input: ...").
llvm::Expected<std::vector<int64_t>>
itemCosts(const ItemGraph &graph, const torch::jit::Module *module,
          CostKind kind, const std::vector<c10::IValue> *example);

} // namespace ppc

#endif // PPC_PASSES_COSTMODEL_H
