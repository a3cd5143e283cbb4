//===- runtime/platform/DeviceKind.h - The devices stages run on ----------===//
//
// The compute device a run puts its stages on, chosen from RunOptions::device
// independently of the links that carry messages (runtime/link/Transport.h): a
// CUDA run still sends its control messages as CPU tensors. The names live in
// DeviceKind.def only.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_DEVICEKIND_H
#define PPC_RUNTIME_PLATFORM_DEVICEKIND_H

#include "llvm/ADT/StringRef.h"

#include <c10/core/Device.h>

#include <optional>

namespace ppc {

enum class DeviceKind {
#define PPC_DEVICE_KIND(ENUMERATOR, NAME) ENUMERATOR,
#include "runtime/platform/DeviceKind.def"
};

/// The device named `name` ("cpu", "cuda"), or none.
inline std::optional<DeviceKind> deviceKindNamed(llvm::StringRef name) {
#define PPC_DEVICE_KIND(ENUMERATOR, NAME)                                      \
  if (name == NAME)                                                            \
    return DeviceKind::ENUMERATOR;
#include "runtime/platform/DeviceKind.def"
  return std::nullopt;
}

/// The device of `kind` for a rank with local rank `localRank`: the CPU, or
/// cuda:LOCAL_RANK (one GPU per rank of a machine).
inline c10::Device computeDevice(DeviceKind kind, int localRank) {
  if (kind == DeviceKind::CUDA)
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(localRank));
  return c10::Device(c10::kCPU);
}

} // namespace ppc

#endif // PPC_RUNTIME_PLATFORM_DEVICEKIND_H
