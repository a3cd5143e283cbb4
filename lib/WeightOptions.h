//===- lib/WeightOptions.h - What names a checkpoint ------------*- C++ -*-===//
//
// The options of a checkpoint to bind a program's weights from
// (lib/WeightBinding.h), apart from the binding so that run options can
// carry them without LibTorch's headers.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_WEIGHTOPTIONS_H
#define PPC_LIB_WEIGHTOPTIONS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <optional>
#include <string>

namespace ppc {

/// What the user said about the checkpoint (--weights and the options
/// beside it).
struct WeightOptions {
  /// A .safetensors file, or a directory of shards with
  /// model.safetensors.index.json (or one model.safetensors); empty: none.
  std::string path;
  /// --weights-prefix: the program's names are the checkpoint's with this
  /// prefix ("model."); nullopt: recognized (lib/WeightBinding.h).
  std::optional<std::string> prefix;
  /// --weights-extra ignore: checkpoint tensors that are no weight of the
  /// program are skipped instead of refused.
  bool ignoreExtra = false;
  /// --weights-tied DST=SRC, checkpoint names: DST, absent from the
  /// checkpoint, is SRC's tensor (a program exported on the meta device
  /// does not record which of its weights share storage).
  std::map<std::string, std::string> tied;

  bool given() const { return !path.empty(); }
};

/// Parses one --weights-tied value "DST=SRC". Errors: "--weights-tied
/// 'x': expected DST=SRC, two checkpoint tensor names".
llvm::Error parseTiedPair(llvm::StringRef text, WeightOptions &options);

} // namespace ppc

#endif // PPC_LIB_WEIGHTOPTIONS_H
