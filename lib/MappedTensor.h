//===- lib/MappedTensor.h - Tensors over a file's bytes ---------*- C++ -*-===//
//
// A model's weights are most of its bytes. Read whole and then copied into
// tensors, a 1 GiB model takes 2 GiB of memory before anything is done with
// it; viewed in place in a mapped file (lib/SafeRead.h's mapFileBounded, a
// safetensors shard) it takes only the pages that are touched, and a
// process that streams the model through (ppc split, ppc join) gives each
// tensor's pages back once it has written them (pageOut). This is how
// llama.cpp and safetensors load weights.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_LIB_MAPPEDTENSOR_H
#define PPC_LIB_MAPPEDTENSOR_H

#include "llvm/ADT/StringRef.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

namespace ppc {

/// Whether `bytes` can be viewed in place as elements of `dtype`: aligned
/// to the element's size (a view of misaligned bytes is undefined).
bool canViewInPlace(llvm::StringRef bytes, c10::ScalarType dtype);

/// A flat tensor of `dtype` over `bytes` in place (canViewInPlace must
/// hold; a trailing partial element is left out). Its storage holds
/// `owner`, which keeps the bytes alive as long as any tensor views them.
/// Writes through the tensor need writable bytes (a copy-on-write mapping
/// or a heap buffer: a write changes no file); a read-only mapping is for
/// tensors nothing writes.
at::Tensor viewInPlace(llvm::StringRef bytes, c10::ScalarType dtype,
                       std::shared_ptr<const void> owner);

/// Gives the pages wholly inside `bytes` back to the kernel (madvise
/// MADV_PAGEOUT): a mapped file's clean pages leave this process's resident
/// memory and are read again if touched; pages written in place (and heap
/// memory, without swap) are kept. Never changes a value.
void pageOut(llvm::StringRef bytes);

/// pageOut of `storage`'s bytes when it is a viewInPlace storage; nothing
/// otherwise.
void pageOut(const c10::Storage &storage);

/// sha256Hex (lib/FileUtil.h) of a mapped file's `bytes`, each chunk paged
/// out once hashed: checking a file against its manifest does not leave all
/// of it resident.
std::string sha256PagingOut(llvm::StringRef bytes);

} // namespace ppc

#endif // PPC_LIB_MAPPEDTENSOR_H
