//===- passes/CostModel.h - Static cost of each item ------------*- C++ -*-===//
//
// The partitioner balances stage costs under one of these models:
//  - params: bytes of the parameters and buffers an item reads, counted at
//    the first item that reads each tensor (balances memory).
//  - flops: estimated floating-point operations of the item on an example
//    input: 2*M*N*K for linear/matmul/bmm/addmm, 2*out*(Cin/groups*kernel)
//    for convolutions, the output size for everything else (balances time).
//    Shapes come from runs of the model graph on the example input. Control
//    flow is counted by what it runs on that input: a prim::If counts the
//    operations of the branch its condition takes (the condition recorded
//    in the run, or a constant or module attribute such as
//    `self.use_res_connect`), a prim::Loop whose trip count the run records
//    and whose body always continues counts its body once per iteration
//    (at most kMaxUnrolledIterations). Control flow it cannot resolve that
//    way (a `while` loop, more iterations, a branch inside such a loop) is
//    counted by its output size alone: the item is "uncounted" and says
//    which of its operations are left out (see itemCosts()).
//  - nodes: 1 per item (for graphs without weights, e.g. golden tests).
//  - profile: measured nanoseconds of the item on this machine, on an
//    example input (passes/ProfileItems.h).
//
// For a cap on stage memory, stageMemoryModel() describes what a stage
// holds: the parameters and buffers its items read, and the activations of
// one microbatch, measured on the example input (which should therefore be
// one microbatch): the bytes of the new tensor storage each item's tensor
// outputs hold (views and in-place results of earlier storage add nothing).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PASSES_COSTMODEL_H
#define PPC_PASSES_COSTMODEL_H

#include "lib/ItemGraph.h"
#include "lib/Partitioner.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

enum class CostKind {
#define PPC_COST_MODEL(Kind, Name, NeedsExample) Kind,
#include "passes/CostModels.def"
};

/// Every cost kind, in the order --help lists them.
inline constexpr CostKind kAllCostKinds[] = {
#define PPC_COST_MODEL(Kind, Name, NeedsExample) CostKind::Kind,
#include "passes/CostModels.def"
};

/// Whether the kind runs the model on an example input (and so can measure
/// activations).
bool needsExampleInput(CostKind kind);

/// The name of a kind on the command line and in the manifest's cost_model.
llvm::StringRef costKindName(CostKind kind);

/// The kind with that name, or nullopt.
std::optional<CostKind> parseCostKind(llvm::StringRef name);

/// The most loop iterations the flops model unrolls to count a loop.
inline constexpr int64_t kMaxUnrolledIterations = 256;

/// The shape a model's file recorded for a value of its graph, at the
/// example it was made with (ModelFormat::exampleShape), or nullopt.
using ShapeOf = std::function<std::optional<std::vector<int64_t>>(
    const torch::jit::Value &)>;

/// Cost of each item of `graph` (which was built from `module`'s forward).
/// `example` is required for CostKind::Flops and CostKind::Profile and
/// holds the model inputs, checked with checkExampleInput(). With
/// `uncounted` and CostKind::Flops, it receives one entry per item: empty
/// when the model counted all of the item's operations, else what it left
/// out of a multiply-accumulate heavy kind (convolution, matmul, linear)
/// inside control flow it could not resolve ("aten::linear x2 in a
/// prim::Loop without a known trip count"); for other kinds it is cleared.
/// Errors: flops or profile without an example input ("the profile cost
/// model needs an example input (--example-input IN.pt)"), or the example
/// run failing ("cannot run the model on the example input: ...").
/// With `recorded` (a module without weights, which cannot run), the flops
/// are counted without running it, on the shapes `recorded` gives (a .pt2
/// program's, at its export example); "--cost flops needs the weights of a
/// model that has none and records no shapes: ..." when it gives none.
llvm::Expected<std::vector<int64_t>>
itemCosts(const ItemGraph &graph, const torch::jit::Module *module,
          CostKind kind, const std::vector<c10::IValue> *example,
          std::vector<std::string> *uncounted = nullptr,
          const ShapeOf &recorded = nullptr);

/// Checks that `example` fits the model inputs of `graph` as ppc run checks
/// its inputs. Errors: "the model takes 2 inputs, got 1"; "model input 0
/// ('x') must be a Tensor, got a TensorList".
llvm::Error checkExampleInput(const ItemGraph &graph,
                              const std::vector<c10::IValue> &example);

/// What each stage of `graph` would hold (lib/Partitioner.h): the tensors
/// of `module` each item reads, and each item's activation bytes from one
/// run on `example`. Errors: the example run failing, or attributes that do
/// not resolve ("cannot read the model's parameters: ...").
llvm::Expected<StageMemoryModel>
stageMemoryModel(const ItemGraph &graph, const torch::jit::Module &module,
                 const std::vector<c10::IValue> &example);

} // namespace ppc

#endif // PPC_PASSES_COSTMODEL_H
