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
//   3. a numerical self-check of a core type, run in a child process
//      (`ppc blas-check CORE`) with OPENBLAS_CORETYPE=CORE, since a forced
//      core type can crash or, in older OpenBLAS builds, compute wrong
//      results on some processors;
//   4. what `ppc launch` does about its ranks' kernel (planRankKernel), and
//      the one start-up warning of a rank that runs a kernel below its CPU
//      (warnAboutBlasKernel).
//
// Test hooks (environment variables read by ppc launch only, for the tests
// of a machine whose OpenBLAS already picks the right kernel by itself):
//   PPC_TEST_BLAS_CORETYPE_IS_DEFAULT=1  ppc launch takes OPENBLAS_CORETYPE
//       in its own environment for OpenBLAS's own choice, not the user's
//       (so OPENBLAS_CORETYPE=Prescott reproduces a CPU on which OpenBLAS
//       picks Prescott by itself);
//   PPC_TEST_BLAS_CANDIDATE=NAME  ppc launch self-checks core type NAME
//       instead of the best one (a name OpenBLAS does not know fails).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_BLAS_H
#define PPC_RUNTIME_PLATFORM_BLAS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/core/Tensor.h>

#include <functional>
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
/// per process (the first call), unless PPC_BLAS_WARNED is set in the
/// environment (ppc launch warned for its ranks already).
void warnAboutBlasKernel(llvm::raw_ostream &warnings);

/// The outcome of a self-check of core type `requested`.
struct KernelCheck {
  bool passed = false;
  /// The core OpenBLAS loaded (may differ from the one requested).
  std::string loadedCore;
  /// Why it failed; empty when it passed.
  std::string problem;
};

/// How far at::matmul(a, b) = `c` is from the exact product, against the
/// error bound of a dot product of a.size(-1) terms in c's precision:
/// max over elements of |c - exact| / (2 k u sum |a_i||b_i|) (u: the unit
/// roundoff of c's dtype; the exact product and the sums in double, by a
/// plain loop, exact for the inputs the self-check uses). At most 1 for any
/// correct kernel, whatever its order of summation; a wrong kernel is off
/// by about the values themselves. a: m x k or k (vector), b: k x n or k,
/// float or double, on the CPU; a shape mismatch is infinity.
double productError(const at::Tensor &a, const at::Tensor &b,
                    const at::Tensor &c);

/// The self-check in this process (the child's side of checkCoreType()):
/// on one thread, float and double matrix products (plain, transposed
/// operands, odd sizes and a matrix-vector product) through at::matmul, each
/// with productError() at most 1; and OpenBLAS must be loaded with core
/// type `requested` (compared ignoring case).
KernelCheck checkLoadedKernel(llvm::StringRef requested);

/// The line `ppc blas-check` prints for `check`: "blas-check: core=NAME ok"
/// or "blas-check: core=NAME failed: PROBLEM".
std::string kernelCheckLine(const KernelCheck &check);

/// Reads a kernelCheckLine() (the child's output, untrusted): the check it
/// reports, or a failed one saying what was wrong with `text`.
KernelCheck parseKernelCheckLine(llvm::StringRef text);

/// The longest a self-check may take, in seconds (a child that loads
/// LibTorch and multiplies a few small matrices: about a second).
constexpr unsigned kKernelCheckSeconds = 60;

/// Runs `ppcPath blas-check CORE` with OPENBLAS_CORETYPE=CORE and one BLAS
/// thread (the rest of the environment inherited), for at most
/// kKernelCheckSeconds, and reads its line. Fails (never an error) when
/// the child cannot run, crashes ("killed by SIGILL" on a CPU without the
/// core's instructions), times out or reports a failure.
KernelCheck checkCoreType(llvm::StringRef core, llvm::StringRef ppcPath);

/// What `ppc launch` does about its ranks' BLAS kernel.
struct RankKernelPlan {
  /// OPENBLAS_CORETYPE for the ranks; empty: leave the environment alone.
  std::string coreType;
  /// One "note: ..." line to print (unless quiet), or "".
  std::string note;
  /// One "warning: ..." line to print (unless quiet), or "": the ranks then
  /// get PPC_BLAS_WARNED=1 so that they do not repeat it.
  std::string warning;
};

/// The plan for ranks that inherit this process's BLAS `blas` on `cpu`:
/// nothing unless it is OpenBLAS, OPENBLAS_CORETYPE is not the user's
/// (`userSetCoreType`) and its core falls short of the CPU
/// (coreFallsShort()). Then `check` is asked, once, about the best core
/// type (or `candidate` when not empty, a test hook): if it passes, the
/// ranks get it and the note says so; if not, the warning names the
/// variable to set.
RankKernelPlan
planRankKernel(const BlasInfo &blas, const CpuFeatures &cpu,
               bool userSetCoreType, llvm::StringRef candidate,
               const std::function<KernelCheck(llvm::StringRef)> &check);

} // namespace ppc

#endif // PPC_RUNTIME_PLATFORM_BLAS_H
