//===- runtime/Pipeline.h - libppc_runtime's public API ---------*- C++ -*-===//
//
// Runs a pipeline that `ppc split` produced (a manifest plus stage files) on
// the ranks of a torchrun-style launch. Each rank of the job creates one
// Pipeline with the same manifest and options and calls run(); the stages
// are placed on the ranks, the boundary shapes are inferred from the first
// real microbatch (or taken from the meta cache or the user), and the
// microbatches flow through a schedule. `ppc run` is a thin CLI over this
// header; docs/runtime.md describes the protocol and file formats.
//
// A Pipeline's life:
//   1. LaunchEnv::fromEnvironment() reads RANK, WORLD_SIZE, ...
//   2. Pipeline::create() loads this rank's stages, builds and checks the
//      schedule, and meets the other ranks (c10d TCPStore + process group),
//      every step bounded by the timeout.
//   3. run() splits the model inputs into microbatches (on the ranks whose
//      stages read model inputs), agrees with all ranks where the shape
//      metadata comes from, executes the schedule, and returns the model
//      outputs on outputRank() (concatenated along dim 0).
//   4. finish() waits until every rank is done, so no rank leaves while
//      another still needs it.
//
// Every error is one line. A peer that dies or stops answering makes every
// blocking call fail within the timeout with "lost rank R (...)".
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_PIPELINE_H
#define PPC_RUNTIME_PIPELINE_H

#include "runtime/LaunchEnv.h"
#include "runtime/ScheduleKind.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace ppc {

/// Where a run's boundary metadata came from.
enum class MetaSource { Inferred, Cache, User };
llvm::StringRef metaSourceName(MetaSource source);

/// The most microbatches a run may ask for: bounds the schedule, which is
/// built before the batch size is known.
constexpr int kMaxMicrobatches = 65536;

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
  /// machine (checkCudaDevice() in runtime/Rendezvous.h lists the errors).
  std::string device = "cpu";
  /// Bound on every wait for another rank (rendezvous, each message).
  std::chrono::milliseconds timeout{60000};
  /// Directory of the meta cache files; empty = the manifest's directory.
  std::string metaCacheDir;
  bool useMetaCache = true;
  /// A JSON file with user-given boundary metadata (docs/runtime.md);
  /// when set, no inference runs.
  std::string inputMetaPath;
  /// Intra-op threads per rank, at most 4 per core (and at least 4); 0 = the
  /// machine's cores divided by LOCAL_WORLD_SIZE.
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
};

/// What one rank did, for --stats.
struct RunStats {
  int rank = 0;
  MetaSource metaSource = MetaSource::Inferred;
  /// Metadata headers this rank sent (0 when the metadata was cached).
  int64_t metaMessagesSent = 0;
  /// Point-to-point messages of any kind this rank sent.
  int64_t messagesSent = 0;
  /// From the start of run() until this rank finished microbatch 0.
  double firstOutputMs = 0;
  /// run() from start to end.
  double totalMs = 0;
  /// Whether this rank wrote its meta cache file.
  bool cacheWritten = false;
  /// The batches these stats cover: 1 for Pipeline::run; every batch of
  /// the launch for runPipelineFiles, which sums the counts, keeps batch
  /// 0's first_output_ms and times the whole batch loop. `ppc run --stats`
  /// appends it to line() as " batches=N".
  int64_t batches = 1;

  /// One machine-parsable line: "stats: rank=0 meta=inferred
  /// meta_messages_sent=2 messages_sent=14 first_output_ms=3.1
  /// total_ms=9.8 cache_written=1".
  std::string line() const;
};

class Pipeline {
public:
  /// Loads the manifest at `manifestPath` and this rank's stages, builds
  /// and simulates the schedule, and connects to the other ranks. Errors:
  /// the manifest cannot be read; the stage count is not a multiple of
  /// WORLD_SIZE ("4 stages cannot be placed on WORLD_SIZE=3 ranks: the
  /// stage count must equal WORLD_SIZE or be a multiple of it"); a stage
  /// file is missing or does not match the manifest's hash; bad options
  /// ("--microbatches 0 is not in 1..65536", an unknown device, "--threads
  /// 100000 is not in 1..8 (4 per core), or 0 for the default"); --device
  /// cuda where this rank cannot have cuda:LOCAL_RANK ("--device cuda:
  /// this ppc's LibTorch (1.13) is a CPU-only build, ...", "... built
  /// without NCCL ...", "... sees no GPU ...", "LOCAL_WORLD_SIZE=2 ranks on
  /// this machine need a GPU each ..."); a model
  /// output that is a model input; the schedule deadlocks (a bug, reported
  /// with the stuck actions); the rendezvous fails or times out
  /// (connectTransport() in runtime/Rendezvous.h: "lost rank R (never
  /// reached the rendezvous ...)", "MASTER_PORT P is taken ...", "another
  /// job ... holds the rendezvous ...").
  static llvm::Expected<std::unique_ptr<Pipeline>>
  create(llvm::StringRef manifestPath, const LaunchEnv &env,
         const RunOptions &options);

  ~Pipeline();

  /// Whether this rank's stages read model inputs; run() ignores `inputs`
  /// on the other ranks.
  bool needsInputs() const;
  /// The rank that returns the model outputs (the rank of the last stage).
  int outputRank() const;
  int rank() const;

  /// This rank's schedule, one action per line.
  void printSchedule(llvm::raw_ostream &os) const;

  /// Runs the pipeline once over `inputs` (the model inputs, in manifest
  /// order, each a tensor with the batch along dim 0, on any device; only
  /// used where needsInputs()). Returns the model outputs (concatenated
  /// over the microbatches; a tuple's elements are separate entries; every
  /// tensor on the CPU) on outputRank(), an empty vector elsewhere. Errors: the
  /// inputs do not fit the model ("the model takes 2 inputs, got 1"; "input 0
  /// has no batch dimension"; "model inputs have different batch sizes (5 and
  /// 4)";
  /// "--microbatches 8 exceeds the batch size 5"); a stage fails (its first
  /// error line); a value does not match its metadata ("stage 2 input 'x':
  /// expected float32[2,64], got float32[2,63]"); a peer is lost ("lost
  /// rank 1 (...)"); a user meta file is unreadable or incomplete. A
  /// missing, stale or corrupt meta cache is not an error: a warning, then
  /// inference.
  llvm::Expected<std::vector<c10::IValue>>
  run(const std::vector<c10::IValue> &inputs);

  /// Whether the model returns a tuple (else outputs hold one value).
  bool outputIsTuple() const;

  /// Writes the trace if one is recorded (RunOptions::tracePath), then
  /// waits until every rank has called finish(). Errors: "lost rank R", the
  /// trace cannot be written.
  llvm::Error finish();

  const RunStats &stats() const;

  /// The number of model inputs (run() takes them in manifest order).
  size_t inputCount() const;

  /// The input root: the lowest rank whose stages read model inputs.
  int inputRoot() const;

  /// Replaces `bytes` on every other rank with those of the input root
  /// (the lowest rank whose stages read model inputs), so that all ranks
  /// take the input root's view of something only input ranks know (how
  /// many batches there are). Every rank must call it. Errors: "lost rank R
  /// (...)"; more than 64 MiB.
  llvm::Error shareFromInputRoot(std::string &bytes);

private:
  /// Trainer (runtime/Trainer.h) runs the same set-up with a training
  /// schedule.
  friend class Trainer;
  struct Impl;
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The most batches one input may hold (a list or a directory), and the
/// most runs --repeat may ask for.
constexpr int64_t kMaxBatches = 1000000;
constexpr int64_t kMaxRepeat = 1000000;

/// The whole of `ppc run` for one rank: creates the pipeline, reads
/// `inputPath` where needed, runs every batch it holds `repeat` times
/// (1..kMaxRepeat), writes the outputs of the last repetition to
/// `outputPath` on the output rank, and finishes. The input is one batch (a
/// file loadTensors reads; the output is then a tensor, or a tuple if the
/// model returns one), a list of batches (loadInputBatches; the output is a
/// list of such outputs, written after the last batch), or a directory of
/// one-batch .pt files run in bytewise name order (the output is a
/// directory, created if missing, receiving one file of the same name per
/// input file as its batch completes); docs/runtime.md, "Many batches per
/// launch". The input root's view of the input and of `repeat` is shared
/// with every rank. `schedule` (if not null) receives the printed schedule
/// before the run. Returns the stats of the whole launch. Errors: those of
/// Pipeline::create, run (prefixed with the batch when there are several:
/// "batch 2 ('c.pt'): stage 0 failed: ...") and finish; "--repeat 0 is not
/// in 1..1000000"; an --output that would replace what the run reads
/// ("--output 'in' is the input directory; refusing to overwrite it"); an
/// unreadable input ("cannot read input 'x.pt': ...", "input directory 'd'
/// holds no .pt files", "input 'x.pt' batch 1: the model takes 2 inputs,
/// got 1"); input ranks that see different inputs ("the input on rank 1
/// differs from the input on rank 0 (a list of 2 batches vs a list of 3
/// batches)"); an unwritable output.
llvm::Expected<RunStats>
runPipelineFiles(llvm::StringRef manifestPath, llvm::StringRef inputPath,
                 llvm::StringRef outputPath, const LaunchEnv &env,
                 const RunOptions &options,
                 llvm::raw_ostream *schedule = nullptr, int64_t repeat = 1);

} // namespace ppc

#endif // PPC_RUNTIME_PIPELINE_H
