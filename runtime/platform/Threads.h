//===- runtime/platform/Threads.h - Bounding a rank's thread pools --------===//
//
// A rank asked to use N threads must not run more than N compute threads,
// whatever libraries LibTorch was built with. at::set_num_threads reaches
// only LibTorch's own intra-op pool (OpenMP here) and, where LibTorch was
// built with MKL, MKL. Debian's LibTorch calls BLAS through libblas.so.3,
// which is usually OpenBLAS's pthread build: it starts its own pool when it
// is loaded, sized from OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
// OMP_NUM_THREADS (else the cores), and ignores OpenMP's setting; so a
// "1-thread" rank would still multiply matrices on every core.
//
// What boundThreads(N) bounds:
//   - LibTorch's intra-op pool (at::set_num_threads(N): OpenMP, and MKL
//     and the pthreadpool where LibTorch has them);
//   - OpenBLAS (openblas_set_num_threads, or GotoBLAS's
//     goto_set_num_threads), MKL's own threading layer (MKL_Set_Num_Threads)
//     and BLIS (bli_thread_set_num_threads), each if the process has it
//     loaded, found with dlsym, so no relinking is needed and a LibTorch
//     without them is fine. OpenBLAS is only lowered, to min(N, the size of
//     the pool it started when loaded): ppc never starts BLAS threads that
//     the environment did not ask for, and the pool cannot shrink, so its
//     extra threads stay, asleep. Its size is thus the environment's
//     choice: ppc launch starts workers with OMP_NUM_THREADS = their share
//     of the cores (the default N; see Launcher.cpp); under torchrun, which
//     sets OMP_NUM_THREADS=1, BLAS computes on one thread whatever N is
//     (set OMP_NUM_THREADS, or OPENBLAS_NUM_THREADS, to allow more);
//   - LibTorch's inter-op pool (torch.jit.fork tasks), to 1 thread, so
//     forks run one at a time, each with the intra-op threads. That is only
//     possible before the pool first runs and once per process; later calls
//     leave it as it is.
// What it does not bound: threads that wait rather than compute (Gloo's
// and NCCL's I/O threads, the c10d store, CUDA's), and pools of libraries
// that offer no such call (ATLAS is sized when built).
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PLATFORM_THREADS_H
#define PPC_RUNTIME_PLATFORM_THREADS_H

#include "lib/NumberRules.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace ppc {

/// The cores this process may run on: the size of its CPU affinity mask
/// (taskset, cgroup cpusets), else std::thread::hardware_concurrency(); at
/// least 1.
int availableCores();

/// Each rank's share of the cores when `localWorldSize` ranks share this
/// machine: max(1, availableCores() / localWorldSize). A localWorldSize
/// below 1 counts as 1.
int defaultThreads(int localWorldSize);

/// One CPU's time as /proc/stat counts it, in jiffies: idle (idle and
/// iowait) and total.
struct CpuTime {
  uint64_t idle = 0, total = 0;
};
/// The per-CPU lines ("cpuN user nice system idle iowait ...") of
/// /proc/stat's `text`, by N; the machine-wide "cpu" line and malformed
/// lines are left out.
std::map<int, CpuTime> parseCpuTimes(const std::string &text);

/// How many of this process's cores (availableCores()) no process keeps
/// busy: the idle share of each one's time over `window`, from /proc/stat,
/// summed. Nullopt where /proc/stat cannot be read or names none of them.
std::optional<double> idleCores(std::chrono::milliseconds window);

/// The threads of a rank that was given none: defaultThreads(), lowered
/// to this rank's share of idleCores() (rounded, at least 1) when other
/// processes keep cores busy as it starts. An intra-op thread whose core
/// is taken makes every parallel region wait for it (beside one busy loop
/// on the other core of 2, a decode step took 3.4 s with 2 threads against
/// 1.9 s with 1; bench 44.t), so a rank takes only the cores it finds
/// free. Samples the cores for 60 ms, and only when defaultThreads() is
/// above 1.
int rankDefaultThreads(int localWorldSize);

/// What RunOptions::threads (ppc run --threads) takes: 0 for the default,
/// else at most 4 threads per core (and at least 4 in all).
IntegerRule threadsRule();

/// Bounds this process's compute threads to `threads` (below 1 counts as
/// 1) as the file comment describes. Call it once at start-up, before the
/// first tensor operation: an inter-op pool that already ran is left as it
/// is. Never fails; a library that is not loaded is skipped.
void boundThreads(int threads);

/// The address of `name` (a BLAS function such as openblas_get_corename)
/// in the process, or null: first in the global scope (ppc links LibTorch,
/// and so BLAS, directly), then among LibTorch's own dependencies, which a
/// program that dlopen()ed libppc_runtime with RTLD_LOCAL keeps out of the
/// global scope. Also used by runtime/platform/Blas.cpp.
void *findBlasSymbol(const char *name);

} // namespace ppc

#endif // PPC_RUNTIME_PLATFORM_THREADS_H
