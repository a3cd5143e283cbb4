//===- lib/ModelFormat.h - The model-format seam ----------------*- C++ -*-===//
//
// A model format (TorchScript, torch.export's .pt2) is one
// ModelFormat, the frontend, and one StageExecutable (lib/StageExecutable.h),
// what its files run as. Formats register in lib/ModelFormats.def.
//
// The format is chosen once, at the top: for a model file by its contents
// (readModelFile(), as llvm-objcopy picks a binary format), for a split by
// the manifest's "format" (formatOf()). Everything below works on ppc's
// graph (ModelGraph) or on StageExecutables and never asks which format it
// is.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_MODELFORMAT_H
#define PPC_LIB_MODELFORMAT_H

#include "lib/SafeRead.h"
#include "lib/StageExecutable.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ppc {

struct Manifest;

/// ppc's graph of a model, what a frontend lowers its files into: a forward
/// graph in TorchScript IR whose first input is `module`, the object that
/// holds the attributes (parameters, buffers, submodules) the graph reads by
/// name. The passes and the partitioner work on it alone.
struct ModelGraph {
  torch::jit::Module module;
  /// A copy the caller owns and may transform.
  std::shared_ptr<torch::jit::Graph> graph;
  /// What the format's buildStage needs of the model besides the module
  /// (the .pt2 frontend: the program it copies nodes and metadata from);
  /// opaque to everything else, null for TorchScript.
  std::shared_ptr<const void> formatData;
};

/// A tensor attribute (parameter, buffer or plain tensor) a stage holds.
struct StageTensor {
  std::string path;
  at::Tensor tensor;
  bool isParameter;
};

/// A stage built in memory, before anything is written.
struct BuiltStage {
  std::unique_ptr<StageExecutable> executable;
  std::vector<StageTensor> tensors;
};

/// What a format is shown of a file to say whether it is one of its own.
struct FileProbe {
  llvm::StringRef bytes;
  /// The record names when the file is a PyTorch zip archive (the container
  /// of TorchScript and .pt2 files); empty when it is not one.
  std::vector<std::string> zipRecords;
};

class ModelFormat {
public:
  virtual ~ModelFormat();

  /// The manifest's name for the format ("torchscript").
  virtual llvm::StringRef name() const = 0;
  /// How messages name the format's files ("a TorchScript module").
  virtual llvm::StringRef displayName() const = 0;
  /// The stage files' extension (".pt").
  virtual llvm::StringRef stageExtension() const = 0;

  /// Whether `file` looks like one of this format's files, by its contents
  /// alone; loading may still fail.
  virtual bool recognizes(const FileProbe &file) const = 0;

  /// Lowers the model file `file` (named `path` in errors) into ppc's
  /// graph. Tensors may view the file's bytes in place and share the
  /// buffer (lib/MappedTensor.h). Errors: the file does not load, or has no
  /// forward computation.
  virtual llvm::Expected<ModelGraph> loadModel(const FileBuffer &file,
                                               llvm::StringRef path) const = 0;

  /// The passes (passes/Passes.def) ppc split runs, in order, on the graphs
  /// loadModel() makes, before it analyses them.
  virtual std::vector<std::string> preparePasses() const = 0;

  /// Builds stage `index` from its graph (passes/ExtractStage.h), whose
  /// first input is `model.module`; `graph` is consumed. The stage keeps the
  /// model's attribute paths, so its parameters and buffers go back to the
  /// model under the same names (lib/Join.h).
  virtual llvm::Expected<BuiltStage>
  buildStage(const ModelGraph &model, std::shared_ptr<torch::jit::Graph> graph,
             int index) const = 0;

  /// Loads a file of this format (a stage, or a whole model) to run it,
  /// training flag as saved; its tensors may view `file` in place, as
  /// loadModel's. Errors: the bytes do not load.
  virtual llvm::Expected<std::unique_ptr<StageExecutable>>
  loadExecutable(const FileBuffer &file, llvm::StringRef path) const = 0;

  /// The static shape `model`'s file records for `value` of its graph (a
  /// .pt2 program's tensor metadata, by the value's name), -1 for a dynamic
  /// dimension; nullopt when it records none (TorchScript).
  virtual std::optional<std::vector<int64_t>>
  staticShape(const ModelGraph &model, const torch::jit::Value &value) const {
    return std::nullopt;
  }

  /// The shape `model`'s file records for `value` at the example it was
  /// made with: as staticShape(), with each dynamic dimension at its
  /// example value (a .pt2 symbol's hint); nullopt when the file records
  /// none, or a dimension without its example value.
  virtual std::optional<std::vector<int64_t>>
  exampleShape(const ModelGraph &model, const torch::jit::Value &value) const {
    return std::nullopt;
  }

  /// The largest shape `model`'s program admits for `value`: as
  /// staticShape(), with each dynamic dimension at its symbol's recorded
  /// maximum (-1: unbounded, or not a plain symbol); nullopt when the file
  /// records no shape.
  virtual std::optional<std::vector<int64_t>>
  largestShape(const ModelGraph &model, const torch::jit::Value &value) const {
    return std::nullopt;
  }

  /// Pays the format's one-time costs of running in this process now (a
  /// rank calls it while loading its stages); never fails.
  virtual void warmUp() const = 0;
};

/// The formats of ModelFormats.def, in order.
llvm::ArrayRef<const ModelFormat *> modelFormats();

/// The format with manifest name `name`, or null.
const ModelFormat *findModelFormat(llvm::StringRef name);

/// The format a verified manifest names (Manifest::fromJSON refuses a
/// format that is not registered).
const ModelFormat &formatOf(const Manifest &manifest);

/// A model file mapped once (mapFileBounded), with the format that
/// recognised it.
struct ModelFile {
  FileBuffer buffer;
  const ModelFormat *format;
  llvm::StringRef bytes() const { return buffer->getBuffer(); }
};

/// Maps the model at `path` once as a regular file of at most
/// kMaxStageFileBytes and picks its format by content. Errors: the file is
/// missing or is not a regular file (mapFileBounded's); no format
/// recognises it (one line naming the file and every known format, with the
/// zip reader's reason when it is not a readable archive).
llvm::Expected<ModelFile> readModelFile(llvm::StringRef path);

} // namespace ppc

#endif // PPC_LIB_MODELFORMAT_H
