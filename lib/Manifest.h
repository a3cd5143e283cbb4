//===- lib/Manifest.h - The stage manifest written by ppc split -*- C++ -*-===//
//
// The manifest is the contract between the compiler (ppc split) and the
// runtime (ppc run, ppc verify, libppc_runtime). It lists the stage files,
// each stage's ordered boundary inputs (with their producers) and outputs
// (with their consumer stages), the model outputs, and tied parameters.
// docs/manifest.md documents the JSON format field by field.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_MANIFEST_H
#define PPC_LIB_MANIFEST_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

/// The kinds of values that may cross a stage boundary (or be a model input
/// or output). Everything else is either rematerialized in the consumer stage
/// (constants, module attributes, cheap non-tensor values) or cannot cross.
enum class ValueKind {
#define PPC_VALUE_KIND(Kind, Name) Kind,
#include "lib/ValueKinds.def"
};

/// The manifest spelling of a kind (lib/ValueKinds.def): "Tensor",
/// "Tensor[]", "Tuple[Tensor]", "int", "float", "bool", "int[]".
llvm::StringRef kindName(ValueKind kind);
std::optional<ValueKind> parseKind(llvm::StringRef name);

/// Where a value comes from: model input `modelInput`, or output `output` of
/// stage `stage`.
struct ValueRef {
  int modelInput = -1;
  int stage = -1;
  int output = -1;

  static ValueRef fromModelInput(int index) { return {index, -1, -1}; }
  static ValueRef fromStage(int stage, int output) {
    return {-1, stage, output};
  }
  bool isModelInput() const { return modelInput >= 0; }
  bool operator==(const ValueRef &o) const {
    return modelInput == o.modelInput && stage == o.stage && output == o.output;
  }
};

/// The most dimensions a recorded shape (ModelInput::shape,
/// StageOutput::shape, StateTensor::shape) may have.
constexpr size_t kMaxShapeDims = 64;

struct ModelInput {
  std::string name;
  ValueKind kind = ValueKind::Tensor;
  /// The static shape the model file records for it ("shape" in JSON: a
  /// .pt2 program's tensor metadata), -1 for a dynamic dimension; empty
  /// when the file records none (TorchScript).
  std::vector<int64_t> shape;
  /// The largest size of each dimension the program admits ("max_shape"
  /// in JSON, only where `shape` has a dynamic dimension with a recorded
  /// bound): `shape`'s size for a static dimension, the range constraint's
  /// maximum for a dynamic one, -1 for an unbounded one. Empty: none
  /// recorded.
  std::vector<int64_t> maxShape;
};

struct StageInput {
  std::string name;
  ValueKind kind = ValueKind::Tensor;
  ValueRef source;
  /// The stage may write to this input in place; a runtime that hands the
  /// same object to several places must give this stage its own copy.
  bool mutated = false;
};

struct StageOutput {
  std::string name;
  ValueKind kind = ValueKind::Tensor;
  /// Later stages that take this output as an input, ascending.
  std::vector<int> consumers;
  /// A readable name ("label" in JSON): the module path of the operation
  /// producing the value and the operation ("layer2.1.relu:relu_1",
  /// "features.3:add", "flatten" for code of the top-level forward), unique
  /// in the manifest. Empty when the manifest does not record one (written
  /// before ppc split recorded labels); displayName() then falls back to
  /// `name`.
  std::string label;
  /// As ModelInput::shape.
  std::vector<int64_t> shape;

  /// The label, or the graph name where there is none.
  const std::string &displayName() const {
    return label.empty() ? name : label;
  }
};

/// A state buffer of a stage (lib/StateBuffers.h): a buffer the stage
/// writes in place, such as a decoder's key cache. A runtime that runs
/// independent sequences through the stage gives each group of them its own
/// copy (StageExecutable::setBuffer).
struct StateTensor {
  /// The buffer's attribute path in the stage module ("layers.0.cache").
  std::string name;
  /// The dtype as lib/DTypes.def spells it ("float32").
  std::string dtype;
  std::vector<int64_t> shape;
  /// The dimension an aten::index_copy_ of the stage writes the buffer
  /// along ("index_dim" in JSON): a cache indexed by position, whose size
  /// there is the positions it holds; -1 when none does.
  int64_t indexDim = -1;
};

/// A parameter or buffer a stage holds ("weights" in JSON): what a rank
/// binds from a checkpoint (--weights) when the stage file carries none (a
/// program exported on the meta device), and what `ppc join --format
/// safetensors` names. One entry per tensor: names that share it within the
/// stage (tied weights) are its `tied` list.
struct StageWeight {
  /// The attribute path in the stage ("layers.0.attn.q_proj.weight").
  std::string name;
  /// As StateTensor::dtype.
  std::string dtype;
  std::vector<int64_t> shape;
  bool isParameter = true;
  /// Other paths of the stage that hold the same tensor.
  std::vector<std::string> tied;
};

struct StageInfo {
  int index = 0;
  /// Path of the stage module, relative to the manifest's directory.
  std::string file;
  std::string sha256;
  int64_t parameterCount = 0; ///< Elements in the stage's parameters.
  int64_t parameterBytes = 0; ///< Bytes of the stage's parameters.
  int64_t bufferBytes = 0;    ///< Bytes of the stage's buffers.
  double predictedCost = 0;   ///< Under the manifest's cost model.
  /// The module path the stage begins at (from --split-at), if any.
  std::string beginsAt;
  /// The module paths whose code the stage runs ("modules" in JSON), in
  /// execution order: for each operation, the shortest path (as in
  /// named_modules()) of a module all of whose operations are in this stage,
  /// each path once ("conv1", "bn1", "relu", "maxpool", "layer1",
  /// "layer2.0"). Operations of the top-level forward add no path. Absent
  /// (nullopt) in manifests written before ppc split recorded it.
  std::optional<std::vector<std::string>> modules;
  std::vector<StageInput> inputs;
  std::vector<StageOutput> outputs;
  /// The stage's state buffers, in the order the stage first touches them
  /// ("state" in JSON, absent when empty).
  std::vector<StateTensor> state;
  /// Every parameter and buffer of the stage, in the stage's order
  /// ("weights" in JSON); absent (nullopt) in manifests written before ppc
  /// split recorded them.
  std::optional<std::vector<StageWeight>> weights;
  /// Optional user-given boundary metadata for the runtime ("meta" in JSON);
  /// interpreted by the runtime, carried through unchanged here.
  std::optional<llvm::json::Value> meta;
};

/// One tensor used by several stages: each stage holds its own copy.
struct TiedParameter {
  struct Use {
    int stage;
    std::string path;
  };
  std::vector<Use> uses;
  int64_t bytes = 0;
};

/// A stage's module paths (StageInfo::modules) for people: joined by ", ",
/// with runs of three or more consecutive indices of one parent shortened
/// to their ends ("conv1, bn1, layer1, features.0 ... features.6,
/// classifier"); "" for none.
std::string describeModules(const std::vector<std::string> &modules);

/// Checks that a stage's file is a non-empty relative path without '..', so
/// resolved against the manifest's directory it stays inside it. Errors:
/// "manifest: stages[1].file '../x.pt' leaves the manifest's directory",
/// "manifest: stages[1].file '/x.pt' is absolute; stage files must be
/// relative to the manifest's directory", "manifest: stages[1].file is
/// empty".
llvm::Error checkStageFile(const StageInfo &stage);

/// How a file's bytes differ from what a manifest records of them, for a
/// message: "N bytes, the manifest says M" when `expectedSize` is given and
/// differs, else "sha256 HASH != EXPECTED" with both hashes cut to the first
/// 12 hex digits or, where they share those, to one past the first that
/// differs (the manifest's text escaped: it is untrusted).
std::string contentMismatch(uint64_t size, llvm::StringRef sha256,
                            std::optional<uint64_t> expectedSize,
                            llvm::StringRef expectedSha256);

struct Manifest {
  /// The version this ppc writes; it reads every version from 1 on.
  static constexpr int kSchemaVersion = 2;

  int schemaVersion = kSchemaVersion;
  /// The model format of the source and the stage files: a name of
  /// lib/ModelFormats.def ("torchscript"; what version 1 implies).
  std::string format = "torchscript";
  std::string sourcePath;
  uint64_t sourceSize = 0;
  std::string sourceSha256;
  std::string costModel;
  std::vector<ModelInput> modelInputs;
  std::vector<StageInfo> stages;
  std::vector<ValueRef> modelOutputs;
  /// Whether the model returns a tuple of `modelOutputs` (otherwise it
  /// returns modelOutputs[0] alone).
  bool outputIsTuple = false;
  std::vector<TiedParameter> tiedParameters;

  llvm::json::Value toJSON() const;

  /// Checks a parsed manifest and converts it. Errors: the schema version
  /// is not in 1..kSchemaVersion; a version 2 manifest names a format
  /// this ppc does not register; a field is missing, of the wrong type, out of
  /// range (every integer is checked before narrowing: indices fit an int,
  /// counts and bytes are non-negative) or a source names both a model input
  /// and a stage, reported with its JSON path in llvm::json's form
  /// ("missing value at manifest.stages[1].inputs[0].source"); and anything
  /// verify() rejects.
  static llvm::Expected<Manifest> fromJSON(const llvm::json::Value &json);

  /// Parses manifest text: JSON with at most kMaxJSONDepth levels of
  /// nesting, then fromJSON(). `name` (usually the file's path) prefixes
  /// every message. Errors: "manifest 'NAME' is not valid JSON: ...",
  /// "manifest 'NAME' nests deeper than 256 levels", and fromJSON()'s
  /// errors as "NAME: ...".
  static llvm::Expected<Manifest> parse(llvm::StringRef text,
                                        llvm::StringRef name);

  /// Reads and parses the manifest at `path`, reading it once: a regular
  /// file of at most kMaxManifestBytes (readFileBounded). If `sha256` is
  /// given, it receives the lower-case hex SHA-256 of exactly the bytes that
  /// were parsed. Errors: readFileBounded's ("cannot read manifest 'PATH':
  /// ...", "manifest 'PATH' is not a regular file (a FIFO)", "... over the
  /// limit of N") and parse()'s with NAME = `path`.
  static llvm::Expected<Manifest> load(llvm::StringRef path,
                                       std::string *sha256 = nullptr);

  /// Writes the manifest to `path` atomically (temporary file, then rename).
  llvm::Error save(llvm::StringRef path) const;

  /// Checks internal consistency, the rules of docs/manifest.md: at least
  /// one stage and one model output; stages[i].index == i; stage files are
  /// non-empty relative paths without '..' (confined to the manifest's
  /// directory); no negative counts, bytes or costs; every input refers to a
  /// model input or an output of an earlier stage, of the input's own kind,
  /// and never to both; consumer lists are strictly ascending and name
  /// exactly the later stages that take each output; model outputs refer to
  /// real values; tied parameters have non-negative bytes and at least two
  /// uses, each naming an existing stage; state tensors have non-empty
  /// names, unique in their stage, a dtype of lib/DTypes.def, at most
  /// kMaxShapeDims non-negative dimensions and a byte size that fits in 63
  /// bits. Errors name the first offending
  /// entry ("manifest: stages[1].inputs[0] is a Tensor but output 0 of stage
  /// 0 is a int").
  llvm::Error verify() const;

  /// A chain of `n` (at least 1) stages with no files behind them: stage
  /// k's one Tensor input "x" is stage k-1's one Tensor output "y" (stage
  /// 0's is model input "x"), and the last stage's is the model output. It
  /// stands for any model split into `n` stages where only the stage graph
  /// matters (`ppc schedule` without --manifest, tests).
  static Manifest chain(int n);

  /// The output a reference names (must be a stage reference).
  const StageOutput &output(const ValueRef &ref) const {
    return stages[ref.stage].outputs[ref.output];
  }
};

} // namespace ppc

#endif // PPC_LIB_MANIFEST_H
