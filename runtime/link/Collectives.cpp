//===- runtime/link/Collectives.cpp ---------------------------------------===//
//
// Collectives from point-to-point messages.
// Collectives from point-to-point messages
//
// This file implements the collectives of Collectives.h. Control messages
// (lengths, bytes, the agreement) are CPU tensors on every transport.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Collectives.h"

#include "lib/Error.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <cstring>

namespace ppc {

namespace {
/// The most bytes broadcastBytes() and gatherBytes() move per rank; far above
/// any real signature list, far below what would exhaust memory.
constexpr uint64_t kMaxBroadcastBytes = 64ull << 20;

/// One message of bytes on channel 0: its length, then the data.
llvm::Error sendBytes(Transport &transport, const std::string &bytes, int peer,
                      const std::string &what) {
  if (bytes.size() > kMaxBroadcastBytes)
    return makeError(llvm::formatv("{0} take {1} bytes; the limit is {2}", what,
                                   bytes.size(), kMaxBroadcastBytes)
                         .str());
  at::Tensor size = at::tensor({static_cast<int64_t>(bytes.size())},
                               at::TensorOptions().dtype(at::kLong));
  if (llvm::Error err = transport.send(size, peer, 0, what))
    return err;
  if (bytes.empty())
    return llvm::Error::success();
  at::Tensor data = at::empty({static_cast<int64_t>(bytes.size())},
                              at::TensorOptions().dtype(at::kByte));
  std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  return transport.send(data, peer, 0, what);
}

llvm::Expected<std::string> recvBytes(Transport &transport, int peer,
                                      const std::string &what) {
  at::Tensor size = at::empty({1}, at::TensorOptions().dtype(at::kLong));
  if (llvm::Error err = transport.recv(size, peer, 0, what))
    return err;
  int64_t n = size.item<int64_t>();
  // The length comes from a peer: check it before allocating.
  if (n < 0 || static_cast<uint64_t>(n) > kMaxBroadcastBytes)
    return makeError(llvm::formatv("rank {0} sent a length of {1} bytes for "
                                   "{2}; the limit is {3}",
                                   peer, n, what, kMaxBroadcastBytes)
                         .str());
  std::string bytes(static_cast<size_t>(n), '\0');
  if (n > 0) {
    at::Tensor data = at::empty({n}, at::TensorOptions().dtype(at::kByte));
    if (llvm::Error err = transport.recv(data, peer, 0, what))
      return err;
    std::memcpy(bytes.data(), data.data_ptr(), bytes.size());
  }
  return bytes;
}
} // namespace

llvm::Error agreeMin(Transport &transport, std::vector<int64_t> &values) {
  const int world = transport.worldSize();
  if (world == 1)
    return llvm::Error::success();
  auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor mine = at::tensor(values, opts);
  if (transport.rank() == 0) {
    at::Tensor acc = mine.clone();
    for (int peer = 1; peer < world; ++peer) {
      at::Tensor theirs = at::empty_like(mine);
      if (llvm::Error err =
              transport.recv(theirs, peer, 0, "the start-up agreement"))
        return err;
      acc = at::minimum(acc, theirs);
    }
    for (int peer = 1; peer < world; ++peer)
      if (llvm::Error err =
              transport.send(acc, peer, 0, "the start-up agreement"))
        return err;
    mine = acc;
  } else {
    if (llvm::Error err = transport.send(mine, 0, 0, "the start-up agreement"))
      return err;
    if (llvm::Error err = transport.recv(mine, 0, 0, "the start-up agreement"))
      return err;
  }
  if (llvm::Error err = transport.flushSends())
    return err;
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = mine[i].item<int64_t>();
  return llvm::Error::success();
}

llvm::Error broadcastBytes(Transport &transport, std::string &bytes, int root,
                           const std::string &what, bool waitForSends) {
  if (transport.worldSize() == 1)
    return llvm::Error::success();
  if (transport.rank() != root) {
    auto got = recvBytes(transport, root, what);
    if (!got)
      return got.takeError();
    bytes = std::move(*got);
    return llvm::Error::success();
  }
  for (int peer = 0; peer < transport.worldSize(); ++peer)
    if (peer != root)
      if (llvm::Error err = sendBytes(transport, bytes, peer, what))
        return err;
  return waitForSends ? transport.flushSends() : llvm::Error::success();
}

llvm::Error gatherBytes(Transport &transport, const std::string &bytes,
                        int root, std::vector<std::string> &gathered,
                        const std::string &what) {
  if (transport.rank() != root) {
    if (llvm::Error err = sendBytes(transport, bytes, root, what))
      return err;
    return transport.flushSends();
  }
  gathered.assign(transport.worldSize(), std::string());
  gathered[root] = bytes;
  for (int peer = 0; peer < transport.worldSize(); ++peer) {
    if (peer == root)
      continue;
    auto got = recvBytes(transport, peer, what);
    if (!got)
      return got.takeError();
    gathered[peer] = std::move(*got);
  }
  return llvm::Error::success();
}

llvm::Error barrier(Transport &transport) {
  std::vector<int64_t> token{0};
  return agreeMin(transport, token);
}

llvm::Error allReduceSum(Transport &transport, at::Tensor &tensor,
                         const std::vector<int> &ranks, int channel,
                         const llvm::Twine &what) {
  if (ranks.size() < 2)
    return llvm::Error::success();
  const int owner = ranks[0];
  if (transport.rank() == owner) {
    for (size_t k = 1; k < ranks.size(); ++k) {
      at::Tensor part = at::empty_like(tensor);
      if (llvm::Error err = transport.recv(part, ranks[k], channel, what))
        return err;
      tensor.add_(part);
    }
    for (size_t k = 1; k < ranks.size(); ++k)
      if (llvm::Error err = transport.send(tensor, ranks[k], channel, what))
        return err;
    return llvm::Error::success();
  }
  if (llvm::Error err = transport.send(tensor, owner, channel, what))
    return err;
  if (llvm::Error err = transport.flushSends())
    return err;
  return transport.recv(tensor, owner, channel, what);
}

} // namespace ppc
