//===- runtime/platform/TorchCompat.h - LibTorch version differences ------===//
//
// The one place that knows which LibTorch ppc is built against. Every call
// whose spelling differs between Debian's LibTorch 1.13 (the system LibTorch
// configuration) and PyTorch 2.x's (the torch wheel's: the PyTorch 2.x
// configuration) (c10d stores, process-group options, work handles, the Gloo
// device factory) goes through the small inline functions here, so porting
// to a new LibTorch means changing this file only.
//
// Differences covered:
//  - c10d headers guard ProcessGroupGloo/NCCL behind USE_C10D_GLOO /
//    USE_C10D_NCCL, which LibTorch's CMake config does not define for users.
//  - TCPStoreOptions gained fields in 2.x (useLibUV, masterListenFd, which
//    makeTCPStore() uses to serve on one address: kStoreTakesListenFd); the
//    fields set here exist in both.
//  - In 1.13 ProcessGroupGloo derives from ProcessGroup, in 2.x from
//    Backend; both expose the same send/recv/Options::create used here.
//  - Work::wait(timeout) exists in both; 2.x also throws
//    c10::DistBackendError (a c10::Error), which torchCall() catches.
//  - A TCPStore server whose port is taken says so differently
//    (isAddressInUse()).
//  - The TCPStore wire protocol: 2.x clients open with a VALIDATE message
//    and number their queries one higher than 1.13's, so a 1.13 client
//    cannot talk to the store of PyTorch 2.x's torchrun
//    (kStoreHasValidation).
//  - Debian's c10 logs through glog (C10_USE_GLOG), PyTorch 2.x's through a
//    logger of its own with the same levels (setTorchLogging()).
//  - torch::optim::Optimizer::state() is keyed by the parameter's
//    TensorImpl: by its address as a string in 1.13, by the pointer in 2.x
//    (optimizerStateKey()).
//  - Autocast (runtime/exec/Precision.h): 1.13 has one switch and dtype per
//    device (set_cpu_enabled, set_autocast_cpu_dtype; set_enabled,
//    set_autocast_gpu_dtype for CUDA), 2.4 on takes the device type
//    (set_autocast_enabled(device, on), set_autocast_dtype(device, dtype)).
//  - c10::Allocator (runtime/platform/MemoryMeter.h): 1.13's allocate() is
//  const,
//    2.3's is not and 2.3 adds the pure virtual copy_data(); an allocator
//    derives from CountingAllocatorBase, which declares both.
//  - PyTorch 2.x's LibTorch (the torch wheel's) has CUDA and NCCL:
//    cmake/Torch.cmake then defines PPC_HAVE_CUDA and PPC_HAVE_NCCL for every
//    file, and puts the wheel's nccl.h ahead of the CUDA toolkit's.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_TORCHCOMPAT_H
#define PPC_RUNTIME_PLATFORM_TORCHCOMPAT_H

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/Logging.h>
#include <c10/util/string_utils.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#ifdef PPC_HAVE_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <string>

namespace ppc::compat {

constexpr int kTorchMajor = TORCH_VERSION_MAJOR;
constexpr int kTorchMinor = TORCH_VERSION_MINOR;

/// Whether this LibTorch's TCPStore speaks the 2.x protocol (a VALIDATE
/// handshake, then query codes from SET = 1), as torchrun 2.x's store does.
/// 1.13's client (SET = 0, no handshake) gets no answer from such a store.
constexpr bool kStoreHasValidation = TORCH_VERSION_MAJOR >= 2;

/// Whether c10d::Store declares clone() (pure virtual since PyTorch 2.3):
/// a store wrapper (runtime/link/JobStore.h) must then implement it.
#define PPC_STORE_HAS_CLONE                                                    \
  (TORCH_VERSION_MAJOR > 2 ||                                                  \
   (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))

/// What this ppc was built against, for `ppc --version`: the LibTorch
/// version (e.g. "2.15.0"), whether that LibTorch has CUDA, and whether the
/// NCCL transport is compiled in.
constexpr const char *kTorchVersion = TORCH_VERSION;
#ifdef PPC_HAVE_CUDA
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif
#ifdef PPC_HAVE_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

/// Lets LibTorch's own diagnostics (c10d and Gloo warnings) print when
/// `show`, else only fatal ones, process-wide.
inline void setTorchLogging(bool show) {
#ifdef C10_USE_GLOG
  FLAGS_minloglevel = show ? google::GLOG_INFO : google::GLOG_FATAL;
#else
  FLAGS_caffe2_log_level = show ? c10::GLOG_INFO : c10::GLOG_FATAL;
#endif
}

/// A TCPStore at host:port: the server when `isServer` (it binds the port,
/// 0 = any free one, see storePort()), else a client that retries
/// connecting until `timeout`. Nobody waits for workers here: the
/// rendezvous (Rendezvous.cpp) counts arrivals itself, with a deadline.
/// `timeout` also bounds the store's get() and wait(). Throws (c10::Error)
/// on failure.
inline c10::intrusive_ptr<c10d::TCPStore>
makeTCPStore(const std::string &host, uint16_t port, bool isServer,
             std::chrono::milliseconds timeout, int listenFd = -1) {
  c10d::TCPStoreOptions opts;
  opts.port = port;
  opts.isServer = isServer;
  opts.waitWorkers = false;
  opts.timeout = timeout;
#if TORCH_VERSION_MAJOR >= 2
  if (listenFd >= 0)
    opts.masterListenFd = listenFd;
#else
  (void)listenFd;
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

/// Whether a store server can take a socket that ppc bound and listens on
/// (TCPStoreOptions::masterListenFd, 2.x; makeTCPStore's `listenFd`, which
/// the store then owns), and so listen on one address only. LibTorch
/// 1.13's server binds every interface (docs/security.md).
constexpr bool kStoreTakesListenFd = TORCH_VERSION_MAJOR >= 2;

/// Whether `message`, from a failed makeTCPStore(isServer=true), says the
/// port is taken. 1.13 reports the socket error ("Address already in use",
/// "errno: 98"); 2.x's libuv server its name ("code: -98, name: EADDRINUSE").
inline bool isAddressInUse(const std::string &message) {
  for (const char *needle :
       {"Address already in use", "errno: 98", "EADDRINUSE"})
    if (message.find(needle) != std::string::npos)
      return true;
  return false;
}

/// The port a store serves or connects to (the bound one for port 0).
inline uint16_t storePort(const c10d::TCPStore &store) {
  return store.getPort();
}

/// A view of `store` whose keys all start with `prefix`.
inline c10::intrusive_ptr<c10d::Store>
makePrefixStore(const std::string &prefix,
                c10::intrusive_ptr<c10d::Store> store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

/// A Gloo device bound to a local address (an IP address or host name).
inline std::shared_ptr<::gloo::transport::Device>
makeGlooDeviceForHost(const std::string &address) {
  return c10d::ProcessGroupGloo::createDeviceForHostname(address);
}

/// A Gloo device bound to a network interface (e.g. "eth0").
inline std::shared_ptr<::gloo::transport::Device>
makeGlooDeviceForInterface(const std::string &interface) {
  return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
}

using GlooGroup = c10d::ProcessGroupGloo;

/// Connects a Gloo process group (a full mesh of TCP pairs) through
/// `store`. `timeout` bounds the connection and every collective. Throws on
/// failure.
inline c10::intrusive_ptr<GlooGroup>
makeGlooGroup(const c10::intrusive_ptr<c10d::Store> &store, int rank,
              int worldSize, std::chrono::milliseconds timeout,
              std::shared_ptr<::gloo::transport::Device> device) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(std::move(device));
  options->threads = 2;
  return c10::make_intrusive<GlooGroup>(store, rank, worldSize, options);
}

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

/// Waits for `work` for at most `timeout`. Returns false on timeout (Gloo
/// throws instead, which the caller's torchCall() turns into an error).
inline bool waitWork(const WorkPtr &work, std::chrono::milliseconds timeout) {
  return work->wait(timeout);
}

#ifdef PPC_HAVE_NCCL
using NcclGroup = c10d::ProcessGroupNCCL;

inline c10::intrusive_ptr<NcclGroup>
makeNcclGroup(const c10::intrusive_ptr<c10d::Store> &store, int rank,
              int worldSize, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<NcclGroup>(store, rank, worldSize, options);
}

/// Stops `group`'s communicators and watchdog before it is destroyed (2.x
/// warns about a group destroyed without it): shutdown() when its work is
/// done, abort() (ncclCommAbort) when a peer may never answer. Never
/// throws.
inline void closeNcclGroup(NcclGroup &group, bool abort) {
  try {
    if (abort)
      group.abort();
    else
      group.shutdown();
  } catch (...) {
  }
}
#endif

/// The key of parameter `param` in torch::optim::Optimizer::state().
inline auto optimizerStateKey(const at::Tensor &param) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<void *>(param.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
}

/// Whether autocast uses 2.4's per-device-type API.
#if TORCH_VERSION_MAJOR > 2 ||                                                 \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define PPC_AUTOCAST_BY_DEVICE 1
#endif

/// Whether autocast is on for `device` (kCPU or kCUDA) in this thread.
inline bool autocastEnabled(c10::DeviceType device) {
#ifdef PPC_AUTOCAST_BY_DEVICE
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

/// Turns autocast on or off for `device` (kCPU or kCUDA) in this thread.
inline void setAutocastEnabled(c10::DeviceType device, bool on) {
#ifdef PPC_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(device, on);
#else
  if (device == c10::DeviceType::CPU)
    at::autocast::set_cpu_enabled(on);
  else
    at::autocast::set_enabled(on);
#endif
}

/// The dtype autocast casts to on `device` (kCPU or kCUDA), thread-local.
inline c10::ScalarType autocastDtype(c10::DeviceType device) {
#ifdef PPC_AUTOCAST_BY_DEVICE
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU
             ? at::autocast::get_autocast_cpu_dtype()
             : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void setAutocastDtype(c10::DeviceType device, c10::ScalarType dtype) {
#ifdef PPC_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU)
    at::autocast::set_autocast_cpu_dtype(dtype);
  else
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

/// A c10::Allocator whose allocate() is allocateBytes(), with the
/// signature each LibTorch wants (const in 1.13, not from 2.3), and 2.3's
/// copy_data() as a plain memcpy (host memory).
class CountingAllocatorBase : public c10::Allocator {
public:
  virtual c10::DataPtr allocateBytes(size_t n) const = 0;
#if TORCH_VERSION_MAJOR > 2 ||                                                 \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return allocateBytes(n); }
  void copy_data(void *dest, const void *src,
                 std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return allocateBytes(n); }
#endif
};

} // namespace ppc::compat

#endif // PPC_RUNTIME_PLATFORM_TORCHCOMPAT_H
