//===- lib/Pt2Program.h - torch.export programs (.pt2) ----------*- C++ -*-===//
//
// The three halves of the .pt2 format behind lib/Pt2Format.cpp, each in its
// own file, all built only against LibTorch 2.x (PPC_HAVE_PT2,
// cmake/Torch.cmake):
//
//  - Pt2Archive.cpp reads an archive written by torch.export.save (and by
//    ppc) into a Pt2Program, checking it as untrusted input, and writes one.
//  - Pt2Lower.cpp lowers a program into ppc's graph: a TorchScript IR graph
//    of the same aten ops over a module holding the weights under their
//    fully qualified names (FQNs).
//  - Pt2Stage.cpp writes the program of one stage: the model's nodes that
//    the stage graph computes, its own weights, and the metadata of every
//    value copied from the model.
//
// The program is kept twice: as parsed JSON (what stage programs copy nodes
// and metadata from, verbatim) and as PyTorch's own schema types
// (torch/csrc/utils/generated_serialization_types.h), what the lowering
// reads.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_PT2PROGRAM_H
#define PPC_LIB_PT2PROGRAM_H

#ifndef PPC_HAVE_PT2
#error "lib/Pt2Program.h needs LibTorch 2.x (PPC_HAVE_PT2)"
#endif

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/utils/generated_serialization_types.h>

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ppc::pt2 {

namespace schema = torch::_export;

/// The schema major version ppc reads (torch/_export/serde/schema.py's
/// SCHEMA_VERSION); like PyTorch, any minor version of it.
constexpr int64_t kSchemaMajor = 8;
/// The archive_version ppc reads and writes.
constexpr llvm::StringLiteral kArchiveVersion = "0";

/// A program's SymInt and SymBool arithmetic (Python's operator module,
/// "_operator.mul") and the JIT int op it lowers to ("aten::mul.int"):
/// lowerPt2 reads the table one way, stageProgram the other.
struct SymIntOp {
  llvm::StringLiteral target, jit;
};
inline constexpr SymIntOp kSymIntOps[] = {
    {"_operator.add", "aten::add.int"},
    {"_operator.sub", "aten::sub.int"},
    {"_operator.mul", "aten::mul.int"},
    {"_operator.floordiv", "aten::floordiv.int"},
    {"_operator.mod", "aten::remainder.int"},
    {"_operator.neg", "aten::neg.int"},
    {"_operator.eq", "aten::eq.int"},
    {"_operator.ne", "aten::ne.int"},
    {"_operator.lt", "aten::lt.int"},
    {"_operator.le", "aten::le.int"},
    {"_operator.gt", "aten::gt.int"},
    {"_operator.ge", "aten::ge.int"},
};

/// A parameter, buffer or tensor constant under its FQN. Tensors that the
/// archive stores once for several FQNs (tied weights) are one at::Tensor.
struct Pt2Tensor {
  std::string fqn;
  at::Tensor tensor;
  bool isParameter = false;
};

struct Pt2Program {
  /// The program's name inside the archive ("model": models/model.json).
  std::string name;
  nlohmann::json json;
  schema::ExportedProgram program;
  /// Parameters and buffers (data/weights), by FQN in the config's order.
  std::vector<Pt2Tensor> weights;
  /// Tensor constants (data/constants), by name.
  std::vector<Pt2Tensor> constants;
};

/// The symbol a size expression is, bare ("s77") or as sympy prints one
/// ("Symbol('s77', positive=True, integer=True)"); "" for a compound one.
llvm::StringRef bareSymbol(llvm::StringRef expr);

/// Dtypes between the schema's enum and LibTorch's; nullopt for those ppc
/// does not read (float8, unsigned wider than 8 bits).
std::optional<c10::ScalarType> torchScalarType(schema::ScalarType t);
std::optional<schema::ScalarType> schemaScalarType(c10::ScalarType t);

/// Reads the archive `bytes` (named `path` in errors). Every error is one
/// line naming the file and what is wrong: not a zip or not a .pt2
/// (archive_format), an archive_version or schema major version ppc does not
/// read, no program or several, JSON that does not parse, nests too deeply
/// or does not match the schema, a weight whose record is missing or holds
/// fewer bytes than its config says, an unsupported dtype, layout or pickled
/// weight, records that declare more than the archive may inflate to
/// (checkZipInflation, lib/SafeRead.h; checked before any is read), a range
/// constraint that torch.export.load refuses (minimum above maximum, or
/// without the symbol's example value) or that lets a size go negative.
/// Each weight is a view of its record's bytes as the config gives it
/// (strides, offset), never a larger copy. With an `owner` (what keeps
/// `bytes` alive, and writable: a copy-on-write mapping or a heap buffer),
/// the view is of `bytes` in place wherever a record is stored
/// uncompressed and aligned, and holds `owner`; without one, of a copy.
llvm::Expected<Pt2Program> readPt2(llvm::StringRef bytes, llvm::StringRef path,
                                   std::shared_ptr<const void> owner = nullptr);

/// Writes an archive that torch.export.load and readPt2 read: `programJson`
/// as models/NAME.json and each tensor's whole storage (once per storage and
/// dtype) with its sizes, strides and offset, as torch.export.save does, so
/// an expanded weight stays as small as its storage. A storage viewed in a
/// mapped file is paged out once written (lib/MappedTensor.h). Throws as
/// LibTorch does (c10::Error, std::exception).
void writePt2(std::ostream &out, const std::string &name,
              const nlohmann::json &programJson,
              const std::vector<Pt2Tensor> &weights,
              const std::vector<Pt2Tensor> &constants);

/// ppc's graph of a program: a module holding every weight and constant
/// under its FQN (tied weights are one tensor under several FQNs), and a
/// forward graph whose first input is that module.
struct Lowered {
  torch::jit::Module module;
  std::shared_ptr<torch::jit::Graph> graph;
};

/// Lowers `program`. Errors, each naming the node: an operator this LibTorch
/// does not have, an argument of a kind ppc does not lower, a use of an
/// undefined value, inputs or outputs ppc does not support (keyword inputs,
/// non-tensor inputs, nested outputs, tokens, gradient outputs).
llvm::Expected<Lowered> lowerPt2(const Pt2Program &program,
                                 llvm::StringRef path);

/// The program of stage `index`, computed by `graph` (a stage graph of a
/// lowered model, passes/ExtractStage.h: first input the module, outputs a
/// tuple) over `tensors` (the attributes it reads): the model's nodes it
/// computes, copied with their metadata, the model's tensor metadata of its
/// values, and a signature lifting `tensors` under their FQNs. Errors: a
/// node or value the model does not have (a pass made it), named.
llvm::Expected<nlohmann::json>
stageProgram(const Pt2Program &model, const torch::jit::Graph &graph,
             const std::vector<Pt2Tensor> &tensors, int index);

} // namespace ppc::pt2

#endif // PPC_LIB_PT2PROGRAM_H
