//===- lib/JoinSafetensors.h - Weights as HF shards -------------*- C++ -*-===//
//
// `ppc join --format safetensors`: the weights of a manifest's stages (trained
// by `ppc train --save`, or bound from --weights) written back to the
// ecosystem as save_pretrained writes them: safetensors shards with
// model.safetensors.index.json, under the model's own names, so that
// transformers' from_pretrained (with the model's config.json beside them)
// loads them.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_JOINSAFETENSORS_H
#define PPC_LIB_JOINSAFETENSORS_H

#include "lib/WeightOptions.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ppc {

struct SafetensorsJoin {
  /// The directory to write (created; refused when it holds shards already).
  std::string outputDir;
  /// A new shard starts before a tensor that would take the current one
  /// past this (transformers' max_shard_size; its default, 5 GB).
  uint64_t maxShardBytes = 5'000'000'000;
  /// The prefix to drop from the program's names (a wrapper's "model.");
  /// nullopt: the first dotted component every written name shares, when
  /// there are two names or more and what follows it never starts with a
  /// digit (`layers.0.weight` is a ModuleList's own name).
  std::optional<std::string> prefix;
  /// Where stages without data get their weights (lib/WeightBinding.h).
  WeightOptions weights;
};

struct SafetensorsJoinReport {
  size_t stages = 0, tensors = 0, shards = 0;
  uint64_t bytes = 0;
  /// The prefix dropped from the names ("" for none).
  std::string prefix;
};

/// Loads each stage of the manifest at `manifestPath` (Stage::load, hashes
/// checked) and writes its parameters and registered buffers, each tensor
/// once (a tied tensor under its first name; state buffers and a program's
/// lifted constants are not weights of the model and are left out) with
/// safetensors::writeCheckpoint. Errors: Manifest::load's, Stage::load's,
/// WeightSource's, writeCheckpoint's, "--weights-prefix 'p.' is the prefix
/// of no weight of the stages", and "stage 1's 'w' has dtype complex64,
/// which safetensors does not hold". On any error nothing is left in the
/// output directory.
llvm::Expected<SafetensorsJoinReport>
joinToSafetensors(llvm::StringRef manifestPath, const SafetensorsJoin &join);

} // namespace ppc

#endif // PPC_LIB_JOINSAFETENSORS_H
