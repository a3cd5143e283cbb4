//===- runtime/platform/Blas.cpp - The BLAS kernel a rank really runs -----===//
//
// This file implements Blas.h: finding the loaded BLAS by name, cpuid, the
// table of OpenBLAS's core types, the self-check and ppc launch's plan.
//
//===----------------------------------------------------------------------===//
#include "runtime/platform/Blas.h"
#include "runtime/platform/Threads.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <dlfcn.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

extern char **environ;

namespace ppc {

namespace {
/// OpenBLAS's x86 core names (driver/others/dynamic.c, corename[]) by
/// class.
struct CoreName {
  const char *name;
  KernelClass kind;
};
constexpr CoreName kCores[] = {
    {"Katmai", KernelClass::Sse},
    {"Coppermine", KernelClass::Sse},
    {"Northwood", KernelClass::Sse},
    {"Prescott", KernelClass::Sse},
    {"Banias", KernelClass::Sse},
    {"Atom", KernelClass::Sse},
    {"Core2", KernelClass::Sse},
    {"Penryn", KernelClass::Sse},
    {"Dunnington", KernelClass::Sse},
    {"Nehalem", KernelClass::Sse},
    {"Athlon", KernelClass::Sse},
    {"Opteron", KernelClass::Sse},
    {"Opteron_SSE3", KernelClass::Sse},
    {"Barcelona", KernelClass::Sse},
    {"Nano", KernelClass::Sse},
    {"Bobcat", KernelClass::Sse},
    {"Sandybridge", KernelClass::Avx},
    {"Bulldozer", KernelClass::Avx},
    {"Piledriver", KernelClass::Avx},
    {"Steamroller", KernelClass::Avx},
    {"Excavator", KernelClass::Avx},
    {"Haswell", KernelClass::Avx2},
    {"Zen", KernelClass::Avx2},
    {"SkylakeX", KernelClass::Avx512},
    {"Cooperlake", KernelClass::Avx512Bf16},
    {"SapphireRapids", KernelClass::Avx512Bf16},
};

/// What a CPU of class `kind` is called in a warning.
const char *cpuWith(KernelClass kind) {
  switch (kind) {
  case KernelClass::Avx512Bf16:
    return "AVX-512 BF16";
  case KernelClass::Avx512:
    return "AVX-512";
  case KernelClass::Avx2:
    return "AVX2";
  case KernelClass::Avx:
    return "AVX";
  case KernelClass::Sse:
  case KernelClass::Unknown:
    break;
  }
  return "SSE";
}

/// "its generic Prescott kernel", "its Haswell kernel".
std::string itsKernel(llvm::StringRef core) {
  return std::string("its ") + (isGenericCore(core) ? "generic " : "") +
         core.str() + " kernel";
}

/// The string an OpenBLAS getter `name` returns, or "" without one.
std::string openBlasString(const char *name) {
  using Getter = char *(*)();
  void *address = findBlasSymbol(name);
  if (!address)
    return "";
  const char *text = reinterpret_cast<Getter>(address)();
  return text ? printable(text, 256) : "";
}

BlasInfo findLoadedBlas() {
  BlasInfo info;
  if (at::hasMKL()) {
    info.kind = BlasKind::Mkl;
    // "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product ..."
    std::string config = at::show_config();
    llvm::StringRef marker = "Math Kernel Library Version ";
    size_t pos = config.find(marker.str());
    if (pos != std::string::npos) {
      llvm::StringRef rest =
          llvm::StringRef(config).substr(pos + marker.size());
      info.version = printable(rest.take_until([](char c) {
        return c == '-' || c == ' ' || c == '\n';
      }),
                               32);
    }
    return info;
  }
  std::string core = openBlasString("openblas_get_corename");
  if (core.empty())
    return info;
  return openBlasInfo(openBlasString("openblas_get_config"), core);
}

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

std::string CpuFeatures::names() const {
  std::string out;
  auto add = [&](bool has, const char *name) {
    if (has)
      out += (out.empty() ? "" : " ") + std::string(name);
  };
  add(avx, "avx");
  add(avx2, "avx2");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512bf16, "avx512_bf16");
  return out.empty() ? "none" : out;
}

CpuFeatures hostCpuFeatures() {
  CpuFeatures cpu;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx))
    return cpu;
  unsigned maxLeaf = eax;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  cpu.amd = llvm::StringRef(vendor) == "AuthenticAMD" ||
            llvm::StringRef(vendor) == "HygonGenuine";
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  bool osxsave = ecx & (1u << 27);
  uint64_t xcr0 = 0;
  if (osxsave) {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  // The OS saves the YMM (bits 1-2) and the ZMM and mask state (5-7).
  bool ymm = (xcr0 & 0x6) == 0x6;
  bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;
  cpu.avx = ymm && (ecx & (1u << 28));
  if (maxLeaf < 7)
    return cpu;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  cpu.avx2 = cpu.avx && (ebx & (1u << 5));
  cpu.avx512f = zmm && (ebx & (1u << 16));
  cpu.avx512dq = cpu.avx512f && (ebx & (1u << 17));
  cpu.avx512bw = cpu.avx512f && (ebx & (1u << 30));
  cpu.avx512vl = cpu.avx512f && (ebx & (1u << 31));
  unsigned subleaves = eax;
  if (subleaves >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    cpu.avx512bf16 = cpu.avx512f && (eax & (1u << 5));
  }
#endif
  return cpu;
}

KernelClass openBlasCoreClass(llvm::StringRef core) {
  for (const CoreName &c : kCores)
    if (core.equals_insensitive(c.name))
      return c.kind;
  return KernelClass::Unknown;
}

KernelClass bestKernelClass(const CpuFeatures &cpu) {
  bool avx512 =
      cpu.avx2 && cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq;
  if (avx512 && cpu.avx512bf16)
    return KernelClass::Avx512Bf16;
  if (avx512)
    return KernelClass::Avx512;
  if (cpu.avx2)
    return KernelClass::Avx2;
  if (cpu.avx)
    return KernelClass::Avx;
  return KernelClass::Sse;
}

std::string bestOpenBlasCore(const CpuFeatures &cpu) {
  switch (bestKernelClass(cpu)) {
  case KernelClass::Avx512Bf16:
    return "Cooperlake";
  case KernelClass::Avx512:
    return "SkylakeX";
  case KernelClass::Avx2:
    return cpu.amd ? "Zen" : "Haswell";
  case KernelClass::Avx:
    return "Sandybridge";
  case KernelClass::Sse:
  case KernelClass::Unknown:
    break;
  }
  return "Prescott";
}

bool isGenericCore(llvm::StringRef core) {
  return openBlasCoreClass(core) == KernelClass::Sse;
}

bool coreFallsShort(llvm::StringRef core, const CpuFeatures &cpu) {
  KernelClass kind = openBlasCoreClass(core);
  return kind != KernelClass::Unknown && kind < bestKernelClass(cpu);
}

BlasInfo openBlasInfo(llvm::StringRef config, llvm::StringRef core) {
  BlasInfo info;
  info.kind = BlasKind::OpenBlas;
  info.core = printable(core, 32);
  llvm::SmallVector<llvm::StringRef, 8> words;
  config.split(words, ' ', -1, /*KeepEmpty=*/false);
  if (words.size() >= 2 && words[0] == "OpenBLAS")
    info.version = printable(words[1], 32);
  info.dynamicArch = llvm::is_contained(words, "DYNAMIC_ARCH");
  return info;
}

const BlasInfo &loadedBlas() {
  static const BlasInfo info = findLoadedBlas();
  return info;
}

std::string blasVersionLine(const BlasInfo &blas) {
  switch (blas.kind) {
  case BlasKind::OpenBlas:
    return "blas: openblas " +
           (blas.version.empty() ? std::string("(version unknown)")
                                 : blas.version) +
           " " + blas.core + (blas.dynamicArch ? " (DYNAMIC_ARCH)" : "");
  case BlasKind::Mkl:
    return "blas: mkl" + (blas.version.empty() ? "" : " " + blas.version);
  case BlasKind::Unknown:
    break;
  }
  return "blas: unknown (neither OpenBLAS nor MKL is loaded)";
}

std::string blasStatsName(const BlasInfo &blas) {
  switch (blas.kind) {
  case BlasKind::OpenBlas:
    return "openblas:" + blas.core;
  case BlasKind::Mkl:
    return "mkl";
  case BlasKind::Unknown:
    break;
  }
  return "unknown";
}

std::string kernelWarning(const BlasInfo &blas, const CpuFeatures &cpu) {
  if (blas.kind != BlasKind::OpenBlas || !coreFallsShort(blas.core, cpu))
    return "";
  return "warning: OpenBLAS runs " + itsKernel(blas.core) + " on a CPU with " +
         cpuWith(bestKernelClass(cpu)) +
         "; set OPENBLAS_CORETYPE=" + bestOpenBlasCore(cpu) +
         " (see docs/runtime.md)";
}

void warnAboutBlasKernel(llvm::raw_ostream &warnings) {
  static std::atomic<bool> done{false};
  if (done.exchange(true) || std::getenv("PPC_BLAS_WARNED"))
    return;
  std::string line = kernelWarning(loadedBlas(), hostCpuFeatures());
  if (!line.empty())
    warnings << line << "\n";
}

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
  std::string cpuName = cpuWith(bestKernelClass(cpu));
  KernelCheck result = check(core);
  if (result.passed) {
    plan.coreType = core;
    plan.note = "note: OpenBLAS picked " + itsKernel(blas.core) +
                " on this CPU with " + cpuName + "; the ranks run " + core +
                " (OPENBLAS_CORETYPE=" + core +
                ", its results checked; see docs/runtime.md)";
    return plan;
  }
  plan.warning = "warning: OpenBLAS runs " + itsKernel(blas.core) +
                 " on a CPU with " + cpuName + ", and its " + core +
                 " kernel failed ppc's self-check (" + result.problem +
                 "): the ranks keep " + blas.core +
                 "; set OPENBLAS_CORETYPE to a core type that computes "
                 "correctly here (see docs/runtime.md)";
  return plan;
}

} // namespace ppc
