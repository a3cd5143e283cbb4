//===- lib/WeightBinding.h - Weights bound from a checkpoint ----*- C++ -*-===//
//
// A program exported on the meta device carries the shapes and dtypes of its
// weights and none of their bytes; a Hugging Face checkpoint (safetensors
// shards, lib/Safetensors.h) carries the bytes under the model's own names.
// A WeightSource binds the one to the other, tensor by tensor, so that
// `ppc split --weights` writes stages that carry their weights and each rank
// of `ppc run/verify/train/generate --weights` reads only its own stage's
// tensors from the shards.
//
// Names. The program's are named_parameters() names; a wrapper module adds a
// prefix ("model." for transformers' decoder wrapper) that the checkpoint's
// names lack. WeightSource::open() takes the dotted prefix (one or two
// components of some program name, or none) under which the checkpoint holds
// the most program weights; names without it (the wrapper's caches) are
// looked up as they are. --weights-prefix names one instead.
//
// What is bound (bind()): every slot whose name, or a name tied to it (the
// program's own ties, or a --weights-tied pair), is in the checkpoint. A
// program exported on the meta device records no ties (torch.export.save
// stores every meta tensor alike), so a weight without data that the
// checkpoint lacks is also taken from the one it ties to by its config.json,
// as transformers ties word embeddings (WeightSource::configTie).
// A slot without data that the checkpoint lacks is an error, except a state
// buffer (written in place, lib/StateBuffers.h), which starts as zeros as a
// static cache does. A slot with data that the checkpoint lacks keeps the
// program's values.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_WEIGHTBINDING_H
#define PPC_LIB_WEIGHTBINDING_H

#include "lib/Manifest.h"
#include "lib/WeightOptions.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ppc {

class StageExecutable;

namespace safetensors {
class Checkpoint;
}

/// One tensor of a program to bind: the names it goes by (tied names
/// included; the first is the one messages use), and what it holds now.
struct WeightSlot {
  std::vector<std::string> names;
  /// The program's tensor: its dtype and shape are what the checkpoint must
  /// match; a meta tensor holds no data.
  at::Tensor current;
  bool isParameter = true;
  /// A state buffer: zeros when neither the program nor the checkpoint has
  /// data for it.
  bool isState = false;
};

/// What a bind() did, for --stats and the tests.
struct WeightReport {
  /// Checkpoint bytes read: used in place (mapped) or copied.
  uint64_t mappedBytes = 0, copiedBytes = 0;
  size_t boundTensors = 0;
  /// State buffers that start as zeros.
  size_t zeroedState = 0;
  /// Weights the checkpoint lacks that its config.json ties to another
  /// (checkpoint names: the missing one, its source).
  std::vector<std::pair<std::string, std::string>> configTies;
};

class WeightSource : public std::enable_shared_from_this<WeightSource> {
public:
  /// Opens the checkpoint and settles the name mapping against
  /// `programNames`, every weight name of the whole program (all stages).
  /// Errors: Checkpoint::open's; "--weights-prefix 'p.' is the prefix of no
  /// weight of the program (such as 'w')"; and, unless ignoreExtra, "checkpoint
  /// 'PATH': tensor 'x' (in SHARD) is not a weight of the program
  /// (--weights-extra ignore skips it)". An empty `programNames` skips the
  /// extra check (a manifest written before ppc split listed weights).
  static llvm::Expected<std::shared_ptr<WeightSource>>
  open(const WeightOptions &options,
       const std::vector<std::string> &programNames);
  ~WeightSource();

  /// The checkpoint's name of program weight `name`.
  std::string checkpointName(llvm::StringRef name) const;
  /// The prefix the program's names carry ("" for none).
  const std::string &prefix() const { return prefix_; }

  /// Binds `slots`, calling `set(name, tensor)` for every name of each
  /// bound slot. With `inPlace`, a tensor is the checkpoint's mapped bytes
  /// where its alignment allows (read-only: for stages that never write
  /// their weights), else a copy. Errors, one line each, naming the tensor
  /// and the shard: "weight 'w' is not in checkpoint 'PATH' (the program
  /// carries no data for it[; its config.json ties word embeddings, but N
  /// tensors have its dtype and shape: 'a', 'b']; if it shares another
  /// weight's tensor, name that one with --weights-tied w=SOURCE)";
  /// "checkpoint 'PATH': tensor 'w' in SHARD is BF16 [4, 8], but the
  /// program's 'w' is float32 [4, 8]"; the checkpoint's own.
  llvm::Expected<WeightReport>
  bind(const std::vector<WeightSlot> &slots,
       const std::function<void(const std::string &, at::Tensor)> &set,
       bool inPlace);

  /// Checkpoint bytes handed out so far, over every bind().
  uint64_t bytesServed() const;

private:
  WeightSource() = default;
  /// The checkpoint tensor that `slot`, a weight without data that the
  /// checkpoint lacks, is tied to by the checkpoint's config.json
  /// ("tie_word_embeddings": true, as transformers saves it): when the
  /// slot is a [vocab_size, N] matrix, the one checkpoint tensor of its
  /// dtype and shape. Errors: bind()'s "weight 'w' is not in checkpoint"
  /// line when there is none (saying so where the config ties and none or
  /// several tensors could be it); a config.json that cannot be read or is
  /// not a JSON object; Checkpoint::find's.
  llvm::Expected<std::string> configTie(const WeightSlot &slot);

  WeightOptions options_;
  /// The config's tied vocabulary size, once read (tiedVocabulary()).
  std::optional<std::optional<int64_t>> tiedVocabulary_;
  std::string prefix_;
  std::unique_ptr<safetensors::Checkpoint> checkpoint_;
};

/// Binds `slots` into `target` (StageExecutable::setWeight): from `weights`
/// as WeightSource::bind() does, or without a checkpoint (null) only zeros
/// for state slots that hold no data. Errors: bind()'s; without a
/// checkpoint "WHO's weight 'w' holds no data (its program was exported
/// without weights): give the checkpoint with --weights" (`who`: "stage 1",
/// "the model"); setWeight's, as "cannot bind WHO's weights: ...".
llvm::Expected<WeightReport> bindInto(StageExecutable &target,
                                      const std::vector<WeightSlot> &slots,
                                      WeightSource *weights, bool inPlace,
                                      llvm::StringRef who);

/// The slots of a loaded stage `info` (its manifest weights, ties across
/// stages from `manifest`, state from info.state), read from `stage`.
std::vector<WeightSlot> stageSlots(const Manifest &manifest,
                                   const StageInfo &info,
                                   const StageExecutable &stage);

/// The slots of every tensor a whole model holds (namedTensors(); `ppc
/// split --weights`, `ppc verify`): tensors shared by several paths are one
/// slot; `stateNames` marks state buffers.
std::vector<WeightSlot> moduleSlots(const StageExecutable &model,
                                    const std::set<std::string> &stateNames);

/// Every weight name of `manifest` (each stage's weights and their ties), for
/// WeightSource::open(); empty when a stage lists none.
std::vector<std::string> manifestWeightNames(const Manifest &manifest);

/// The manifest's name of a dtype (lib/DTypes.def: "float32"), or nullopt
/// for one ppc does not carry: what the split writes and the binding
/// compares. (runtime/exec/TensorMeta.h's dtypeName, a layer up, spells the
/// same for boundary metadata.)
std::optional<std::string> manifestDTypeName(c10::ScalarType type);
/// The safetensors spelling of a dtype ("BF16"), or "" for one the format
/// lacks.
std::string safetensorsDType(c10::ScalarType type);

/// Whether any slot holds no data (a tensor on the meta device: its program
/// was exported without weights).
bool hasMetaTensors(const std::vector<WeightSlot> &slots);

} // namespace ppc

#endif // PPC_LIB_WEIGHTBINDING_H
