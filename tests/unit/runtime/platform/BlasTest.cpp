//===- tests/unit/runtime/platform/BlasTest.cpp ---------------------------===//
//
// Kernel choice, no child process.
#include "runtime/platform/Blas.h"

#include "tests/unit/runtime/platform/BlasBuilders.h"

#include <gtest/gtest.h>

#include <string>

using namespace ppc;
using namespace ppc::test;

TEST(BlasTest, BestCoreFollowsTheFeatures) {
  EXPECT_EQ(bestOpenBlasCore(CpuFeatures()), "Prescott");
  CpuFeatures avx;
  avx.avx = true;
  EXPECT_EQ(bestOpenBlasCore(avx), "Sandybridge");
  EXPECT_EQ(bestOpenBlasCore(avx2Only()), "Haswell");
  EXPECT_EQ(bestOpenBlasCore(avx2Only(/*amd=*/true)), "Zen");
  EXPECT_EQ(bestOpenBlasCore(avx512(false)), "SkylakeX");
  EXPECT_EQ(bestOpenBlasCore(avx512(true)), "Cooperlake");
  // SkylakeX's kernels need BW, VL and DQ besides F; BF16 alone is not
  // enough either.
  CpuFeatures partial = avx512(true);
  partial.avx512vl = false;
  EXPECT_EQ(bestOpenBlasCore(partial), "Haswell");
  CpuFeatures bf16NoAvx512 = avx2Only();
  bf16NoAvx512.avx512bf16 = true;
  EXPECT_EQ(bestOpenBlasCore(bf16NoAvx512), "Haswell");
}

TEST(BlasTest, FeatureNames) {
  EXPECT_EQ(CpuFeatures().names(), "none");
  EXPECT_EQ(avx512(true).names(),
            "avx avx2 avx512f avx512bw avx512vl avx512dq avx512_bf16");
}

TEST(BlasTest, CoreClassesAndGenericKernels) {
  EXPECT_EQ(openBlasCoreClass("Prescott"), KernelClass::Sse);
  EXPECT_EQ(openBlasCoreClass("PRESCOTT"), KernelClass::Sse);
  EXPECT_EQ(openBlasCoreClass("Nehalem"), KernelClass::Sse);
  EXPECT_EQ(openBlasCoreClass("Sandybridge"), KernelClass::Avx);
  EXPECT_EQ(openBlasCoreClass("zen"), KernelClass::Avx2);
  EXPECT_EQ(openBlasCoreClass("SkylakeX"), KernelClass::Avx512);
  EXPECT_EQ(openBlasCoreClass("Cooperlake"), KernelClass::Avx512Bf16);
  EXPECT_EQ(openBlasCoreClass("Bogus"), KernelClass::Unknown);
  EXPECT_EQ(openBlasCoreClass(""), KernelClass::Unknown);
  EXPECT_TRUE(isGenericCore("Prescott"));
  EXPECT_FALSE(isGenericCore("Haswell"));
  EXPECT_FALSE(isGenericCore("Bogus"));

  EXPECT_TRUE(coreFallsShort("Prescott", avx512(true)));
  EXPECT_TRUE(coreFallsShort("Haswell", avx512(true)));
  EXPECT_TRUE(coreFallsShort("SkylakeX", avx512(true)));
  EXPECT_FALSE(coreFallsShort("Cooperlake", avx512(true)));
  EXPECT_FALSE(coreFallsShort("SkylakeX", avx512(false)));
  EXPECT_FALSE(coreFallsShort("Haswell", avx2Only()));
  EXPECT_FALSE(coreFallsShort("Zen", avx2Only(true)));
  EXPECT_FALSE(coreFallsShort("Prescott", CpuFeatures()));
  // A name ppc does not know is left alone.
  EXPECT_FALSE(coreFallsShort("Bogus", avx512(true)));
}

TEST(BlasTest, ReadsOpenBlasConfig) {
  BlasInfo info = openBlas("Cooperlake");
  EXPECT_EQ(info.kind, BlasKind::OpenBlas);
  EXPECT_EQ(info.version, "0.3.21");
  EXPECT_EQ(info.core, "Cooperlake");
  EXPECT_TRUE(info.dynamicArch);
  EXPECT_EQ(blasVersionLine(info),
            "blas: openblas 0.3.21 Cooperlake (DYNAMIC_ARCH)");
  EXPECT_EQ(blasStatsName(info), "openblas:Cooperlake");
  BlasInfo fixed =
      openBlasInfo("OpenBLAS 0.3.8 HASWELL MAX_THREADS=8", "Haswell");
  EXPECT_FALSE(fixed.dynamicArch);
  EXPECT_EQ(blasVersionLine(fixed), "blas: openblas 0.3.8 Haswell");
  BlasInfo odd = openBlasInfo("", "Haswell");
  EXPECT_EQ(blasVersionLine(odd), "blas: openblas (version unknown) Haswell");
  BlasInfo mkl;
  mkl.kind = BlasKind::Mkl;
  mkl.version = "2024.2";
  EXPECT_EQ(blasVersionLine(mkl), "blas: mkl 2024.2");
  EXPECT_EQ(blasStatsName(mkl), "mkl");
  EXPECT_EQ(blasStatsName(BlasInfo()), "unknown");
}

TEST(BlasTest, WarnsOnlyWhenTheKernelFallsShort) {
  EXPECT_EQ(kernelWarning(openBlas("Prescott"), avx512(true)),
            "warning: OpenBLAS runs its generic Prescott kernel on a CPU with "
            "AVX-512 BF16; set OPENBLAS_CORETYPE=Cooperlake (see "
            "docs/runtime.md)");
  // SkylakeX is AVX-512 too, but its bfloat16 products do without BF16.
  EXPECT_EQ(kernelWarning(openBlas("SkylakeX"), avx512(true)),
            "warning: OpenBLAS runs its SkylakeX kernel on a CPU with AVX-512 "
            "BF16; set OPENBLAS_CORETYPE=Cooperlake (see docs/runtime.md)");
  EXPECT_EQ(kernelWarning(openBlas("Haswell"), avx512(false)),
            "warning: OpenBLAS runs its Haswell kernel on a CPU with AVX-512; "
            "set OPENBLAS_CORETYPE=SkylakeX (see docs/runtime.md)");
  EXPECT_EQ(kernelWarning(openBlas("Cooperlake"), avx512(true)), "");
  EXPECT_EQ(kernelWarning(openBlas("Prescott"), CpuFeatures()), "");
  BlasInfo mkl;
  mkl.kind = BlasKind::Mkl;
  EXPECT_EQ(kernelWarning(mkl, avx512(true)), "");
}
