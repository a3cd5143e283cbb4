//===- lib/TensorIO.h - Tensors in files Python reads and writes *- C++ -*-===//
//
// Model inputs and outputs are exchanged with Python users as files written
// by torch.save / read by torch.load: a tensor, or a tuple or list of them.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_TENSORIO_H
#define PPC_LIB_TENSORIO_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace ppc {

/// Reads a file written by Python's torch.save holding a tensor (one input)
/// or a tuple/list of tensors (one input each). The file is untrusted: it is
/// read once as a regular file of at most kMaxInputFileBytes, its pickle is
/// checked before it is unpickled, and every tensor is checked as torch.load
/// checks it before anything reads its data. Errors:
///   readFileBounded's ("cannot read input 'x.pt': No such file or
///   directory", "input 'x.pt' is not a regular file (a FIFO)");
///   a malformed archive or pickle ("cannot read input 'x.pt': a pickle
///   opcode pops an empty stack at byte 2 of data.pkl");
///   other contents ("input 'x.pt' holds a dict; expected a tensor or a
///   tuple/list of tensors (one per model input)", "input 'x.pt' holds a
///   Int element; expected only tensors");
///   a malformed tensor ("input 'x.pt' tensor 0 is malformed: its view needs
///   1280 bytes but its storage holds 40"; also a dtype outside the allowed
///   list, a negative offset, overflowing sizes and strides, or a storage
///   larger than the bytes the file holds for it).
///
/// With `names` (the model's inputs, in order) the file may also hold a dict
/// from those names to tensors, returned in name order. Errors, too: "input
/// 'x.pt' names 'ids', which the model does not take (its inputs:
/// input_ids, cache_position)", "input 'x.pt' lacks model input
/// 'cache_position'", "input 'x.pt' holds a dict with a key that is not a
/// str".
llvm::Expected<std::vector<c10::IValue>>
loadTensors(llvm::StringRef path, llvm::ArrayRef<std::string> names = {});

/// What an input file holds: one batch, or a list of batches.
struct InputBatches {
  /// Each batch's model inputs, in file order.
  std::vector<std::vector<c10::IValue>> batches;
  /// Whether the file holds a list of batches (else `batches` holds one).
  bool isList = false;
};

/// Reads an input file as loadTensors(path, names) does, where the file may
/// also hold a list of batches for a model whose inputs are `names`. A
/// top-level list is a list of batches when one of its elements is a tuple,
/// a list or a dict, or when the model has one input and the list more than
/// one element (each of these was an error as one batch); each batch is
/// then a tensor, a tuple/list of tensors or a dict of them by name. Anything
/// else is one batch, read and refused with loadTensors's messages. Errors:
/// loadTensors's, and for a list of batches "input 'x.pt' batch 1 holds a str;
/// expected a tensor or a tuple/list of tensors", "input 'x.pt' batch 1 holds a
/// Tuple element; expected only tensors".
llvm::Expected<InputBatches>
loadInputBatches(llvm::StringRef path, llvm::ArrayRef<std::string> names);

/// Reads a file written by Python's torch.save holding tensors in tuples,
/// lists and dicts with str keys at most `depth` levels deep (training
/// data: a list of (input, target) pairs), checked as loadTensors() checks
/// them; `noun` names the file in messages ("data"). Errors: loadTensors's,
/// and other contents ("data 'd.pt'[0][1] is a str; expected a tensor,
/// tuple, list or dict", "data 'd.pt'[0] nests tuples, lists and dicts too
/// deeply", "data 'd.pt'[0] is a dict with a key that is not a str").
llvm::Expected<c10::IValue> loadTensorTree(llvm::StringRef path,
                                           llvm::StringRef noun, int depth);

/// The values of `dict`, model inputs by name, in `names`' order. `what`
/// names the dict in messages: "input 'x.pt' names 'ids', which the model
/// does not take (its inputs: x, mask)", "... lacks model input 'mask'",
/// "... holds a dict with a key that is not a str".
llvm::Expected<std::vector<c10::IValue>>
inputsByName(const c10::Dict<c10::IValue, c10::IValue> &dict,
             llvm::ArrayRef<std::string> names, const std::string &what);

/// Reads a file written by torch.save holding a dict from str to tensor (a
/// checkpoint's optimizer or generator state), checked as loadTensors()
/// checks it; `noun` names the file in messages. Errors: loadTensors's,
/// and "state 's.pt' holds a list; expected a dict from str to tensor",
/// "state 's.pt' holds 'fc.bias#step', a int; expected a tensor".
llvm::Expected<c10::Dict<std::string, at::Tensor>>
loadNamedTensors(llvm::StringRef path, llvm::StringRef noun);

/// Writes `value` atomically as torch.save would, readable by torch.load
/// with its default weights_only=True (PyTorch 2.6 and later): containers
/// are pickled as plain Python lists, tuples and dicts, without the
/// torch.jit type tags that LibTorch's pickle_save adds and that a
/// weights-only load refuses. Errors: the file cannot be written.
llvm::Error saveValue(llvm::StringRef path, const c10::IValue &value);

/// Writes `values` so that Python's torch.load reads them back: the single
/// value itself if `asTuple` is false (values must hold one), else a tuple.
/// Atomic. Errors: the file cannot be written.
llvm::Error saveTensors(llvm::StringRef path,
                        const std::vector<c10::IValue> &values, bool asTuple);

/// Writes one batch's outputs per element of `batches`, as a list that
/// Python's torch.load reads: each element as saveTensors() writes one
/// batch. Atomic. Errors: the file cannot be written.
llvm::Error saveTensorList(llvm::StringRef path,
                           const std::vector<std::vector<c10::IValue>> &batches,
                           bool asTuple);

} // namespace ppc

#endif // PPC_LIB_TENSORIO_H
