//===- runtime/train/Checkpoint.h - Training checkpoints on disk ----------===//
//
// The layout and the rules of `ppc train --checkpoint-dir DIR`
// (docs/training.md "Checkpoints and resuming"). DIR holds one directory per
// checkpoint, DIR/step-<8-digit step>/, written by Trainer::saveCheckpoint
// through Trainer::save's staged-directory protocol (runtime/train/Save.h:
// it appears under its name only when whole) and holding:
//   manifest.json, the stage files   what --save writes: `ppc run`,
//                                    `ppc train` and `ppc join` read them;
//   optim.stage<S>.pt                stage S's optimizer state, a dict from
//                                    "PATH#FIELD" (parameter path, state
//                                    field: momentum_buffer; step, exp_avg,
//                                    exp_avg_sq, max_exp_avg_sq) to a
//                                    tensor (step: an int64 scalar);
//   rng.rank<R>.pt                   rank R's generators: {"cpu": state,
//                                    "DEVICE": state where it trains on one};
//   checkpoint.json                  written last, by rank 0: the format,
//                                    step, data position, optimizer
//                                    settings, stage and rank counts, and
//                                    the SHA-256 of every other file.
// A checkpoint is complete when its checkpoint.json loads and every file
// it lists has its hash; nothing else is ever resumed from. Staged
// directories ("step-N.tmp-HOST-PID-XXXXXX") and step directories without
// a checkpoint.json (a removal cut short) are parts, never checkpoints.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_TRAIN_CHECKPOINT_H
#define PPC_RUNTIME_TRAIN_CHECKPOINT_H

#include "runtime/train/OptimizerKind.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
} // namespace torch::optim

namespace ppc {

/// The checkpoint.json file name, and the number of checkpoints --keep
/// leaves by default.
constexpr const char *kCheckpointFile = "checkpoint.json";
constexpr int kDefaultCheckpointKeep = 3;

/// "step-00000004", the directory of the checkpoint after step `step`.
std::string checkpointDirName(int step);
/// The step of a checkpoint directory's name, nullopt for any other name.
std::optional<int> parseCheckpointDirName(llvm::StringRef name);
/// File names inside a checkpoint: "optim.stage1.pt", "rng.rank0.pt".
std::string optimizerFileName(int stage);
std::string rngFileName(int rank);

/// What checkpoint.json records.
struct CheckpointInfo {
  /// The steps done; the next step reads batch `dataIndex` of the data
  /// (step s reads batch (s - 1) mod the batches).
  int step = 0;
  int64_t dataIndex = 0;
  int stages = 0;
  int worldSize = 0;
  OptimizerKind optimizer = OptimizerKind::SGD;
  double lr = 0, momentum = 0, weightDecay = 0;
  /// Every other file of the checkpoint (a path relative to it) and its
  /// SHA-256.
  std::map<std::string, std::string> files;
};

/// checkpoint.json's text for `info`.
std::string checkpointJSON(const CheckpointInfo &info);
/// Reads `dir`/checkpoint.json. Errors, naming the file: it is missing,
/// is not JSON or nests deeper than kMaxJSONDepth (lib/SafeRead.h), or
/// lacks a field or has one of the wrong type or out of range (counts and
/// steps are ints: "checkpoint file 'c' lacks step, batches_done, stages
/// or world_size (integers from 0 to 2147483647)"; stages and world_size
/// from 1).
llvm::Expected<CheckpointInfo> readCheckpointInfo(llvm::StringRef dir);
/// Checks every file checkpoint.json lists against its hash, and that it
/// lists every file the checkpoint must hold, which follows from its
/// manifest, optimizer and ranks, never from the list: the manifest, each
/// stage file, optim.stage<S>.pt of each stage with parameters, and
/// rng.rank<R>.pt of each rank R below world_size. Errors: "the
/// checkpoint 'ck/step-00000008' is corrupt: 'ck/step-00000008/stage_1.pt'
/// does not match its sha256 in checkpoint.json" (or "is missing", "is not
/// listed in checkpoint.json", "its checkpoint.json says 3 stages, its
/// manifest 2").
llvm::Error verifyCheckpoint(llvm::StringRef dir, const CheckpointInfo &info);

/// A checkpoint chosen to resume from.
struct ChosenCheckpoint {
  std::string path;
  CheckpointInfo info;
};
/// The newest complete checkpoint in `dir`, verified: the step directory
/// with the highest step whose checkpoint.json loads (staged directories
/// and step directories without one are ignored). `dir` may also be one
/// step directory itself. Errors: `dir` is no directory; it holds no
/// checkpoint ("OPTION 'ck' holds no complete checkpoint", OPTION being
/// `option`); the newest
/// one fails verifyCheckpoint: refused, not skipped, naming the file and
/// the newest older one that verifies ("...; the newest complete one is
/// 'ck/step-00000004': remove 'ck/step-00000008' to resume from it").
llvm::Expected<ChosenCheckpoint> findNewestCheckpoint(llvm::StringRef dir,
                                                      llvm::StringRef option);

/// What a refusal of checkpoint `refused` in `dir` adds, naming the newest
/// older one that verifies: "; the newest complete one is
/// 'ck/step-00000004': remove the corrupt one to resume from it", or "; no
/// older checkpoint is complete". Empty when `dir` is one checkpoint
/// itself.
std::string olderCheckpointNote(llvm::StringRef dir, llvm::StringRef refused);

/// Whether `dir`, a directory to write checkpoints into, holds only ppc's:
/// step directories and their staged parts, each holding only checkpoint
/// files. Errors, naming `option` and the entry: "OPTION 'ck'
/// holds 'notes.txt', which is not a ppc checkpoint; refusing to write
/// checkpoints there". A missing `dir` is fine.
llvm::Error checkCheckpointDirectory(llvm::StringRef dir,
                                     llvm::StringRef option);
/// Whether the step directory `dir` holds only checkpoint files (so that
/// replacing or removing it deletes nothing of the user's).
llvm::Error checkCheckpointContents(llvm::StringRef dir);
/// Removes the parts that killed runs left in `dir`: staged step
/// directories of dead processes of this host (StagedDirectory's rule) and
/// step directories without a checkpoint.json that hold only checkpoint
/// files. Never fails: what cannot be removed stays for the next call.
void removeCheckpointParts(llvm::StringRef dir);
/// After checkpoint `newest` committed: removes the complete checkpoints
/// older than the `keep` newest (checkpoint.json first, so that one cut
/// short is a part, never a checkpoint). Returns the directories removed.
std::vector<std::string> pruneCheckpoints(llvm::StringRef dir, int keep,
                                          int newest);

/// An output of a command: the option naming it, its path ("" when not
/// given), and whether it is a directory the command replaces whole.
struct CommandOutput {
  std::string option, path;
  bool isDirectory = false;
};
/// Refuses, before a command that reads checkpoints starts, outputs that
/// would land on or inside them: `source` (named `what` in messages: the
/// --resume directory, ppc join's argument) when it is a directory of
/// checkpoints or one checkpoint, or the checkpoint holding the file
/// `source` (a manifest.json beside a checkpoint.json); nothing for any
/// other file. Paths are compared on disk: by real path (a file not
/// written yet by the real path of its directory), and an existing output
/// file by its identity (a hard link). Errors, one line, each output
/// named by its CommandOutput::option and `source` by `what` (in `ppc
/// train`, the flags: OUTPUT --log-file, --save or --trace; WHAT --resume):
///   "OUTPUT 'ck/step-00000004/checkpoint.json' is inside WHAT 'ck';
///    refusing to write into a checkpoint"
///   "OUTPUT 'runs' holds WHAT 'runs/ck'; refusing to write into a
///    checkpoint"
///   "OUTPUT 't.json' is a link to 'ck/step-00000004/optim.stage0.pt' of
///    WHAT 'ck'; refusing to write into a checkpoint"
llvm::Error
checkOutputsOutsideCheckpoints(llvm::StringRef source, llvm::StringRef what,
                               llvm::ArrayRef<CommandOutput> outputs);

/// A manifest `ppc join` reads for `path`: `path` itself when it is a
/// file, else the manifest of the newest complete checkpoint in the
/// directory `path` (findNewestCheckpoint's errors), or of `path` itself
/// when it is an earlier --save directory.
llvm::Expected<std::string> manifestForJoin(llvm::StringRef path);

/// The optimizer state of `params` (path, tensor: one stage's parameters),
/// keyed "PATH#FIELD" (CPU tensors). A parameter without state is left out.
llvm::Expected<c10::Dict<std::string, at::Tensor>>
optimizerStateOf(const torch::optim::Optimizer &optimizer, OptimizerKind kind,
                 const std::vector<std::pair<std::string, at::Tensor>> &params);
/// Puts `state` (optimizerStateOf's) back into `optimizer` for `params`,
/// as it is: nothing is converted. `expectState`: the optimizer that wrote
/// it keeps state (Adam, AdamW, SGD with momentum), so it may not be empty.
/// `what` names the file in messages. Errors: a key of no parameter, an
/// unknown field, a tensor of another dtype, shape or layout than its
/// parameter's (the step: not an int64 scalar from 0), a parameter that
/// lacks a field its optimizer keeps ("'f' holds no 'fc.bias#exp_avg_sq'"),
/// no state at all ("'f' holds no optimizer state").
llvm::Error
setOptimizerState(torch::optim::Optimizer &optimizer, OptimizerKind kind,
                  const std::vector<std::pair<std::string, at::Tensor>> &params,
                  const c10::Dict<std::string, at::Tensor> &state,
                  bool expectState, llvm::StringRef what);

/// The CPU generator's state, and `device`'s when it is not the CPU.
c10::Dict<std::string, at::Tensor> rngStateOf(const c10::Device &device);
/// Sets the generators rngStateOf saved (those this process has).
llvm::Error setRngState(const c10::Dict<std::string, at::Tensor> &state);

/// Writes `state` as torch.save does (saveValue), and reads it back as
/// untrusted input (loadNamedTensors, lib/TensorIO.h: the pickle and every
/// tensor checked before use).
llvm::Error saveTensorDict(llvm::StringRef path,
                           const c10::Dict<std::string, at::Tensor> &state);
llvm::Expected<c10::Dict<std::string, at::Tensor>>
loadTensorDict(llvm::StringRef path);

} // namespace ppc

#endif // PPC_RUNTIME_TRAIN_CHECKPOINT_H
