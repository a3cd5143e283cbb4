//===- runtime/run/Pipeline.h - libppc_runtime's public API -----*- C++ -*-===//
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
// Streaming (instead of one run() per batch): submit() queues batches and
// next() hands out their outputs in order. The batches run in windows of
// windowBatches() consecutive batches, each one execution of the schedule
// over all their microbatches, on a thread of the pipeline's own
// (runtime/run/WindowStream.h) while the caller goes on submitting: the
// window under way and the next one are in flight, so each rank starts the
// next window as soon as its part of the previous one is done. No drain:
// a batch's first microbatches enter the first stage while the previous
// batch's last are still in later stages, within a window (one schedule)
// and across windows, since nothing between two windows waits for a later
// stage: the input root sends the next window's microbatch signatures
// without waiting for them to be received, and the other ranks take them
// when they get there (MetaSettler::prepareMicrobatches; only a window
// with a signature not seen before agrees on its metadata with every rank,
// and so waits for them). RunOptions::streamMicrobatches bounds a window.
//
// Threads: while submitted batches have not run, only the stream's thread
// uses the transport; run(), finish() and shareFromInputRoot() run on the
// caller's thread when it is idle (run() and shareFromInputRoot() refuse
// while batches are in flight, finish() waits for them). One thread at a
// time calls the Pipeline's methods.
//
// Every error is one line. A peer that dies or stops answering makes every
// blocking call fail within the timeout with "lost rank R (...)".
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_RUN_PIPELINE_H
#define PPC_RUNTIME_RUN_PIPELINE_H

#include "runtime/exec/RunOptions.h"
#include "runtime/link/LaunchEnv.h"
#include "runtime/platform/Duration.h"

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

/// What one rank did, for --stats.
struct RunStats {
  int rank = 0;
  MetaSource metaSource = MetaSource::Inferred;
  /// Metadata headers this rank sent (0 when the metadata was cached).
  int64_t metaMessagesSent = 0;
  /// Point-to-point messages of any kind this rank sent.
  int64_t messagesSent = 0;
  /// From the end of run()'s start-up agreement (every rank has entered
  /// run() and settled the microbatches) until this rank finished
  /// microbatch 0: a wait for slower ranks' set-up is not counted, so the
  /// library and `ppc run` measure the same.
  double firstOutputMs = 0;
  /// run() from start to end.
  double totalMs = 0;
  /// Whether this rank wrote its meta cache file.
  bool cacheWritten = false;
  /// The batches these stats cover: 1 for Pipeline::run, the window's for
  /// a streamed batch (the other fields then cover the window, and
  /// firstOutputMs is its first batch's); every batch of
  /// the launch for `ppc run`, which sums the counts, keeps batch 0's
  /// first_output_ms, times the whole batch loop and appends it to line()
  /// as " batches=N".
  int64_t batches = 1;
  /// The links this rank's messages took (Transport::linksUsed():
  /// "shm", "gloo", "shm+gloo"); line() ends with " link=..." when set.
  std::string link;
  /// Checkpoint bytes this rank's stages read (--weights): line() says
  /// " weight_bytes=N" after cache_written when a checkpoint was given.
  uint64_t weightBytes = 0;
  bool weightsGiven = false;

  /// One machine-parsable line: "stats: rank=0 meta=inferred
  /// meta_messages_sent=2 messages_sent=14 first_output_ms=3.1
  /// total_ms=9.8 cache_written=1", then the process's peak resident
  /// memory and its anonymous resident memory now (" peak_rss_mb=512.3
  /// rss_anon_mb=101.0", from getrusage and /proc/self/status), the link
  /// and the BLAS.
  std::string line() const;
};

class Pipeline {
public:
  /// Loads the manifest at `manifestPath` and this rank's stages, builds
  /// and simulates the schedule, and connects to the other ranks. Errors,
  /// each one line: an option out of range (an OptionError naming the
  /// RunOptions field and its rule: "microbatches 0 is not an integer in
  /// 1..65536", "timeout 0 is not a number of milliseconds in
  /// 1..604800000"; likewise threads) or an unknown device;
  /// the manifest cannot be read; its stages cannot be placed on WORLD_SIZE
  /// ranks (their count must equal WORLD_SIZE or be a multiple of it); a
  /// stage file is missing or does not match the manifest's hash; device
  /// "cuda" where this rank cannot have cuda:LOCAL_RANK (checkCudaDevice()
  /// in runtime/link/Rendezvous.h); a model output that is a model input; the
  /// schedule deadlocks (a bug, reported with the stuck actions); the
  /// rendezvous fails or times out (connectTransport() in
  /// runtime/link/Rendezvous.h: a lost rank, a taken MASTER_PORT, another job's
  /// rendezvous).
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
  /// The number of stages of the manifest (on every rank).
  int stageCount() const;

  /// This rank's schedule, one action per line.
  void printSchedule(llvm::raw_ostream &os) const;

  /// Runs the pipeline once over `inputs` (the model inputs, in manifest
  /// order, each a tensor with the batch along dim 0, on any device; only
  /// used where needsInputs()). Returns the model outputs (concatenated
  /// over the microbatches; a tuple's elements are separate entries; every
  /// tensor on the CPU) on outputRank(), an empty vector elsewhere. Errors:
  /// the inputs do not fit the model (their count, a missing batch
  /// dimension, different batch sizes, fewer rows than microbatches: an
  /// OptionError on microbatches); a stage fails (its first error line); a
  /// value does not match its metadata (a MetaMismatchError, or a
  /// StaleCacheError when the meta cache gave the metadata and was removed
  /// for it); a peer is lost; a user meta file is unreadable or incomplete;
  /// batches submitted and not yet run (flush() first). A missing, stale
  /// or corrupt meta cache file is not an error: a warning, then inference.
  /// Runs on the caller's thread.
  llvm::Expected<std::vector<c10::IValue>>
  run(const std::vector<c10::IValue> &inputs);

  /// Whether the model returns a tuple (else outputs hold one value).
  bool outputIsTuple() const;

  /// Streaming. Every rank calls the same sequence of submit() and flush()
  /// (like run(), the windows they form are collective); next() is local.
  ///
  /// submit() queues one batch (`inputs` as for run(); only used where
  /// needsInputs(), and held until its window has run) and returns; a window
  /// closes when windowBatches() batches are queued in it, and the stream's
  /// thread runs closed windows, in order, in the background. Backpressure:
  /// submit() first waits while 2 * windowBatches() batches are in flight
  /// (the window under way and the next), so at most 2 * windowBatches() *
  /// microbatches microbatches are, and a caller that submits faster than
  /// the pipeline computes is held back. `label` names the batch in errors
  /// ("batch 3 ('c.pt')"); empty: "batch N", N counting this pipeline's
  /// submit() calls from 0 (a refused batch counts). Errors, each prefixed
  /// with the label of the batch it concerns: inputs that do not fit the
  /// model (at once, on the ranks that read them; the batches queued in the
  /// open window are then dropped); a window's failure in the background,
  /// reported whole by the next submit() or flush() (run()'s errors, for
  /// the batch whose microbatch failed; a failure before the window's
  /// microbatches run, such as a signature agreement, names the window's
  /// first batch; microbatch numbers in the message count over the window).
  /// After a window's failure the batches not run are dropped and the
  /// pipeline is not usable (later calls say "the stream failed earlier
  /// (...); it runs no more batches"), as after a failed run(); outputs of
  /// windows that completed stay available from next().
  llvm::Error submit(std::vector<c10::IValue> inputs, std::string label = {});
  /// Closes the open window, if it holds batches (a shorter window), and
  /// waits until every submitted batch has run. Errors: submit()'s.
  llvm::Error flush();
  /// The outputs of the oldest submitted batch whose window has run and
  /// that next() has not handed out yet (as run() returns them: on
  /// outputRank() the model outputs on the CPU, an empty vector on other
  /// ranks, so that every rank gets one entry per batch); nullopt when
  /// there is none (its window has not run yet: submit more, or flush(),
  /// which waits). Never waits. stats() then covers that batch's window;
  /// `firstOfWindow`, if given, says whether the batch is its window's
  /// first (ppc run adds up windows' stats there).
  std::optional<std::vector<c10::IValue>> next(bool *firstOfWindow = nullptr);
  /// Batches per window: max(1, streamMicrobatches / microbatches).
  int windowBatches() const;
  /// Batches submitted whose window has not run yet (queued, or in the
  /// window under way).
  int queuedBatches() const;

  /// Runs the batches still queued (flush()), writes the trace if one is
  /// recorded (RunOptions::tracePath), then waits until every rank has
  /// called finish(). Errors: flush()'s, "lost rank R", the trace cannot be
  /// written.
  llvm::Error finish();

  /// This rank's stats of its last run(), or of the window of the batch
  /// next() handed out last.
  const RunStats &stats() const;

  /// The number of model inputs (run() takes them in manifest order).
  size_t inputCount() const;
  /// The model's inputs by name, in order (a .pt2 program's keyword names).
  std::vector<std::string> inputNames() const;

  /// The input root: the lowest rank whose stages read model inputs.
  int inputRoot() const;

  /// Replaces `bytes` on every other rank with those of the input root
  /// (the lowest rank whose stages read model inputs), so that all ranks
  /// take the input root's view of something only input ranks know (how
  /// many batches there are). Every rank must call it, with no submitted
  /// batch in flight. Errors: "lost rank R (...)"; more than 64 MiB;
  /// batches in flight (flush() first).
  llvm::Error shareFromInputRoot(std::string &bytes);

private:
  struct Impl;
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace ppc

#endif // PPC_RUNTIME_RUN_PIPELINE_H
