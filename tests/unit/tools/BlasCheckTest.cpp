//===- tests/unit/tools/BlasCheckTest.cpp - ppc launch's BLAS kernel ------===//
//
// The self-check of a core type in this process, its line, and ppc
// launch's plan with a fake check: no child process.
#include "tools/ppc/BlasCheck.h"

#include "tests/unit/runtime/platform/BlasBuilders.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace ppc;
using namespace ppc::test;

namespace {
/// A check that records the core types it is asked about.
struct FakeCheck {
  bool passes;
  std::vector<std::string> asked;
  KernelCheck operator()(llvm::StringRef core) {
    asked.push_back(core.str());
    KernelCheck check;
    check.passed = passes;
    check.loadedCore = core.str();
    if (!passes)
      check.problem = "the float 67x131x93 product is off by 3e+06 times the "
                      "error bound";
    return check;
  }
};

RankKernelPlan plan(const BlasInfo &blas, const CpuFeatures &cpu,
                    FakeCheck &check, bool userSet = false,
                    llvm::StringRef candidate = "") {
  return planRankKernel(blas, cpu, userSet, candidate,
                        [&](llvm::StringRef core) { return check(core); });
}
} // namespace

TEST(BlasCheckTest, LaunchChecksTheBestCoreAndSetsIt) {
  FakeCheck check{true, {}};
  RankKernelPlan p = plan(openBlas("Prescott"), avx512(true), check);
  EXPECT_EQ(check.asked, std::vector<std::string>{"Cooperlake"});
  EXPECT_EQ(p.coreType, "Cooperlake");
  EXPECT_EQ(p.warning, "");
  EXPECT_EQ(
      p.note,
      "note: OpenBLAS picked its generic Prescott kernel on this CPU with "
      "AVX-512 BF16; the ranks run Cooperlake (OPENBLAS_CORETYPE=Cooperlake, "
      "its results checked; see docs/runtime.md)");
}

TEST(BlasCheckTest, LaunchWarnsWhenTheCheckFails) {
  FakeCheck check{false, {}};
  RankKernelPlan p = plan(openBlas("Prescott"), avx512(false), check);
  EXPECT_EQ(check.asked, std::vector<std::string>{"SkylakeX"});
  EXPECT_EQ(p.coreType, "");
  EXPECT_EQ(p.note, "");
  EXPECT_EQ(p.warning,
            "warning: OpenBLAS runs its generic Prescott kernel on a CPU with "
            "AVX-512, and its SkylakeX kernel failed ppc's self-check (the "
            "float 67x131x93 product is off by 3e+06 times the error bound): "
            "the ranks keep Prescott; set OPENBLAS_CORETYPE to a core type "
            "that computes correctly here (see docs/runtime.md)");
}

TEST(BlasCheckTest, LaunchLeavesTheUsersChoiceAndGoodKernelsAlone) {
  FakeCheck check{true, {}};
  EXPECT_EQ(plan(openBlas("Prescott"), avx512(true), check, /*userSet=*/true)
                .coreType,
            "");
  EXPECT_EQ(plan(openBlas("Cooperlake"), avx512(true), check).coreType, "");
  BlasInfo mkl;
  mkl.kind = BlasKind::Mkl;
  EXPECT_EQ(plan(mkl, avx512(true), check).coreType, "");
  EXPECT_EQ(plan(BlasInfo(), avx512(true), check).coreType, "");
  EXPECT_TRUE(check.asked.empty());
  // The test hook's candidate replaces the best core type.
  RankKernelPlan p = plan(openBlas("Prescott"), avx512(true), check,
                          /*userSet=*/false, "Haswell");
  EXPECT_EQ(check.asked, std::vector<std::string>{"Haswell"});
  EXPECT_EQ(p.coreType, "Haswell");
}

TEST(BlasCheckTest, CheckLinesRoundTrip) {
  KernelCheck ok;
  ok.passed = true;
  ok.loadedCore = "Cooperlake";
  EXPECT_EQ(kernelCheckLine(ok), "blas-check: core=Cooperlake ok");
  KernelCheck read = parseKernelCheckLine("blas-check: core=Cooperlake ok\n");
  EXPECT_TRUE(read.passed);
  EXPECT_EQ(read.loadedCore, "Cooperlake");

  KernelCheck bad;
  bad.loadedCore = "Cooperlake";
  bad.problem = "OpenBLAS has no core type Bogus (it loaded Cooperlake)";
  std::string line = kernelCheckLine(bad);
  EXPECT_EQ(line, "blas-check: core=Cooperlake failed: OpenBLAS has no core "
                  "type Bogus (it loaded Cooperlake)");
  read = parseKernelCheckLine(line);
  EXPECT_FALSE(read.passed);
  EXPECT_EQ(read.problem, bad.problem);

  for (llvm::StringRef junk : {"", "hello", "blas-check: core=X maybe",
                               "blas-check: core=X failed: "}) {
    KernelCheck j = parseKernelCheckLine(junk);
    EXPECT_FALSE(j.passed) << junk.str();
    EXPECT_NE(j.problem, "") << junk.str();
  }
  // Bytes from the child are shown escaped.
  read = parseKernelCheckLine("blas-check: core=\x1b[31m failed: x");
  EXPECT_EQ(read.loadedCore, "\\x1b[31m");
}

TEST(BlasCheckTest, ProductErrorSeparatesRoundingFromWrongResults) {
  at::manual_seed(0);
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    at::Tensor a = at::randn({33, 70}, at::TensorOptions().dtype(dtype));
    at::Tensor b = at::randn({70, 21}, at::TensorOptions().dtype(dtype));
    at::Tensor c = at::matmul(a, b);
    double ok = productError(a, b, c);
    EXPECT_LE(ok, 1.0);
    // One element off by a small fraction of its value is far out of the
    // bound.
    at::Tensor wrong = c.clone();
    wrong[5][7] += 1e-3 * (1 + std::fabs(wrong[5][7].item<double>()));
    EXPECT_GT(productError(a, b, wrong), 10.0);
    at::Tensor v = at::randn({70}, at::TensorOptions().dtype(dtype));
    EXPECT_LE(productError(a, v, at::matmul(a, v)), 1.0);
  }
  at::Tensor a = at::ones({4, 3}), b = at::ones({3, 2});
  EXPECT_TRUE(std::isinf(productError(a, b, at::ones({4, 3}))));
  EXPECT_TRUE(std::isinf(productError(a, a, at::ones({4, 2}))));
  at::Tensor nan = at::matmul(a, b);
  nan[0][0] = NAN;
  EXPECT_TRUE(std::isinf(productError(a, b, nan)));
  // All products zero: only an exact zero passes.
  at::Tensor z = at::zeros({4, 3});
  EXPECT_EQ(productError(z, b, at::zeros({4, 2})), 0.0);
  EXPECT_TRUE(std::isinf(productError(z, b, at::ones({4, 2}))));
}

TEST(BlasCheckTest, ThisProcessKernelPassesItsOwnCheck) {
  // The products of the self-check, in this process: whatever BLAS the test
  // runs, they are within the bound; only the core name can differ.
  const BlasInfo &blas = loadedBlas();
  if (blas.kind != BlasKind::OpenBlas)
    GTEST_SKIP() << "not OpenBLAS: " << blasStatsName(blas);
  KernelCheck check = checkLoadedKernel(blas.core);
  EXPECT_TRUE(check.passed) << check.problem;
  KernelCheck other = checkLoadedKernel("Bogus");
  EXPECT_FALSE(other.passed);
  EXPECT_EQ(other.problem,
            "OpenBLAS has no core type Bogus (it loaded " + blas.core + ")");
}
