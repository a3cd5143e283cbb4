//===- lib/TensorIO.cpp - Tensors in files Python reads and writes --------===//
#include "lib/TensorIO.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <torch/serialize.h>

namespace ppc {

llvm::Expected<std::vector<c10::IValue>> loadTensors(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return makeError("cannot read input '" + path +
                     "': " + buffer.getError().message());
  llvm::StringRef bytes = (*buffer)->getBuffer();
  auto value = torchCall("cannot read input '" + path + "'", [&] {
    return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  });
  if (!value)
    return value.takeError();
  std::vector<c10::IValue> out;
  if (value->isTensor())
    out.push_back(*value);
  else if (value->isTuple())
    out = value->toTupleRef().elements().vec();
  else if (value->isList())
    out = value->toList().vec();
  else
    return makeError("input '" + path + "' holds a " + value->tagKind() +
                     "; expected a tensor or a tuple/list of tensors");
  for (const c10::IValue &v : out)
    if (!v.isTensor())
      return makeError("input '" + path + "' holds a " + v.tagKind() +
                       " element; expected only tensors");
  return out;
}

llvm::Error saveTensors(llvm::StringRef path,
                        const std::vector<c10::IValue> &values, bool asTuple) {
  c10::IValue value = asTuple || values.size() != 1
                          ? c10::IValue(c10::ivalue::Tuple::create(values))
                          : values[0];
  auto bytes = torchCall("cannot write '" + path + "'",
                         [&] { return torch::pickle_save(value); });
  if (!bytes)
    return bytes.takeError();
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    os.write(bytes->data(), bytes->size());
    return llvm::Error::success();
  });
}

} // namespace ppc
