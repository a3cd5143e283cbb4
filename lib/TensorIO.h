//===- lib/TensorIO.h - Tensors in files Python reads and writes -*- C++
//-*-===//
//
// Model inputs and outputs are exchanged with Python users as files written
// by torch.save / read by torch.load: a tensor, or a tuple or list of them.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_TENSORIO_H
#define PPC_LIB_TENSORIO_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <vector>

namespace ppc {

/// Reads a file written by Python's torch.save holding a tensor (one input)
/// or a tuple/list of tensors (one input each). Errors: the file is missing
/// or unreadable ("cannot read input 'x.pt': ..."), or holds something else
/// ("input 'x.pt' holds a dict; expected a tensor or a tuple/list of
/// tensors").
llvm::Expected<std::vector<c10::IValue>> loadTensors(llvm::StringRef path);

/// Writes `values` so that Python's torch.load reads them back: the single
/// value itself if `asTuple` is false (values must hold one), else a tuple.
/// Atomic. Errors: the file cannot be written.
llvm::Error saveTensors(llvm::StringRef path,
                        const std::vector<c10::IValue> &values, bool asTuple);

} // namespace ppc

#endif // PPC_LIB_TENSORIO_H
