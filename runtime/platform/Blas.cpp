//===- runtime/platform/Blas.cpp - The BLAS kernel a rank really runs -----===//
//
// This file implements Blas.h: finding the loaded BLAS by name, cpuid, the
// table of OpenBLAS's core types and the start-up warning.
//
//===----------------------------------------------------------------------===//
#include "runtime/platform/Blas.h"
#include "runtime/platform/Threads.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <ATen/ATen.h>
#include <ATen/Version.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include <dlfcn.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

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

const char *cpuClassName(KernelClass kind) {
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

std::string kernelPhrase(llvm::StringRef core) {
  return std::string("its ") + (isGenericCore(core) ? "generic " : "") +
         core.str() + " kernel";
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
  return "warning: OpenBLAS runs " + kernelPhrase(blas.core) +
         " on a CPU with " + cpuClassName(bestKernelClass(cpu)) +
         "; set OPENBLAS_CORETYPE=" + bestOpenBlasCore(cpu) +
         " (see docs/runtime.md)";
}

void warnAboutBlasKernel(llvm::raw_ostream &warnings, bool launcherWarned) {
  static std::atomic<bool> done{false};
  if (done.exchange(true) || launcherWarned)
    return;
  std::string line = kernelWarning(loadedBlas(), hostCpuFeatures());
  if (!line.empty())
    warnings << line << "\n";
}

} // namespace ppc
