//===- lib/MappedTensor.cpp - Tensors over a file's bytes, in place -------===//
#include "lib/MappedTensor.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21 // Linux 5.4; older kernels answer EINVAL
#endif

namespace ppc {

namespace {
/// The deleter of every viewInPlace storage: what pageOut recognises them
/// by. The context is the owner, held on the heap.
void releaseOwner(void *context) {
  delete static_cast<std::shared_ptr<const void> *>(context);
}
} // namespace

bool canViewInPlace(llvm::StringRef bytes, c10::ScalarType dtype) {
  return reinterpret_cast<uintptr_t>(bytes.data()) % c10::elementSize(dtype) ==
         0;
}

at::Tensor viewInPlace(llvm::StringRef bytes, c10::ScalarType dtype,
                       std::shared_ptr<const void> owner) {
  size_t item = c10::elementSize(dtype);
  auto numel = static_cast<int64_t>(bytes.size() / item);
  void *data = const_cast<char *>(bytes.data());
  c10::DataPtr pointer(data, new std::shared_ptr<const void>(std::move(owner)),
                       &releaseOwner, at::Device(at::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(),
                       static_cast<size_t>(numel) * item, std::move(pointer),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(dtype))
      .set_(storage, 0, {numel}, {1});
}

void pageOut(llvm::StringRef bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  uintptr_t end = begin + bytes.size();
  // Only whole pages: their neighbours' bytes may still be in use.
  begin = (begin + page - 1) / page * page;
  end = end / page * page;
  if (end > begin)
    (void)::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_PAGEOUT);
}

void pageOut(const c10::Storage &storage) {
  if (storage.data_ptr().get_deleter() == &releaseOwner)
    pageOut(llvm::StringRef(static_cast<const char *>(storage.data_ptr().get()),
                            storage.nbytes()));
}

std::string sha256PagingOut(llvm::StringRef bytes) {
  constexpr size_t kChunk = size_t(64) << 20;
  llvm::SHA256 hasher;
  for (size_t at = 0; at < bytes.size(); at += kChunk) {
    llvm::StringRef chunk = bytes.substr(at, kChunk);
    hasher.update(chunk);
    pageOut(chunk);
  }
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

} // namespace ppc
