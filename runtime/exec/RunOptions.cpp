//===- runtime/exec/RunOptions.cpp - How a rank runs a pipeline -----------===//
//
// This file implements the names of metadata sources and the meta cache
// directory of a run (RunOptions.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/RunOptions.h"

#include "lib/Stage.h"

namespace ppc {

llvm::StringRef metaSourceName(MetaSource source) {
  switch (source) {
  case MetaSource::Inferred:
    return "inferred";
  case MetaSource::Cache:
    return "cache";
  case MetaSource::User:
    return "user";
  }
  return "inferred";
}

std::string metaCacheDirOf(const RunOptions &options,
                           llvm::StringRef manifestPath) {
  return options.metaCacheDir.empty() ? manifestDirectory(manifestPath)
                                      : options.metaCacheDir;
}

} // namespace ppc
