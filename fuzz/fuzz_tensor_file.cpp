//===- fuzz/fuzz_tensor_file.cpp - Fuzz the input file reader -------------===//
//
// Feeds bytes to loadTensors, the reader of `--input` files written by
// torch.save. The runtime and `ppc verify` read every tensor it returns, so
// each must be a CPU tensor whose view lies inside its storage (a crafted
// file can declare sizes, strides or an offset beyond the bytes it holds,
// which torch.load rejects), and small ones are read in full.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "lib/TensorIO.h"

#include <ATen/ATen.h>
#include <c10/util/Logging.h>

using namespace ppc;

static void checkInsideStorage(const at::Tensor &t, size_t index) {
  std::string what = "input tensor " + std::to_string(index);
  if (!t.defined())
    fuzz::fail(what + " is undefined");
  if (!t.device().is_cpu())
    fuzz::fail(what + " is not on the CPU");
  int64_t numel = 1;
  for (int64_t s : t.sizes())
    if (s < 0 || __builtin_mul_overflow(numel, s, &numel))
      fuzz::fail(what + " has negative or overflowing sizes");
  if (numel == 0)
    return;
  // The lowest and highest element the view reaches, in elements.
  int64_t low = t.storage_offset(), high = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span;
    if (__builtin_mul_overflow(t.size(d) - 1, t.stride(d), &span))
      fuzz::fail(what + " has an overflowing view");
    if (__builtin_add_overflow(span < 0 ? low : high, span,
                               span < 0 ? &low : &high))
      fuzz::fail(what + " has an overflowing view");
  }
  int64_t item = static_cast<int64_t>(t.element_size()), end;
  if (low < 0 || __builtin_add_overflow(high, 1, &end) ||
      __builtin_mul_overflow(end, item, &end) ||
      end > static_cast<int64_t>(t.storage().nbytes()))
    fuzz::fail(what + " views elements " + std::to_string(low) + ".." +
               std::to_string(high) + " of a storage of " +
               std::to_string(t.storage().nbytes()) + " bytes");
  if (numel * item <= fuzz::kAllocateBytes)
    (void)t.contiguous();
}

// Every c10::Error captures and symbolizes a C++ backtrace, which costs more
// than the rest of an execution; loadTensors keeps only the message.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  c10::SetStackTraceFetcher([] { return std::string(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::InputFile input("input.pt");
  auto tensors = loadTensors(input.write(data, size));
  if (!tensors) {
    llvm::consumeError(tensors.takeError());
    return 0;
  }
  for (size_t i = 0; i < tensors->size(); ++i) {
    const c10::IValue &v = (*tensors)[i];
    if (!v.isTensor())
      fuzz::fail("loadTensors returned a " + std::string(v.tagKind()));
    checkInsideStorage(v.toTensor(), i);
  }
  return 0;
}
