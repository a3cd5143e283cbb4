//===- runtime/exec/ExecutorState.h - The executor's state ------*- C++ -*-===//
//
// Internal to the executor: only runtime/exec/Executor*.cpp include this
// header. The public contract is runtime/exec/Executor.h.
//
// The Executor class holds one rank's run of a schedule: the values in
// flight (keyed by (stage, output, microbatch) with their remaining local
// uses), the forwards kept for their backwards, the gradients summed so far
// and the receives posted ahead. Its handlers, one per action kind, share
// that state and live in three files:
//   Executor.cpp          the value table (store, take, metaFor, asLeaves),
//                         tracing, run()'s dispatch, makeExecutorPlan and
//                         execute;
//   ExecutorCompute.cpp   F, OUT, B, I, W, recompute and the loss;
//   ExecutorMessages.cpp  SEND_F, RECV_F, SEND_B, RECV_B, metadata headers
//                         and receive-ahead.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_EXEC_EXECUTORSTATE_H
#define PPC_RUNTIME_EXEC_EXECUTORSTATE_H

#include "runtime/exec/Executor.h"
#include "runtime/exec/WirePack.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ppc::exec_detail {

/// A value of one microbatch: (stage, output, microbatch).
using ValueKey = std::tuple<int, int, int>;

/// Whether a tensor described by `meta` carries a gradient.
inline bool carriesGradient(const TensorMeta &meta) {
  return meta.requiresGrad && at::isFloatingType(meta.dtype);
}

/// Adds `g` into slot `k` of `sum` (an undefined slot takes `g` as is).
inline void accumulate(std::vector<at::Tensor> &sum, size_t k,
                       const at::Tensor &g) {
  if (!g.defined())
    return;
  if (sum.size() <= k)
    sum.resize(k + 1);
  sum[k] = sum[k].defined() ? sum[k] + g : g;
}

/// The buffers one receive action (RECV_F, RECV_B) receives into: its
/// message (WirePack.h), whose wire tensors are, for RECV_F, each value's in
/// edge order (`counts[k]` of value k), for RECV_B the gradients in
/// forEachGradient() order.
struct Incoming {
  WireMessage message;
  std::vector<size_t> counts;
};

/// A stage's forward of one microbatch, kept for its backward.
struct SavedForward {
  /// Per input slot, its tensors as this stage's leaves (undefined where no
  /// gradient flows), and where the slot's value came from.
  std::vector<std::vector<at::Tensor>> leaves;
  std::vector<c10::IValue> outputs;
  /// After I: the roots and their gradients, for W.
  std::vector<at::Tensor> roots, rootGrads;
  /// Recompute: per input slot, the value the stage read (after its leaves
  /// were cut, before the copy rule), and the device generator's state at
  /// the start of the forward; `outputs` is empty until recomputed.
  bool recompute = false;
  std::vector<c10::IValue> inputs;
  at::Tensor generatorState;
};

/// One rank's run of one step (see Executor.h); every handler shares its
/// state.
class Executor {
public:
  Executor(const ExecutorPlan &plan, ExecutorStep &step)
      : plan(plan), manifest(*plan.manifest), schedule(*plan.schedule),
        step(step), training(plan.schedule->training) {}

  llvm::Expected<ExecutorResult> run();

private:
  const ExecutorPlan &plan;
  const Manifest &manifest;
  const Schedule &schedule;
  ExecutorStep &step;
  const bool training;
  ExecutorResult result;

  struct Slot {
    c10::IValue value;
    int remaining = 0;
  };
  /// Values held on this rank and how many of their uses are left.
  std::map<ValueKey, Slot> values;
  /// Training: forward graphs awaiting their backward, by (stage, mb).
  std::map<std::pair<int, int>, SavedForward> saved;
  std::map<int, int> live;
  /// On the loss stage's rank (training, evaluation): each microbatch's
  /// weighted loss, in double, detached; summed in microbatch order after
  /// the last action, so that every schedule of a batch sums alike.
  std::vector<at::Tensor> lossParts;
  /// Adds microbatch m's weighted loss `loss` to lossParts.
  void keepLoss(int m, const at::Tensor &loss);
  /// Training: gradients of this rank's stage outputs, summed over the
  /// consumers seen so far, per tensor of the value.
  std::map<ValueKey, std::vector<at::Tensor>> outputGrads;
  /// Receive-ahead: the index of the action running, the first action not
  /// yet considered for posting its receives ahead, the receive actions
  /// posted and not run yet, and, per posted action, its buffers.
  size_t current = 0;
  size_t aheadCursor = 0;
  int postedAhead = 0;
  std::map<size_t, Incoming> posted;
  /// Posts the receives of the actions from `next` on (every earlier action
  /// has run) ahead of need, in action order, until kRecvAhead are posted
  /// or one cannot be posted yet (its metadata is not known: an inferring
  /// microbatch's header comes first).
  /// Returns how many receive actions it posted.
  int postAhead(size_t next);
  /// postAhead(), recorded as one "post_recv" event (category recv) when it
  /// posted anything and the run is traced.
  void postAheadTraced(size_t next);
  /// The buffers action `a` (RECV_F or RECV_B) receives into, or nothing
  /// when its metadata is not known yet.
  std::optional<Incoming> receiveBuffers(const Action &a);
  /// The buffers action `a` receives into, allocated from the metadata of
  /// its values. Errors: metadata missing, the allocation fails.
  llvm::Expected<Incoming> incoming(const Action &a, const std::string &what);
  /// Messages so far per (channel, from, to), for trace flow ids.
  std::map<std::tuple<int, int, int>, int64_t> messages;
  /// Records action `a`, run from `startUs` until now.
  void record(const Action &a, int64_t startUs);
  /// Send and receive actions completed so far, per peer (job rank).
  std::map<int, int> sentTo, receivedFrom;
  /// A lost rank met at action `index` (actions.size(): the final flush):
  /// writes this rank's status record (Executor.h, "Where a rank stands")
  /// and, for a timeout, adds its position to the error's detail. Any other
  /// error is returned as is.
  llvm::Error located(llvm::Error err, size_t index);
  /// Training: gradients a consumer stage computed for a remote producer's
  /// output, awaiting SEND_B: (consumer, producer, output, mb).
  std::map<std::tuple<int, int, int, int>, std::vector<at::Tensor>> toSend;

  /// Decoding: tokens picked on this rank awaiting their SEND_TOKs, by
  /// microbatch, with the sends left.
  std::map<int, std::pair<at::Tensor, int>> picked;
  /// Decoding: the token input of microbatch m + groups, and `tokens`
  /// becoming it.
  llvm::Expected<c10::IValue *> tokenSlot(int m);
  llvm::Error feedTokens(int m, const at::Tensor &tokens);
  /// Decoding: per microbatch, whether the tokens fed to it all are the
  /// end token (ExecutorStep::endToken).
  std::vector<char> ended;
  /// This rank has the tokens picked from microbatch m (picked here or
  /// received): records whether the group's next step ended, and feeds
  /// them to that step where a stage of this rank reads them.
  llvm::Error heardTokens(int m, const at::Tensor &tokens);
  /// Whether F of microbatch m is skipped (its group ended).
  bool skips(int m) const {
    return static_cast<size_t>(m) < ended.size() && ended[m] && !inferring(m);
  }
  /// Whether the action run last was a skipped F (traced as SKIP).
  bool skipped = false;
  /// A skipped F(s, m): zeros in its outputs' metadata.
  llvm::Error skipForward(const Action &a);

  /// Runs one action by its kind's handler.
  llvm::Error perform(const Action &a);
  // One handler per action kind.
  llvm::Error forward(const Action &a);
  llvm::Expected<std::vector<c10::IValue>>
  forwardArguments(const Action &a, bool recomputing, SavedForward &f);
  llvm::Error sendTokens(const Action &a);
  llvm::Error recvTokens(const Action &a);
  llvm::Error sendForward(const Action &a);
  llvm::Error recvForward(const Action &a);
  llvm::Error collectOutputs(const Action &a);
  llvm::Error backward(const Action &a, bool inputsOnly);
  llvm::Error backwardWeights(const Action &a);
  /// Recompute: runs stage `s`'s forward of microbatch `m` again from the
  /// inputs `f` kept, into f.outputs (see Executor.h).
  llvm::Error recomputeForward(int s, int m, SavedForward &f);
  llvm::Error sendBackward(const Action &a);
  llvm::Error recvBackward(const Action &a);
  /// Calls `fn(output, tensor index, metadata)` for every tensor of edge
  /// `edge`'s values in microbatch `m` that carries a gradient, in the order
  /// both sides of the edge send and receive them.
  llvm::Error forEachGradient(
      const Edge &edge, int m,
      llvm::function_ref<llvm::Error(int, size_t, const TensorMeta &)> fn);

  /// Keeps a value for its local uses (dropped when it has none).
  void store(int stage, int output, int m, c10::IValue value);
  /// Hands out a kept value, forgetting it after its last use.
  llvm::Expected<c10::IValue> take(int stage, int output, int m);
  llvm::Expected<const ValueMeta *> metaFor(int m, int stage, int output);
  bool inferring(int m) const { return step.inferring[m]; }
  /// Training: the value `v` (stage `stage` output `output`) cut from its
  /// producer's graph, its gradient-carrying tensors made leaves (appended
  /// to `leaves`, undefined for the others).
  llvm::Expected<c10::IValue> asLeaves(const c10::IValue &v, int m, int stage,
                                       int output,
                                       std::vector<at::Tensor> &leaves);
  /// The loss of microbatch m on the loss stage, weighted, from the stage's
  /// `outputs`.
  llvm::Expected<at::Tensor> lossOf(const std::vector<c10::IValue> &outputs,
                                    int m);
  /// Hands the gradients of stage `s`'s input leaves to their producers.
  void handOutInputGradients(int s, int m, const SavedForward &f,
                             const std::vector<at::Tensor> &grads);
  llvm::Error sendHeader(const Edge &edge, int m,
                         const std::vector<ValueMeta> &metas, int peer,
                         int channel, const std::string &what);
  llvm::Expected<std::vector<ValueMeta>> recvHeader(const Edge &edge, int m,
                                                    int peer, int channel,
                                                    const std::string &what);
};

} // namespace ppc::exec_detail

#endif // PPC_RUNTIME_EXEC_EXECUTORSTATE_H
