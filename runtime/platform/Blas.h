//===- runtime/platform/Blas.h - The BLAS kernel a rank really runs -------===//
//
// Which BLAS computes a rank's matrix products, and whether it is the
// fastest kernel the CPU allows. Debian's LibTorch calls BLAS through
// libblas.so.3, usually OpenBLAS built with DYNAMIC_ARCH: OpenBLAS picks a
// kernel ("core type") for the CPU when it is loaded, and on some CPUs (an
// AVX-512 Xeon that reports a generic model name) it picks its generic
// Prescott kernel, 3-4.5x slower than SkylakeX or Cooperlake.
// OPENBLAS_CORETYPE=NAME forces a core type; OpenBLAS reads it when it is
// loaded, so it must be in a process's environment before it starts. A
// torch wheel computes with MKL instead: there is nothing to choose.
//
// What this file offers:
//   1. loadedBlas(): the BLAS this process runs (OpenBLAS's version, core
//      and build, found by name among the loaded libraries; or MKL);
//   2. hostCpuFeatures() (cpuid) and the best OpenBLAS core type for them,
//      with the names of OpenBLAS's driver/others/dynamic.c;
//   3. the one start-up warning of a rank that runs a kernel below its CPU
//      (warnAboutBlasKernel).
// What `ppc launch` does about its ranks' kernel, with a numerical
// self-check of a core type, is the CLI's (tools/ppc/BlasCheck.h).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_BLAS_H
#define PPC_RUNTIME_PLATFORM_BLAS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace ppc {

/// What the CPU (and the OS, for the register state) supports, of what
/// decides OpenBLAS's x86-64 kernels.
struct CpuFeatures {
  /// AuthenticAMD or HygonGenuine (OpenBLAS's Zen kernels).
  bool amd = false;
  bool avx = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512bf16 = false;

  /// The features present, as /proc/cpuinfo names them, in the order of
  /// the fields: "avx avx2 avx512f avx512bw avx512vl avx512dq avx512_bf16";
  /// "none" when none is.
  std::string names() const;
};

/// This CPU's features (cpuid, and xgetbv for the OS's register state);
/// none on a processor that is not x86.
CpuFeatures hostCpuFeatures();

/// OpenBLAS's x86-64 kernels by the instructions they use, slowest first.
enum class KernelClass { Unknown, Sse, Avx, Avx2, Avx512, Avx512Bf16 };

/// The class of OpenBLAS core type `core` (a name of OpenBLAS's
/// dynamic.c, compared as OpenBLAS does, ignoring case): Prescott, Nehalem,
/// Core2, Barcelona, ... Sse; Sandybridge, Bulldozer ... Excavator Avx;
/// Haswell, Zen Avx2; SkylakeX Avx512; Cooperlake, SapphireRapids
/// Avx512Bf16; Unknown for any other name.
KernelClass openBlasCoreClass(llvm::StringRef core);

/// The fastest class `cpu` runs (AVX-512 needs F, BW, VL and DQ, as
/// OpenBLAS's SkylakeX kernels do; BF16 needs AVX-512 too).
KernelClass bestKernelClass(const CpuFeatures &cpu);

/// The OpenBLAS core type for `cpu`, as OpenBLAS's dynamic.c picks for a
/// CPU it recognizes: Cooperlake (AVX-512 with BF16), SkylakeX (AVX-512),
/// Zen (AMD with AVX2) or Haswell (AVX2), Sandybridge (AVX), else Prescott.
std::string bestOpenBlasCore(const CpuFeatures &cpu);

/// Whether `core` is one of OpenBLAS's generic kernels (class Sse: no AVX).
bool isGenericCore(llvm::StringRef core);

/// Whether a process running OpenBLAS core type `core` computes slower
/// than `cpu` allows: the core's class is known and below
/// bestKernelClass(cpu).
bool coreFallsShort(llvm::StringRef core, const CpuFeatures &cpu);

/// What a CPU of class `kind` is called in messages: "AVX-512 BF16",
/// "AVX-512", "AVX2", "AVX", else "SSE".
const char *cpuClassName(KernelClass kind);

/// What messages call OpenBLAS core type `core`: "its generic Prescott
/// kernel", "its Haswell kernel".
std::string kernelPhrase(llvm::StringRef core);

enum class BlasKind { Unknown, OpenBlas, Mkl };

/// The BLAS a process computes with.
struct BlasInfo {
  BlasKind kind = BlasKind::Unknown;
  /// "0.3.21" (OpenBLAS), "2024.2" (MKL); empty when unknown.
  std::string version;
  /// OpenBLAS's core type ("Cooperlake"); empty otherwise.
  std::string core;
  /// OpenBLAS built with DYNAMIC_ARCH (it picks its kernel at load time).
  bool dynamicArch = false;
};

/// The BLAS of an OpenBLAS whose openblas_get_config() is `config`
/// ("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Cooperlake
/// MAX_THREADS=64") and openblas_get_corename() is `core`.
BlasInfo openBlasInfo(llvm::StringRef config, llvm::StringRef core);

/// The BLAS this process runs, found once: MKL when LibTorch was built with
/// it (at::hasMKL(), its version from at::show_config()); else OpenBLAS
/// when openblas_get_corename is found among the loaded libraries (the
/// global scope, then LibTorch's own dependencies); else Unknown (the
/// reference BLAS, or one ppc does not know).
const BlasInfo &loadedBlas();

/// `ppc --version`'s line: "blas: openblas 0.3.21 Cooperlake
/// (DYNAMIC_ARCH)", "blas: mkl 2024.2", "blas: unknown (neither OpenBLAS
/// nor MKL is loaded)".
std::string blasVersionLine(const BlasInfo &blas);

/// The blas= field of --stats: "openblas:Cooperlake", "mkl" or "unknown".
std::string blasStatsName(const BlasInfo &blas);

/// The one-line warning for a process that runs `blas` on `cpu`, or "" when
/// its kernel does not fall short (or it is not OpenBLAS): "warning:
/// OpenBLAS runs its generic Prescott kernel on a CPU with AVX-512 BF16;
/// set OPENBLAS_CORETYPE=Cooperlake (see docs/runtime.md)".
std::string kernelWarning(const BlasInfo &blas, const CpuFeatures &cpu);

/// Prints kernelWarning(loadedBlas(), hostCpuFeatures()) to `warnings`, once
/// per process (the first call), unless `launcherWarned`: ppc launch warned
/// for its ranks already (LaunchEnv::blasWarned, PPC_BLAS_WARNED).
void warnAboutBlasKernel(llvm::raw_ostream &warnings, bool launcherWarned);

} // namespace ppc

#endif // PPC_RUNTIME_PLATFORM_BLAS_H
