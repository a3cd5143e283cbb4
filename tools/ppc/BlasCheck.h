//===- tools/ppc/BlasCheck.h - Checking an OpenBLAS core type ---*- C++ -*-===//
//
// What `ppc launch` does about its ranks' BLAS kernel (runtime/platform/
// Blas.h says which kernel a process runs and why it matters): when this
// ppc's OpenBLAS picked a kernel below the CPU, the best core type is
// checked numerically in a child process (`ppc blas-check CORE`, with
// OPENBLAS_CORETYPE=CORE), since a forced core type can crash or, in older
// OpenBLAS builds, compute wrong results on some processors; if it passes,
// the ranks get it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_BLASCHECK_H
#define PPC_TOOLS_PPC_BLASCHECK_H

#include "runtime/platform/Blas.h"

#include "llvm/ADT/StringRef.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

namespace ppc {

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
  /// get PPC_BLAS_WARNED=1 so that they do not repeat it (LaunchEnv).
  std::string warning;
};

/// The plan for ranks that inherit this process's BLAS `blas` on `cpu`:
/// nothing unless it is OpenBLAS, OPENBLAS_CORETYPE is not the user's
/// (`userSetCoreType`) and its core falls short of the CPU
/// (coreFallsShort()). Then `check` is asked, once, about the best core
/// type (or `candidate` when not empty, BlasTestHooks::candidate): if it
/// passes, the ranks get it and the note says so; if not, the warning names
/// the variable to set.
RankKernelPlan
planRankKernel(const BlasInfo &blas, const CpuFeatures &cpu,
               bool userSetCoreType, llvm::StringRef candidate,
               const std::function<KernelCheck(llvm::StringRef)> &check);

/// Test hooks of ppc launch's plan, for the tests of a machine whose
/// OpenBLAS already picks the right kernel by itself (tests/cli/
/// test_blas.py). ppc launch reads them from its environment once, where
/// the command starts (LaunchCommand.cpp), and passes them down.
struct BlasTestHooks {
  /// PPC_TEST_BLAS_CORETYPE_IS_DEFAULT (set, to any value): ppc launch takes
  /// OPENBLAS_CORETYPE in its own environment for OpenBLAS's own choice, not
  /// the user's (so OPENBLAS_CORETYPE=Prescott reproduces a CPU on which
  /// OpenBLAS picks Prescott by itself).
  bool coreTypeIsDefault = false;
  /// PPC_TEST_BLAS_CANDIDATE=NAME: ppc launch self-checks core type NAME
  /// instead of the best one (a name OpenBLAS does not know fails); empty:
  /// the best one.
  std::string candidate;
};

} // namespace ppc

#endif // PPC_TOOLS_PPC_BLASCHECK_H
