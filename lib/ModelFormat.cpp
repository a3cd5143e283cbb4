//===- lib/ModelFormat.cpp - The model-format seam ------------------------===//
//
// This file implements the format registry of lib/ModelFormats.def and the
// choice of a model file's format by its contents.
//
//===----------------------------------------------------------------------===//
#include "lib/ModelFormat.h"

#include "lib/Error.h"
#include "lib/Manifest.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <caffe2/serialize/inline_container.h>

namespace ppc {

#define PPC_MODEL_FORMAT(Factory) const ModelFormat &Factory();
#include "lib/ModelFormats.def"

ModelFormat::~ModelFormat() = default;

llvm::ArrayRef<const ModelFormat *> modelFormats() {
  static const std::vector<const ModelFormat *> formats = {
#define PPC_MODEL_FORMAT(Factory) &Factory(),
#include "lib/ModelFormats.def"
  };
  return formats;
}

const ModelFormat *findModelFormat(llvm::StringRef name) {
  for (const ModelFormat *format : modelFormats())
    if (format->name() == name)
      return format;
  return nullptr;
}

const ModelFormat &formatOf(const Manifest &manifest) {
  return *findModelFormat(manifest.format);
}

llvm::Expected<ModelFile> readModelFile(llvm::StringRef path) {
  if (!llvm::sys::fs::exists(path))
    return makeError("cannot open '" + path + "': No such file or directory");
  auto buffer = mapFileBounded(path, kMaxStageFileBytes, "model");
  if (!buffer)
    return buffer.takeError();
  FileProbe probe{(*buffer)->getBuffer(), {}};
  // Before any LibTorch reader: opening one inflates .data/version.
  if (llvm::Error err = checkZipInflation(probe.bytes))
    return makeError("'" + path + "': " + llvm::toString(std::move(err)));
  auto records = torchCall("it is not a readable zip archive", [&] {
    caffe2::serialize::PyTorchStreamReader reader(
        makeArchiveReader(probe.bytes));
    return reader.getAllRecords();
  });
  std::string why;
  if (records)
    probe.zipRecords = std::move(*records);
  else
    why = llvm::toString(records.takeError());
  for (const ModelFormat *format : modelFormats())
    if (format->recognizes(probe))
      return ModelFile{std::move(*buffer), format};
  std::vector<std::string> kinds, names;
  for (const ModelFormat *format : modelFormats()) {
    kinds.push_back(format->displayName().str());
    names.push_back(format->name().str());
  }
  if (why.empty())
    why = "its records are those of no format ppc reads";
  return makeError(llvm::formatv("'{0}' is not a {1}: {2} (formats ppc reads: "
                                 "{3})",
                                 path, llvm::join(kinds, " or "), why,
                                 llvm::join(names, ", "))
                       .str());
}

} // namespace ppc
