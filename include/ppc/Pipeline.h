//===- ppc/Pipeline.h - Pipeline inference from a C++ program ---*- C++ -*-===//
//
// Part of libppc_runtime's public API (ppc/ppc.h): runs a pipeline that
// `ppc split` produced (a manifest plus stage files) on the ranks of a
// torchrun-style launch, as `ppc run` does. Start the program on every rank
// (`ppc launch --nproc-per-node N -- my_program ...`, or torchrun); each
// rank constructs one Pipeline with the same manifest and options, calls
// run() once per batch (or streams them: submit(), next(), flush()) and
// finish() at the end. docs/library.md shows a
// complete program and how to build it against an installed ppc.
//
// Vocabulary: std types, LibTorch values (c10::IValue, at::Tensor, which is
// torch::Tensor) in and out, errors thrown as ppc::api::Error (ppc/Error.h).
// No LLVM header is needed.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PUBLIC_PIPELINE_H
#define PPC_PUBLIC_PIPELINE_H

#include "ppc/Error.h"

#include <ATen/core/ivalue.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ppc {
class Pipeline;
} // namespace ppc

namespace ppc::api {

/// How a pipeline runs; the fields mirror `ppc run`'s flags
/// (docs/runtime.md), each checked by the constructor.
struct RunOptions {
  /// Microbatches each batch is split into along dim 0, 1..65536.
  int microbatches = 1;
  /// The schedule, by `ppc run --schedule`'s names: "gpipe", "1f1b" or
  /// "looped-bfs".
  std::string schedule = "1f1b";
  /// "cpu", or "cuda": each rank's stages on cuda:LOCAL_RANK, values over
  /// NCCL (needs a ppc built against a LibTorch with CUDA and NCCL).
  std::string device = "cpu";
  /// Bound on every wait for another rank, 1 ms to 7 days.
  std::chrono::milliseconds timeout{60000};
  /// Whether the boundary metadata is read from and saved to the meta
  /// cache, in `metaCacheDir` (empty: the manifest's directory).
  bool useMetaCache = true;
  std::string metaCacheDir;
  /// A JSON file with user-given boundary metadata (docs/runtime.md);
  /// empty: inferred from the first microbatch (or cached).
  std::string inputMetaPath;
  /// Intra-op threads per rank; 0: the machine's cores divided by
  /// LOCAL_WORLD_SIZE.
  int threads = 0;
  /// Whether LibTorch's own glog diagnostics print (off: the constructor
  /// raises glog's threshold process-wide).
  bool torchLogs = false;
  /// If set, finish() writes a Chrome trace of every run here from rank 0
  /// (docs/trace.md).
  std::string tracePath;
  /// Streaming (submit()): the most microbatches a window holds, 0..65536;
  /// a window runs max(1, streamMicrobatches / microbatches) batches as one
  /// execution of the schedule, and two windows are in flight at most.
  /// 0: each batch on its own window.
  int streamMicrobatches = 256;
  /// `ppc run --weights`: the safetensors checkpoint (a file, or a
  /// directory of shards with model.safetensors.index.json) each rank reads
  /// its own stages' weights from, for stages split from a program exported
  /// without weights (docs/weights.md); empty: none. `weightsPrefix`: the
  /// prefix the program's names carry and the checkpoint's lack (empty:
  /// recognized).
  std::string weights;
  std::string weightsPrefix;
};

/// What one rank did in its last run(), as `ppc run --stats` reports it.
struct RunStats {
  int rank = 0;
  /// Where the boundary metadata came from: "inferred", "cache" or "user".
  std::string metaSource = "inferred";
  /// Metadata headers this rank sent (0 when it came from the cache or the
  /// user), and point-to-point messages of any kind.
  int64_t metaMessagesSent = 0;
  int64_t messagesSent = 0;
  /// From the moment every rank has entered run() and settled the batch's
  /// microbatches (the run's start-up agreement) until this rank finished
  /// microbatch 0: waiting for ranks that are still setting up, loading
  /// their stages or reading their inputs, is not counted. `ppc run`
  /// measures the same (docs/runtime.md, Stats).
  double firstOutputMs = 0;
  /// run() from its start to its end, waits included.
  double totalMs = 0;
  /// Whether this rank wrote its meta cache file.
  bool cacheWritten = false;

  /// The `ppc run --stats` line, without its " batches=N": "stats: rank=0
  /// meta=inferred meta_messages_sent=2 messages_sent=14
  /// first_output_ms=3.100 total_ms=9.800 cache_written=1".
  std::string line() const;
};

class Pipeline {
public:
  /// Reads this rank's launch from the environment (RANK, WORLD_SIZE,
  /// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as ppc launch
  /// and torchrun set them), loads the manifest at `manifestPath` and this
  /// rank's stages, builds the schedule and meets the other ranks, every
  /// wait bounded by options.timeout. Throws: a missing or malformed
  /// variable ("RANK is not set; start ppc run under ppc launch or
  /// torchrun"); an option out of range ("microbatches 0 is not an integer
  /// in 1..65536", "schedule 'x' is not gpipe, 1f1b or looped-bfs"); an
  /// unreadable manifest or stage file; stages that cannot be placed on
  /// WORLD_SIZE ranks; a failed rendezvous ("lost rank R (...)").
  explicit Pipeline(const std::string &manifestPath,
                    const RunOptions &options = {});
  ~Pipeline();
  Pipeline(Pipeline &&) noexcept;
  Pipeline &operator=(Pipeline &&) noexcept;

  /// Whether this rank's stages read model inputs; run() ignores its
  /// `inputs` on the other ranks (they may pass an empty vector).
  bool needsInputs() const;
  /// How many inputs the model takes.
  size_t inputCount() const;
  /// The model's inputs by name, in order (a torch.export program's
  /// keyword names, "input_ids", "cache_position"; TorchScript's argument
  /// names). loadInputs(path, inputNames()) reads a file that gives them by
  /// name, and run() takes them by name too.
  std::vector<std::string> inputNames() const;
  /// This process's rank, and the rank whose run() returns the outputs.
  int rank() const;
  int outputRank() const;
  /// Whether the model returns a tuple (saveOutputs' `asTuple`).
  bool outputIsTuple() const;

  /// Runs the pipeline once over `inputs` (the model inputs in order, each
  /// a tensor with the batch along dim 0, e.g. loadInputs()). Every rank
  /// must call it. Returns the model outputs, concatenated over the
  /// microbatches, on the CPU, one entry per element of a returned tuple,
  /// on outputRank(); an empty vector on the other ranks. Throws: inputs
  /// that do not fit the model ("the model takes 2 inputs, got 1",
  /// "microbatches 8 exceeds the batch size 5"); a stage's failure ("stage
  /// 0 failed: ..."); a lost peer ("lost rank 1 (...)").
  std::vector<c10::IValue> run(const std::vector<c10::IValue> &inputs);
  /// run() with the inputs by name (every one of inputNames(), no other).
  /// Throws: run()'s; "the model takes no input named 'ids' (its inputs:
  /// input_ids, cache_position)", "no value for model input
  /// 'cache_position'".
  std::vector<c10::IValue>
  run(const std::map<std::string, c10::IValue> &inputsByName);

  /// Streaming: the batches run in windows of windowBatches() consecutive
  /// batches, each one execution of the schedule over all their
  /// microbatches, on a thread of the pipeline's own while the caller goes
  /// on submitting, so the pipeline stays full across batches and across
  /// windows (no drain: the next window's microbatches enter the first
  /// stage while the previous one's leave the last). Every rank calls
  /// submit() and flush() in the same sequence; next() is local. One thread
  /// at a time calls a Pipeline's methods.
  ///
  /// Queues one batch (`inputs` as for run(); kept until its window runs)
  /// and returns; a window runs once windowBatches() batches are queued in
  /// it (or at flush()). Backpressure: first waits while 2 *
  /// windowBatches() batches are in flight (the window under way and the
  /// next), so at most 2 * windowBatches() * microbatches microbatches are.
  /// Throws run()'s errors prefixed with the batch they concern, "batch N:
  /// ..." (N counts submit() calls from 0): inputs that do not fit the
  /// model at once (the batches queued for the next window are then
  /// dropped), a window's failure in the background at the next submit() or
  /// flush(); after a window's failure the pipeline runs no more batches
  /// ("the stream failed earlier (...)"), and the outputs of the windows
  /// that completed before it stay available from next().
  void submit(const std::vector<c10::IValue> &inputs);
  /// Runs the queued batches, if any, as one window, and waits until every
  /// submitted batch has run. Throws: submit()'s.
  void flush();
  /// The outputs of the oldest submitted batch whose window has run and
  /// that next() has not returned yet: as run() returns them on
  /// outputRank(), an empty vector on other ranks (one entry per batch on
  /// every rank); std::nullopt when none is ready (its window is still
  /// queued or running: submit more, or flush(), which waits). Never waits.
  std::optional<std::vector<c10::IValue>> next();
  /// Batches per window, and batches submitted whose window has not run
  /// (queued, or under way).
  int windowBatches() const;
  int queuedBatches() const;

  /// Runs the batches still queued (flush()), writes the trace if one is
  /// recorded, then waits until every rank has called finish(), so no rank
  /// leaves while another still needs it. Throws: flush()'s; "lost rank R
  /// (...)"; the trace cannot be written.
  void finish();

  /// This rank's statistics of its last run(), or of the window of the
  /// batch next() returned last.
  RunStats stats() const;

  /// This rank's schedule, one action per line (`ppc run
  /// --print-schedule`).
  std::string schedule() const;

private:
  std::unique_ptr<ppc::Pipeline> impl_;
};

} // namespace ppc::api

#endif // PPC_PUBLIC_PIPELINE_H
