//===- tests/unit/runtime/platform/BlasBuilders.h -------------------------===//
//
// BLAS test inputs.
//
// The CPUs and OpenBLAS builds the tests of the kernel choice
// (runtime/platform/Blas.h) and of ppc launch's plan (tools/ppc/
// BlasCheck.h) are about.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_RUNTIME_PLATFORM_BLASBUILDERS_H
#define PPC_TESTS_UNIT_RUNTIME_PLATFORM_BLASBUILDERS_H

#include "runtime/platform/Blas.h"

#include <string>

namespace ppc::test {

inline CpuFeatures avx2Only(bool amd = false) {
  CpuFeatures cpu;
  cpu.amd = amd;
  cpu.avx = cpu.avx2 = true;
  return cpu;
}

inline CpuFeatures avx512(bool bf16) {
  CpuFeatures cpu = avx2Only();
  cpu.avx512f = cpu.avx512bw = cpu.avx512vl = cpu.avx512dq = true;
  cpu.avx512bf16 = bf16;
  return cpu;
}

inline BlasInfo openBlas(const std::string &core) {
  return openBlasInfo("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY " +
                          core + " MAX_THREADS=64",
                      core);
}

} // namespace ppc::test

#endif // PPC_TESTS_UNIT_RUNTIME_PLATFORM_BLASBUILDERS_H
