//===- runtime/exec/Executor.h - Runs one rank's schedule -------*- C++ -*-===//
//
// The one executor: it runs this rank's actions of a Schedule (Schedule.h)
// for one batch (inference) or one step (training), one handler per action
// kind:
//   F(s, m)       gathers stage s's inputs (microbatch m's slice of a model
//                 input, or a value produced or received earlier) under the
//                 copy rule of lib/ValueWalk.h; runs the stage; checks (or,
//                 on an inferring microbatch, records) the metadata of its
//                 outputs. Training: each tensor input that carries a
//                 gradient becomes a leaf of this stage's own autograd graph,
//                 and the graph is kept until the stage's backward.
//                 Evaluation (Schedule::evaluation): no graph; the loss
//                 stage computes its microbatch loss here, as B would.
//   SEND_F(e, m)  on an inferring microbatch first sends the edge's metadata
//                 header (length, then the int64 words), then the values'
//                 wire tensors as one message (runtime/exec/WirePack.h: packed
//                 into one buffer when there are several).
//   RECV_F(e, m)  on an inferring microbatch first receives the header and
//                 records it; then allocates the message's buffer from the
//                 metadata, receives it, and rebuilds the values from views
//                 of it (no second copy).
//   OUT(m)        keeps microbatch m's model outputs (inference), or, when
//                 decoding, hands them to ExecutorStep::pick.
//   SEND_TOK(m)   decoding: sends the tokens picked from microbatch m to
//                 another rank (Schedule::tokens).
//   RECV_TOK(m)   receives them there; on a rank that reads the token input
//                 they become that input of the group's next microbatch
//                 (picked on the same rank, they do so at OUT). On every
//                 rank, tokens that all are ExecutorStep::endToken mark
//                 that next microbatch as ended: its F is skipped (see
//                 ExecutorStep::endToken).
//   B(s, m)       the stage's backward: the gradients of its outputs (summed
//                 over every consumer, plus the loss on the loss stage) go
//                 back through its graph into its parameters' .grad and its
//                 input leaves, whose gradients are handed to their
//                 producers (added to a local producer's, or kept for
//                 SEND_B).
//   I(s, m)       the input half of B: only the input leaves' gradients;
//                 the graph is kept for W.
//   W(s, m)       the weight half: the parameters' gradients, from the roots
//                 I kept; then the graph is freed.
//   SEND_B(e, m)  the consumer's gradients for edge e's values, as one
//                 message (packed like SEND_F's).
//   RECV_B(e, m)  the producer receives them and adds them to its own.
// --recompute (ExecutorStep::recompute, training): F keeps only the stage's
// inputs (its leaves, and the model inputs it read) and the generator state
// it started from; its outputs are detached before they are stored or sent,
// so its graph is freed at once. The first of B or I of that microbatch runs
// the forward again with the same inputs, the same generator state (the same
// dropout masks; the generator is put back where it was afterwards) and the
// stage's buffers put back afterwards to their values before the recompute
// (BatchNorm's running statistics move once per microbatch, as without
// recompute), then runs the backward on the recomputed graph; the loss stage
// computes its loss from the recomputed output. Every schedule's actions
// allow it: I keeps the recomputed graph for W as it keeps the first one.
// Each forward, recomputed or not, runs under ExecutorPlan::precision's
// autocast (runtime/exec/Precision.h).
// Gradient messages need no metadata: a gradient has its value's forward
// metadata, and only tensors whose forward metadata says requires_grad
// (floating point, produced with a graph) carry one. Both sides of an edge
// know that metadata, so the backward sends no headers, inferred or cached.
//
// Values in flight live in one table keyed by (stage, output, microbatch)
// with their remaining local uses; a value is dropped after its last use.
//
// Metadata that did not come from this run's own inference (a cache, the
// user, a peer's header) is validated before any buffer is allocated from
// it, and every LibTorch call that can throw goes through torchCall(), so a
// run fails with one error line, never an exception.
//
// Where a rank stands (a stuck job, issue #31): when a wait for a peer fails
// (a LostRankError), the executor says where this rank is in its schedule.
// A timeout's detail ("lost rank R (DETAIL)", runtime/link/Link.h) gains
//   "; at action I of N (KIND mb M stage S); sent: rank P C, ...;
//    received: rank P C, ..."
// (one line; I counts from 1; the flush after the last action reads
// "at the final flush of N actions"; sent/received count the send and
// receive actions completed so far per peer job rank, "nothing" for none).
// And every lost rank, timeout or not, writes its status record (the
// launcher's PPC_STATUS_DIR, runtime/exec/StatusRecord.h):
//   {"rank": G, "waitingFor": P, "timedOut": true|false, "action": I,
//    "actions": N, "kind": "RECV_F", "microbatch": M, "stage": S,
//    "sent": {"P": C, ...}, "received": {"P": C, ...}}
// which the launcher reads to name the rank the job is stuck on
// (tools/ppc/StuckReport.h). A rank that waits before a run of its schedule
// (for the microbatch signatures, MetaSettle.h) says so instead.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_EXECUTOR_H
#define PPC_RUNTIME_EXEC_EXECUTOR_H

#include "lib/Manifest.h"
#include "lib/Stage.h"
#include "runtime/exec/Loss.h"
#include "runtime/exec/Microbatch.h"
#include "runtime/exec/Precision.h"
#include "runtime/exec/TensorMeta.h"
#include "runtime/link/Transport.h"
#include "runtime/platform/DeviceKind.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"

#include <ATen/core/ivalue.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace ppc {

class TraceRecorder;

/// A training step's loss (Loss.h) and where it is computed: on the stage
/// that produces model output `modelOutput` (a Tensor).
struct LossSpec : LossFunction {
  int modelOutput = 0;
  int stage = -1;
  int output = -1;
};

/// What every run of one rank's executor shares: fixed when the pipeline is
/// created.
struct ExecutorPlan {
  const Manifest *manifest = nullptr;
  const Schedule *schedule = nullptr;
  int rank = 0;
  std::map<int, Stage> *stages = nullptr;
  Transport *transport = nullptr;
  /// Where payloads (boundary values, gradients) live: the device this
  /// rank's stages run on, chosen by the pipeline (DeviceKind.h).
  c10::Device device = c10::Device(c10::kCPU);
  /// Uses of each stage output anywhere in the pipeline (consumer input
  /// slots plus model outputs): above one, a mutating consumer copies.
  std::map<std::pair<int, int>, int> globalUses;
  /// Uses of each stage output on this rank (local input slots, remote
  /// edges it is sent on, model outputs collected here).
  std::map<std::pair<int, int>, int> localUses;
  /// Training only: where the loss is computed.
  std::optional<LossSpec> loss;
  /// Whether an edge's wire tensors cross as one message per microbatch
  /// (runtime/exec/WirePack.h); the rank context sets it from
  /// LaunchEnv::coalesce (off with PPC_COALESCE=0: one message per wire
  /// tensor, for measurement; docs/runtime.md).
  bool coalesce = true;
  /// bf16: the precision every stage forward runs in; set by the
  /// rank context from RunOptions::precision.
  Precision precision = Precision::FP32;
};

/// The plan of rank `rank` running `schedule`: the given parts, and the
/// uses of each stage output counted from the manifest and the schedule
/// (model outputs count where the schedule collects them, OUT).
ExecutorPlan makeExecutorPlan(const Manifest &manifest,
                              const Schedule &schedule, int rank,
                              std::map<int, Stage> &stages,
                              Transport &transport, c10::Device device,
                              std::optional<LossSpec> loss);

/// One batch or step.
struct ExecutorStep {
  /// Microbatch m's model inputs (on ranks that read them).
  std::vector<std::vector<c10::IValue>> microbatches;
  std::vector<Signature> signatures;
  /// Whether microbatch m infers the metadata of its signature (the first
  /// microbatch of a signature whose metadata is not known yet).
  std::vector<bool> inferring;
  /// Per signature, the metadata of the values this rank needs; inferring
  /// microbatches add to it.
  std::map<std::string, MetaTable> *tables = nullptr;
  /// Training and evaluation, on the loss stage's rank: microbatch m's target
  /// and the weight of its loss (a token loss's: 1 over the batch's tokens;
  /// a row loss's: its rows over the batch's rows; Loss.h), so that the
  /// microbatch losses add up to the batch's mean loss.
  std::vector<at::Tensor> targets;
  std::vector<double> lossWeights;
  /// Where to record one event per action, if anywhere, and this run's
  /// index among the pipeline's runs (it keeps flow ids of different runs
  /// apart; every rank counts runs alike).
  TraceRecorder *trace = nullptr;
  int64_t runIndex = 0;
  /// Set by a failed execute(): the microbatch of the action that failed,
  /// or the last microbatch when the final flush of the sends failed (a
  /// streaming window names its batch from it).
  int failedMicrobatch = -1;
  /// Recompute: training keeps only each stage's inputs per
  /// microbatch and recomputes its forward for the backward (see above).
  bool recompute = false;
  /// Decoding (Schedule::tokens), on the collector's rank: OUT(m) hands
  /// microbatch m's model outputs here instead of keeping them, for every m
  /// the schedule picks from; the result (int64 token ids, one a sequence
  /// of the microbatch) is what SEND_TOK returns when the schedule returns
  /// it. Errors end the run.
  std::function<llvm::Expected<at::Tensor>(int m,
                                           std::vector<c10::IValue> outputs)>
      pick;
  /// Decoding: the rows of each group (the size of a token return) and
  /// the end-of-sequence token (-1: none). A microbatch fed tokens that all
  /// are the end token belongs to a group whose rows all ended: each of its
  /// F is skipped, unless the microbatch infers its signature's metadata.
  /// A skipped F runs no stage and no hook; it keeps zeros in its outputs'
  /// metadata, so that the schedule's messages still cross (receives
  /// posted ahead stay matched) and OUT hands zeros to `pick`, which
  /// must give the end token for rows that ended whatever their logits
  /// (Sampler.h does). Traced as SKIP.
  int64_t tokenRows = 0;
  int64_t endToken = -1;
  /// Before F(s, m): lets the job bind what stage s keeps across
  /// microbatches (decoding: the state of m's group). Errors end the run.
  std::function<llvm::Error(int stage, int m)> beforeForward;
  /// After F(s, m)'s stage has run, before its outputs are checked and
  /// kept (decoding: the time of its forwards).
  std::function<void(int stage, int m)> afterForward;
  /// Training: called once per stage of this rank, right after the last
  /// action of this run that writes the stage's parameter gradients (its
  /// last B or W in the rank's action list), so that the job can start
  /// using them (data parallel: their all-reduce) while the schedule goes
  /// on. Errors end the run.
  std::function<llvm::Error(int stage)> afterWeightGradients;
};

/// What one run of the executor produced on this rank.
struct ExecutorResult {
  /// Per model output, its part of each microbatch (on the output rank).
  std::vector<std::vector<c10::IValue>> outputParts;
  /// Training and evaluation: the sum of the weighted microbatch losses
  /// (the batch's mean loss) on the loss stage's rank, in microbatch order.
  double loss = 0;
  /// Metadata headers sent.
  int64_t metaMessagesSent = 0;
  /// Time from the start until this rank finished all of microbatch 0.
  double firstOutputMs = 0;
  /// Decoding: the forwards skipped because their group had ended.
  int64_t skippedForwards = 0;
  /// Training: per stage of this rank, the most microbatches whose forward
  /// graph (with recompute: whose inputs) was held at once.
  std::map<int, int> peakActivations;
};

/// Runs this rank's actions of `plan.schedule` over `step`. Errors: a stage
/// fails (its first error line); a value does not match its metadata
/// (a MetaMismatchError, runtime/exec/TensorMeta.h); the loss cannot be
/// computed ("cannot compute the mse loss of microbatch 0: ..."); a peer
/// is lost ("lost rank 1 (...)"); metadata for a value is missing.
llvm::Expected<ExecutorResult> execute(const ExecutorPlan &plan,
                                       ExecutorStep &step);

} // namespace ppc

#endif // PPC_RUNTIME_EXEC_EXECUTOR_H
