//===- tools/ppc/BlasCheck.cpp - Checking an OpenBLAS core type -----------===//
//
// This file implements BlasCheck.h: the products of the self-check and
// their error bound, the child process and its one line, and ppc launch's
// plan for its ranks' kernel.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/BlasCheck.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

extern char **environ;

namespace ppc {

namespace {
/// "NAME=VALUE" entries of this process's environment, less `drop`'s
/// names, plus `add`.
std::vector<std::string> environmentWith(llvm::ArrayRef<llvm::StringRef> drop,
                                         llvm::ArrayRef<std::string> add) {
  std::vector<std::string> env;
  for (char **entry = environ; *entry; ++entry) {
    llvm::StringRef name = llvm::StringRef(*entry).split('=').first;
    if (!llvm::is_contained(drop, name))
      env.emplace_back(*entry);
  }
  env.insert(env.end(), add.begin(), add.end());
  return env;
}

/// A matrix (or vector) of `sizes` whose values are multiples of 2^-10 in
/// (-1, 1), from a fixed sequence: exact in float, and their products'
/// sums of up to 2^10 terms exact in double.
at::Tensor testValues(at::IntArrayRef sizes, at::ScalarType dtype,
                      uint32_t seed) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  double *data = t.data_ptr<double>();
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = (static_cast<int>((state >> 12) % 2047) - 1023) / 1024.0;
  }
  return t.to(dtype);
}

/// One product of the self-check: its name and productError().
struct ProductCase {
  std::string name;
  double error;
};

std::vector<ProductCase> selfCheckProducts() {
  std::vector<ProductCase> out;
  uint32_t seed = 1;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    const char *type = dtype == at::kFloat ? "float" : "double";
    // Sizes off every block size, and one large enough for the packed
    // paths of the kernels.
    for (auto [m, k, n] : {std::array<int64_t, 3>{67, 131, 93},
                           std::array<int64_t, 3>{128, 256, 160}}) {
      std::string shape =
          std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      at::Tensor a = testValues({m, k}, dtype, seed++);
      at::Tensor b = testValues({k, n}, dtype, seed++);
      out.push_back({std::string(type) + " " + shape,
                     productError(a, b, at::matmul(a, b))});
      // Transposed operands: the kernels' other packing routines.
      at::Tensor aT = testValues({k, m}, dtype, seed++).t();
      at::Tensor bT = testValues({n, k}, dtype, seed++).t();
      out.push_back({std::string(type) + " " + shape + " transposed",
                     productError(aT, bT, at::matmul(aT, bT))});
      at::Tensor v = testValues({k}, dtype, seed++);
      out.push_back({std::string(type) + " " + std::to_string(m) + "x" +
                         std::to_string(k) + " by a vector",
                     productError(a, v, at::matmul(a, v))});
    }
  }
  return out;
}
} // namespace

double productError(const at::Tensor &a, const at::Tensor &b,
                    const at::Tensor &c) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (a.dim() < 1 || a.dim() > 2 || b.dim() < 1 || b.dim() > 2)
    return kInf;
  at::Tensor a2 =
      (a.dim() == 1 ? a.unsqueeze(0) : a).to(at::kDouble).contiguous();
  at::Tensor b2 =
      (b.dim() == 1 ? b.unsqueeze(1) : b).to(at::kDouble).contiguous();
  int64_t m = a2.size(0), k = a2.size(1), n = b2.size(1);
  if (b2.size(0) != k || c.numel() != m * n)
    return kInf;
  at::Tensor c2 = c.to(at::kDouble).contiguous().reshape({m, n});
  double unit = c.scalar_type() == at::kFloat ? std::ldexp(1.0, -24)
                                              : std::ldexp(1.0, -53);
  const double *pa = a2.data_ptr<double>(), *pb = b2.data_ptr<double>(),
               *pc = c2.data_ptr<double>();
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, magnitude = 0;
      for (int64_t l = 0; l < k; ++l) {
        exact += pa[i * k + l] * pb[l * n + j];
        magnitude += std::fabs(pa[i * k + l] * pb[l * n + j]);
      }
      double error = std::fabs(pc[i * n + j] - exact);
      if (std::isnan(pc[i * n + j]))
        return kInf;
      double bound = 2.0 * static_cast<double>(k) * unit * magnitude;
      // A zero bound (all products zero) admits only an exact zero.
      double ratio = bound > 0 ? error / bound : (error > 0 ? kInf : 0);
      worst = std::max(worst, ratio);
    }
  return worst;
}

KernelCheck checkLoadedKernel(llvm::StringRef requested) {
  KernelCheck check;
  const BlasInfo &blas = loadedBlas();
  check.loadedCore = blas.kind == BlasKind::OpenBlas ? blas.core : "";
  if (blas.kind != BlasKind::OpenBlas) {
    check.problem = "OpenBLAS is not loaded (" + blasStatsName(blas) + ")";
    return check;
  }
  if (!llvm::StringRef(blas.core).equals_insensitive(requested)) {
    check.problem = "OpenBLAS has no core type " + printable(requested, 32) +
                    " (it loaded " + blas.core + ")";
    return check;
  }
  at::set_num_threads(1);
  for (const ProductCase &p : selfCheckProducts())
    if (!(p.error <= 1)) {
      check.problem = "the " + p.name + " product is off by " +
                      llvm::formatv("{0:g}", p.error).str() +
                      " times the error bound";
      return check;
    }
  check.passed = true;
  return check;
}

std::string kernelCheckLine(const KernelCheck &check) {
  return "blas-check: core=" +
         (check.loadedCore.empty() ? std::string("none") : check.loadedCore) +
         (check.passed ? " ok" : " failed: " + check.problem);
}

KernelCheck parseKernelCheckLine(llvm::StringRef text) {
  KernelCheck check;
  llvm::StringRef line = text.split('\n').first;
  if (!line.consume_front("blas-check: core=")) {
    check.problem =
        "the self-check printed no result ('" + printable(line, 80) + "')";
    return check;
  }
  auto [core, rest] = line.split(' ');
  check.loadedCore = printable(core, 32);
  if (rest == "ok") {
    check.passed = true;
    return check;
  }
  if (rest.consume_front("failed: ") && !rest.empty())
    check.problem = printable(rest, 200);
  else
    check.problem =
        "the self-check's result is unreadable ('" + printable(line, 80) + "')";
  return check;
}

KernelCheck checkCoreType(llvm::StringRef core, llvm::StringRef ppcPath) {
  KernelCheck failed;
  llvm::SmallString<128> outPath;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("ppc-blas-check",
                                                              "txt", outPath)) {
    failed.problem = "cannot create a temporary file: " + ec.message();
    return failed;
  }
  std::vector<std::string> env = environmentWith(
      {"OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"},
      {"OPENBLAS_CORETYPE=" + core.str(), "OPENBLAS_NUM_THREADS=1",
       "OMP_NUM_THREADS=1"});
  std::vector<llvm::StringRef> envRefs(env.begin(), env.end());
  std::string coreArg = core.str();
  llvm::StringRef args[] = {ppcPath, "blas-check", coreArg};
  llvm::Optional<llvm::StringRef> redirects[] = {
      llvm::StringRef(""), llvm::StringRef(outPath), llvm::StringRef("")};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(
      ppcPath, args, llvm::ArrayRef<llvm::StringRef>(envRefs), redirects,
      kKernelCheckSeconds, 0, &message);
  auto out = llvm::MemoryBuffer::getFile(outPath);
  llvm::sys::fs::remove(outPath);
  llvm::StringRef text =
      out ? (*out)->getBuffer().take_front(4096) : llvm::StringRef();
  // The child's line wins (a failed check exits 1); without one, how the
  // child ended: a crash ("Illegal instruction"), the timeout.
  if (!text.startswith("blas-check: core=")) {
    failed.problem = "the self-check ended without a result (" +
                     (message.empty() ? "status " + std::to_string(status)
                                      : printable(message, 120)) +
                     ")";
    return failed;
  }
  KernelCheck check = parseKernelCheckLine(text);
  if (check.passed && status != 0) {
    check.passed = false;
    check.problem =
        "the self-check exited with status " + std::to_string(status);
  }
  return check;
}

RankKernelPlan
planRankKernel(const BlasInfo &blas, const CpuFeatures &cpu,
               bool userSetCoreType, llvm::StringRef candidate,
               const std::function<KernelCheck(llvm::StringRef)> &check) {
  RankKernelPlan plan;
  if (blas.kind != BlasKind::OpenBlas || userSetCoreType ||
      !coreFallsShort(blas.core, cpu))
    return plan;
  std::string core =
      candidate.empty() ? bestOpenBlasCore(cpu) : candidate.str();
  std::string cpuName = cpuClassName(bestKernelClass(cpu));
  KernelCheck result = check(core);
  if (result.passed) {
    plan.coreType = core;
    plan.note = "note: OpenBLAS picked " + kernelPhrase(blas.core) +
                " on this CPU with " + cpuName + "; the ranks run " + core +
                " (OPENBLAS_CORETYPE=" + core +
                ", its results checked; see docs/runtime.md)";
    return plan;
  }
  plan.warning = "warning: OpenBLAS runs " + kernelPhrase(blas.core) +
                 " on a CPU with " + cpuName + ", and its " + core +
                 " kernel failed ppc's self-check (" + result.problem +
                 "): the ranks keep " + blas.core +
                 "; set OPENBLAS_CORETYPE to a core type that computes "
                 "correctly here (see docs/runtime.md)";
  return plan;
}

} // namespace ppc
