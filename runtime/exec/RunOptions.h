//===- runtime/exec/RunOptions.h - How a rank runs a pipeline ---*- C++ -*-===//
//
// The options every rank of a run is created with (microbatches, schedule,
// device, link, timeout, meta cache, threads, trace, precision) and where a
// run's boundary metadata came from. Part of libppc_runtime's public API
// (through Pipeline.h); the rank context, the metadata settling and the
// trainer read it too, so it lives below the front ends.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_RUNOPTIONS_H
#define PPC_RUNTIME_EXEC_RUNOPTIONS_H

#include "lib/WeightOptions.h"
#include "runtime/exec/Precision.h"
#include "runtime/link/Agreement.h"
#include "runtime/schedule/ScheduleKind.h"

#include "llvm/ADT/StringRef.h"

#include <chrono>
#include <string>

namespace llvm {
class raw_ostream;
}

namespace ppc {

/// Where a run's boundary metadata came from.
enum class MetaSource { Inferred, Cache, User };
/// "inferred", "cache" or "user" (--stats, --stats-json).
llvm::StringRef metaSourceName(MetaSource source);

struct RunOptions {
  /// Microbatches the batch is split into (torch.tensor_split along dim 0),
  /// 1..kMaxMicrobatches.
  int microbatches = 1;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  /// Where the stages run: "cpu" (values travel over Gloo) or "cuda".
  /// With "cuda" each rank puts its stages on cuda:LOCAL_RANK, run() moves
  /// the inputs there and returns the outputs on the CPU, shape inference
  /// runs on the CUDA values, and boundary values travel over NCCL (one
  /// two-rank group per channel and direction) while the start-up
  /// agreement, metadata headers, gathers and barriers stay CPU messages
  /// over Gloo. Metadata holds no device, so a meta cache written by a CPU
  /// run serves a CUDA run and the other way round. Needs a ppc built
  /// against a LibTorch with CUDA and NCCL, and a GPU per rank on each
  /// machine (checkCudaDevice() in runtime/link/Rendezvous.h lists the errors).
  std::string device = "cpu";
  /// Bound on every wait for another rank (rendezvous, each message):
  /// kMinTimeout (1 ms) to kMaxDuration (7 days), runtime/platform/Duration.h.
  std::chrono::milliseconds timeout{60000};
  /// Which link carries CPU tensors between ranks: "auto" (shared memory
  /// to ranks on this host, Gloo to the others), "gloo" (Gloo only) or
  /// "shm" (shared memory; every rank must be on this host, else an error
  /// names a rank on another): linkPolicyNames() in runtime/link/Link.h.
  /// Every rank must pass the same. ppc's --link, default PPC_LINK;
  /// docs/runtime.md, "Links".
  std::string link = "auto";
  /// Directory of the meta cache files; empty = the manifest's directory.
  std::string metaCacheDir;
  bool useMetaCache = true;
  /// A JSON file with user-given boundary metadata (docs/runtime.md);
  /// when set, no inference runs.
  std::string inputMetaPath;
  /// Intra-op threads per rank, at most 4 per core (and at least 4 are
  /// allowed); 0 = the machine's cores divided by LOCAL_WORLD_SIZE.
  int threads = 0;
  /// Whether LibTorch's own glog diagnostics (c10d socket warnings, ...)
  /// print. Off: Pipeline::create raises glog's threshold process-wide, so
  /// that a failure is one error line.
  bool torchLogs = false;
  /// If set, every run's actions are recorded and finish() writes them to
  /// this file (from rank 0) as a Chrome trace (docs/trace.md).
  std::string tracePath;
  /// Where warnings ("warning: ...") go; stderr when null.
  llvm::raw_ostream *warnings = nullptr;
  /// Streaming (Pipeline::submit): the most microbatches a window holds,
  /// 0..kMaxMicrobatches. A window takes max(1, streamMicrobatches /
  /// microbatches) batches; 0 (or a bound below `microbatches`) runs each
  /// batch on its own, as run() does.
  int streamMicrobatches = kDefaultStreamMicrobatches;
  static constexpr int kDefaultStreamMicrobatches = 256;
  /// The precision the stages' forwards run in (runtime/exec/Precision.h):
  /// bf16 runs them under autocast to bfloat16 on the stages' device, so
  /// boundary values are bf16 where autocast made them so. Part of the meta
  /// cache key (bf16 boundary metadata is not fp32's). `ppc train
  /// --precision`.
  Precision precision = Precision::FP32;
  /// The checkpoint each rank reads its stages' weights from, when the
  /// stage files carry none (a program exported on the meta device) or are
  /// to take others: lib/WeightBinding.h. A rank reads only its own
  /// stages' tensors, mapped in place unless it trains them.
  WeightOptions weights;
  /// What every rank of the job must have alike beyond these options (a
  /// front end's own flags, its data files' digests), checked at the
  /// rendezvous (runtime/link/Agreement.h). The rank context adds the
  /// manifest's digest and the options above that shape the run
  /// (microbatches, schedule, precision, device, link, stream window,
  /// user metadata) under their ppc flag names, unless recorded here.
  Agreement agreement;
};

/// The meta cache directory of a run with `options` of the manifest at
/// `manifestPath`: RunOptions::metaCacheDir, or the manifest's directory.
std::string metaCacheDirOf(const RunOptions &options,
                           llvm::StringRef manifestPath);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_RUNOPTIONS_H
