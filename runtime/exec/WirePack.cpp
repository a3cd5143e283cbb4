//===- runtime/exec/WirePack.cpp - An edge's wire tensors as one message --===//
//
// This file implements the packing of WirePack.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/WirePack.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <limits>
#include <optional>

namespace ppc {

namespace {
/// The bytes of a tensor of `shape`, or nothing when they overflow.
std::optional<int64_t> bytesOf(const WireShape &shape) {
  int64_t bytes = static_cast<int64_t>(c10::elementSize(shape.dtype));
  for (int64_t size : shape.sizes)
    if (size < 0 || __builtin_mul_overflow(bytes, size, &bytes))
      return std::nullopt;
  return bytes;
}

/// A tensor of `shape` at byte `offset` of `buffer` (uint8, offset 0 in its
/// storage): the same memory, contiguous, with its own version counter.
at::Tensor carve(const at::Tensor &buffer, int64_t offset,
                 const WireShape &shape) {
  std::vector<int64_t> strides(shape.sizes.size(), 1);
  for (size_t d = shape.sizes.size(); d-- > 1;)
    strides[d - 1] = strides[d] * std::max<int64_t>(shape.sizes[d], 1);
  at::NoGradGuard noGrad;
  at::Tensor t = at::empty({0}, buffer.options().dtype(shape.dtype));
  t.set_(buffer.storage(),
         offset / static_cast<int64_t>(c10::elementSize(shape.dtype)),
         shape.sizes, strides);
  return t;
}

std::vector<WireShape> shapesOf(llvm::ArrayRef<at::Tensor> wire) {
  std::vector<WireShape> shapes;
  shapes.reserve(wire.size());
  for (const at::Tensor &t : wire)
    shapes.push_back({t.scalar_type(), t.sizes().vec()});
  return shapes;
}
} // namespace

llvm::Expected<PackLayout> packLayout(llvm::ArrayRef<WireShape> shapes,
                                      const llvm::Twine &what) {
  PackLayout layout;
  for (const WireShape &shape : shapes) {
    auto bytes = bytesOf(shape);
    if (bytes && *bytes == 0) {
      layout.offsets.push_back(-1);
      continue;
    }
    constexpr int64_t kLast = std::numeric_limits<int64_t>::max();
    int64_t start = 0;
    if (bytes && layout.bytes <= kLast - kPackAlignment)
      start =
          (layout.bytes + kPackAlignment - 1) / kPackAlignment * kPackAlignment;
    if (!bytes || layout.bytes > kLast - kPackAlignment ||
        __builtin_add_overflow(start, *bytes, &layout.bytes))
      return makeError(
          ("cannot lay out " + what + ": it needs more than 2^63 bytes").str());
    layout.offsets.push_back(start);
    ++layout.nonEmpty;
  }
  return layout;
}

llvm::Expected<std::vector<at::Tensor>>
packMessage(llvm::ArrayRef<at::Tensor> wire, c10::Device device, bool coalesce,
            const llvm::Twine &what) {
  std::vector<at::Tensor> out;
  for (const at::Tensor &t : wire)
    if (t.numel() > 0)
      out.push_back(t);
  if (!coalesce || out.size() <= 1)
    return out;
  auto layout = packLayout(shapesOf(wire), what);
  if (!layout)
    return layout.takeError();
  return torchCall("cannot prepare " + what, [&] {
    at::Tensor buffer = at::empty(
        {layout->bytes}, at::TensorOptions().dtype(at::kByte).device(device));
    for (size_t i = 0; i < wire.size(); ++i)
      if (layout->offsets[i] >= 0)
        carve(buffer, layout->offsets[i],
              {wire[i].scalar_type(), wire[i].sizes().vec()})
            .copy_(wire[i]);
    return std::vector<at::Tensor>{buffer};
  });
}

llvm::Expected<WireMessage> allocateMessage(llvm::ArrayRef<WireShape> shapes,
                                            c10::Device device, bool coalesce,
                                            const llvm::Twine &what) {
  auto layout = packLayout(shapes, what);
  if (!layout)
    return layout.takeError();
  return torchCall("cannot allocate " + what, [&] {
    WireMessage message;
    auto opts = at::TensorOptions().device(device);
    if (!coalesce || layout->nonEmpty <= 1) {
      for (const WireShape &shape : shapes) {
        message.wire.push_back(at::empty(shape.sizes, opts.dtype(shape.dtype)));
        if (message.wire.back().numel() > 0)
          message.crossing.push_back(message.wire.back());
      }
      return message;
    }
    at::Tensor buffer = at::empty({layout->bytes}, opts.dtype(at::kByte));
    for (size_t i = 0; i < shapes.size(); ++i)
      message.wire.push_back(
          layout->offsets[i] >= 0
              ? carve(buffer, layout->offsets[i], shapes[i])
              : at::empty(shapes[i].sizes, opts.dtype(shapes[i].dtype)));
    message.crossing.push_back(std::move(buffer));
    return message;
  });
}

} // namespace ppc
