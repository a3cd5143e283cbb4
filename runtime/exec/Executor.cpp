//===- runtime/exec/Executor.cpp - Runs one rank's schedule ---------------===//
//
// This file implements execute() (see Executor.h): one handler per action
// kind over one table of the values in flight.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"

#include "lib/Error.h"
#include "lib/StageExecutable.h"
#include "lib/ValueWalk.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/WirePack.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/functional/loss.h>

#include <cstdlib>
#include <mutex>
#include <optional>

namespace ppc {

namespace {
using Clock = std::chrono::steady_clock;

/// How errors name the values of one edge and microbatch.
std::string describeEdge(const Edge &edge, int microbatch) {
  return llvm::formatv("stage {0} -> {1} of microbatch {2}", edge.producer,
                       edge.collector ? std::string("output")
                                      : std::to_string(edge.consumer),
                       microbatch);
}

/// A value of one microbatch: (stage, output, microbatch).
using ValueKey = std::tuple<int, int, int>;

/// Whether a tensor described by `meta` carries a gradient.
bool carriesGradient(const TensorMeta &meta) {
  return meta.requiresGrad && at::isFloatingType(meta.dtype);
}

/// Adds `g` into slot `k` of `sum` (an undefined slot takes `g` as is).
void accumulate(std::vector<at::Tensor> &sum, size_t k, const at::Tensor &g) {
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
  /// Training, on the loss stage's rank: the weighted losses so far.
  at::Tensor lossSum;
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
  /// Training: gradients a consumer stage computed for a remote producer's
  /// output, awaiting SEND_B: (consumer, producer, output, mb).
  std::map<std::tuple<int, int, int, int>, std::vector<at::Tensor>> toSend;

  // One handler per action kind.
  llvm::Error forward(const Action &a);
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
  /// The loss of microbatch m on the loss stage, weighted.
  llvm::Expected<at::Tensor> lossOf(const SavedForward &f, int m);
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

void Executor::store(int stage, int output, int m, c10::IValue value) {
  auto it = plan.localUses.find({stage, output});
  if (it == plan.localUses.end() || it->second == 0)
    return;
  values[{stage, output, m}] = Slot{std::move(value), it->second};
}

llvm::Expected<c10::IValue> Executor::take(int stage, int output, int m) {
  auto it = values.find({stage, output, m});
  if (it == values.end())
    return makeError(llvm::formatv("internal error: stage {0} output {1} of "
                                   "microbatch {2} is not on rank {3}",
                                   stage, output, m, plan.rank)
                         .str());
  c10::IValue v = it->second.value;
  if (--it->second.remaining == 0)
    values.erase(it);
  return v;
}

llvm::Expected<const ValueMeta *> Executor::metaFor(int m, int stage,
                                                    int output) {
  MetaTable &table = (*step.tables)[step.signatures[m].text];
  auto it = table.find({stage, output});
  if (it == table.end())
    return makeError(
        llvm::formatv("no metadata for stage {0} output {1} ('{2}') for "
                      "microbatch signature {3}",
                      stage, output,
                      manifest.stages[stage].outputs[output].name,
                      step.signatures[m].text)
            .str());
  return &it->second;
}

llvm::Expected<c10::IValue>
Executor::asLeaves(const c10::IValue &v, int m, int stage, int output,
                   std::vector<at::Tensor> &leaves) {
  ValueKind kind = manifest.stages[stage].outputs[output].kind;
  if (!isTensorKind(kind))
    return v;
  auto meta = metaFor(m, stage, output);
  if (!meta)
    return meta.takeError();
  std::vector<at::Tensor> tensors = tensorsOf(v, kind);
  if (tensors.size() != (*meta)->tensors.size())
    return makeError(llvm::formatv("stage {0} output {1} of microbatch {2} "
                                   "holds {3} tensors, its metadata {4}",
                                   stage, output, m, tensors.size(),
                                   (*meta)->tensors.size())
                         .str());
  return torchCall("cannot prepare the input of a stage", [&] {
    std::vector<at::Tensor> cut;
    for (size_t k = 0; k < tensors.size(); ++k) {
      at::Tensor t = tensors[k].detach();
      if (carriesGradient((*meta)->tensors[k])) {
        t.requires_grad_(true);
        leaves.push_back(t);
      } else {
        leaves.push_back(at::Tensor());
      }
      cut.push_back(t);
    }
    return valueOfTensors(kind, std::move(cut));
  });
}

/// F(s, m): gathers the stage's inputs (applying the copy rule), runs it,
/// and records (inferring) or checks the metadata of its outputs.
llvm::Error Executor::forward(const Action &a) {
  const int m = a.microbatch;
  const StageInfo &info = manifest.stages[a.stage];
  const bool recomputing = training && step.recompute;
  std::vector<c10::IValue> args;
  SavedForward f;
  for (const StageInput &in : info.inputs) {
    c10::IValue v;
    bool otherUses = false;
    f.leaves.emplace_back();
    if (in.source.isModelInput()) {
      v = step.microbatches[m][in.source.modelInput];
    } else {
      auto got = take(in.source.stage, in.source.output, m);
      if (!got)
        return got.takeError();
      v = std::move(*got);
      otherUses = plan.globalUses.at({in.source.stage, in.source.output}) > 1;
      if (training) {
        auto cut =
            asLeaves(v, m, in.source.stage, in.source.output, f.leaves.back());
        if (!cut)
          return cut.takeError();
        v = std::move(*cut);
      }
    }
    if (recomputing)
      f.inputs.push_back(v);
    // Training: a stage that writes an input in place writes a copy, never
    // the leaf its gradient is read from.
    auto arg = stageArgument(in, std::move(v), otherUses || training);
    if (!arg)
      return arg.takeError();
    args.push_back(std::move(*arg));
  }
  if (recomputing) {
    auto state = torchCall("cannot read the random generator's state", [&] {
      at::Generator gen = at::globalContext().defaultGenerator(plan.device);
      std::lock_guard<std::mutex> lock(gen.mutex());
      return gen.get_state();
    });
    if (!state)
      return state.takeError();
    f.generatorState = std::move(*state);
    f.recompute = true;
  }
  // With recompute the forward still builds its graph (so that the outputs'
  // metadata says which carry a gradient, and both forwards run alike); the
  // graph goes when the outputs are detached below.
  at::AutoGradMode gradMode(training);
  AutocastGuard autocast(plan.precision, plan.device);
  auto outputs = plan.stages->at(a.stage).run(std::move(args));
  if (!outputs)
    return outputs.takeError();
  MetaTable &table = (*step.tables)[step.signatures[m].text];
  for (size_t o = 0; o < outputs->size(); ++o) {
    int out = static_cast<int>(o);
    if (inferring(m) && !table.count({a.stage, out})) {
      table[{a.stage, out}] =
          ValueMeta::of((*outputs)[o], info.outputs[o].kind);
    } else {
      auto meta = metaFor(m, a.stage, out);
      if (!meta)
        return meta.takeError();
      if (llvm::Error err = checkValue(
              (*outputs)[o], **meta,
              llvm::formatv("stage {0} output {1} ('{2}') of microbatch {3}",
                            a.stage, o, info.outputs[o].name, m)))
        return llvm::make_error<MetaMismatchError>(
            llvm::toString(std::move(err)));
    }
    if (recomputing && isTensorKind(info.outputs[o].kind)) {
      auto cut = torchCall("cannot detach a stage output", [&] {
        std::vector<at::Tensor> tensors =
            tensorsOf((*outputs)[o], info.outputs[o].kind);
        for (at::Tensor &t : tensors)
          t = t.detach();
        return valueOfTensors(info.outputs[o].kind, std::move(tensors));
      });
      if (!cut)
        return cut.takeError();
      (*outputs)[o] = std::move(*cut);
    }
    store(a.stage, out, m, (*outputs)[o]);
  }
  if (training) {
    if (!recomputing)
      f.outputs = std::move(*outputs);
    saved[{a.stage, m}] = std::move(f);
    int &peak = result.peakActivations[a.stage];
    peak = std::max(peak, ++live[a.stage]);
  }
  return llvm::Error::success();
}

llvm::Error Executor::sendHeader(const Edge &edge, int m,
                                 const std::vector<ValueMeta> &metas, int peer,
                                 int channel, const std::string &what) {
  std::vector<int64_t> words =
      encodeHeader(edge.producer, edge.consumer, m, metas);
  // Headers are CPU messages on every transport: metadata never needs a
  // device (Transport.h).
  auto tensors = torchCall("cannot prepare the metadata of " + what, [&] {
    return std::make_pair(
        at::tensor({static_cast<int64_t>(words.size())}, at::kLong),
        at::tensor(words, at::kLong));
  });
  if (!tensors)
    return tensors.takeError();
  if (llvm::Error err = plan.transport->send(tensors->first, peer, channel,
                                             "the metadata of " + what))
    return err;
  return plan.transport->send(tensors->second, peer, channel,
                              "the metadata of " + what);
}

llvm::Expected<std::vector<ValueMeta>>
Executor::recvHeader(const Edge &edge, int m, int peer, int channel,
                     const std::string &what) {
  Transport &transport = *plan.transport;
  // Bounded before the header buffer is allocated.
  constexpr int64_t kMaxHeaderWords = int64_t(1) << 24;
  ValueMeta lengthMeta;
  lengthMeta.kind = ValueKind::Int;
  auto length = allocateWire(lengthMeta, c10::kCPU, "the metadata of " + what);
  if (!length)
    return length.takeError();
  if (llvm::Error err = transport.recv((*length)[0], peer, channel,
                                       "the metadata of " + what))
    return err;
  auto words = torchCall("cannot read the metadata of " + what,
                         [&] { return (*length)[0].item<int64_t>(); });
  if (!words)
    return words.takeError();
  if (*words < 6 || *words > kMaxHeaderWords)
    return makeError(
        llvm::formatv("metadata header of {0}: bad length {1}", what, *words)
            .str());
  ValueMeta headerMeta;
  headerMeta.kind = ValueKind::IntList;
  headerMeta.length = *words;
  auto header = allocateWire(headerMeta, c10::kCPU, "the metadata of " + what);
  if (!header)
    return header.takeError();
  if (llvm::Error err = transport.recv((*header)[0], peer, channel,
                                       "the metadata of " + what))
    return err;
  auto metas = decodeHeader(
      llvm::ArrayRef<int64_t>((*header)[0].data_ptr<int64_t>(), *words),
      edge.producer, edge.consumer, m, edge.outputs.size());
  if (!metas)
    return metas.takeError();
  for (size_t k = 0; k < edge.outputs.size(); ++k) {
    ValueKind declared =
        manifest.stages[edge.producer].outputs[edge.outputs[k]].kind;
    if ((*metas)[k].kind != declared)
      return makeError(llvm::formatv("{0}: value {1} is a {2}, the manifest "
                                     "declares {3}",
                                     what, k, kindName((*metas)[k].kind),
                                     kindName(declared))
                           .str());
  }
  return metas;
}

/// SEND_F(e, m): the header on an inferring microbatch, then the values'
/// wire tensors.
llvm::Error Executor::sendForward(const Action &a) {
  const int m = a.microbatch;
  const Edge &edge = schedule.edges[a.edge];
  int channel = channelOf(schedule, a);
  std::string what = describeEdge(edge, m);
  std::vector<c10::IValue> vals;
  std::vector<ValueMeta> metas;
  for (int o : edge.outputs) {
    auto v = take(edge.producer, o, m);
    if (!v)
      return v.takeError();
    auto meta = metaFor(m, edge.producer, o);
    if (!meta)
      return meta.takeError();
    metas.push_back(**meta);
    vals.push_back(std::move(*v));
  }
  if (inferring(m)) {
    if (llvm::Error err = sendHeader(edge, m, metas, a.peerRank, channel, what))
      return err;
    ++result.metaMessagesSent;
  }
  // Detached: a training stage's outputs carry its graph, and the packed
  // buffer must not join it.
  std::vector<at::Tensor> wire;
  for (size_t k = 0; k < vals.size(); ++k) {
    auto tensors = toWire(vals[k], metas[k].kind, plan.device, what);
    if (!tensors)
      return tensors.takeError();
    for (const at::Tensor &t : *tensors)
      wire.push_back(t.detach());
  }
  auto message = packMessage(wire, plan.device, plan.coalesce, what);
  if (!message)
    return message.takeError();
  for (const at::Tensor &t : *message)
    if (llvm::Error err = plan.transport->send(t, a.peerRank, channel, what))
      return err;
  return llvm::Error::success();
}

/// Receives kept ahead per rank: enough to have the next microbatches'
/// messages in flight while this one computes, few enough that their
/// buffers stay a small multiple of one microbatch's.
constexpr int kRecvAhead = 4;

llvm::Expected<Incoming> Executor::incoming(const Action &a,
                                            const std::string &what) {
  const Edge &edge = schedule.edges[a.edge];
  const int m = a.microbatch;
  Incoming in;
  std::vector<WireShape> shapes;
  if (a.kind == ActionKind::RecvF) {
    for (int o : edge.outputs) {
      auto meta = metaFor(m, edge.producer, o);
      if (!meta)
        return meta.takeError();
      std::vector<WireShape> value = wireShapes(**meta);
      in.counts.push_back(value.size());
      shapes.insert(shapes.end(), value.begin(), value.end());
    }
  } else if (llvm::Error err = forEachGradient(
                 edge, m,
                 [&](int, size_t, const TensorMeta &meta) -> llvm::Error {
                   shapes.push_back({meta.dtype, meta.sizes});
                   return llvm::Error::success();
                 })) {
    return llvm::Expected<Incoming>(std::move(err));
  }
  auto message = allocateMessage(shapes, plan.device, plan.coalesce, what);
  if (!message)
    return message.takeError();
  in.message = std::move(*message);
  return in;
}

std::optional<Incoming> Executor::receiveBuffers(const Action &a) {
  if (a.kind == ActionKind::RecvF && inferring(a.microbatch))
    return std::nullopt;
  auto in = incoming(a, "");
  if (!in) {
    llvm::consumeError(in.takeError()); // the receive itself reports it
    return std::nullopt;
  }
  return std::move(*in);
}

void Executor::postAheadTraced(size_t next) {
  int64_t startUs = step.trace ? TraceRecorder::nowUs() : 0;
  if (postAhead(next) > 0 && step.trace)
    step.trace->add({"post_recv", "recv", -1, -1, startUs,
                     TraceRecorder::nowUs() - startUs});
}

int Executor::postAhead(size_t next) {
  const std::vector<Action> &actions = schedule.ranks[plan.rank];
  int count = 0;
  aheadCursor = std::max(aheadCursor, next);
  while (aheadCursor < actions.size() && postedAhead < kRecvAhead) {
    const Action &a = actions[aheadCursor];
    if (a.kind != ActionKind::RecvF && a.kind != ActionKind::RecvB) {
      ++aheadCursor;
      continue;
    }
    auto buffers = receiveBuffers(a);
    if (!buffers)
      return count;
    int channel = channelOf(schedule, a);
    for (const at::Tensor &t : buffers->message.crossing)
      if (llvm::Error err =
              plan.transport->postRecv(t, a.peerRank, channel, "")) {
        // The receive itself will report a lost peer.
        llvm::consumeError(std::move(err));
        return count;
      }
    posted[aheadCursor] = std::move(*buffers);
    ++postedAhead;
    ++aheadCursor;
    ++count;
  }
  return count;
}

/// Takes the buffers posted ahead for the running action, if any.
std::optional<Incoming> takePosted(std::map<size_t, Incoming> &posted,
                                   size_t index, int &postedAhead) {
  auto it = posted.find(index);
  if (it == posted.end())
    return std::nullopt;
  auto buffers = std::move(it->second);
  posted.erase(it);
  --postedAhead;
  return buffers;
}

/// RECV_F(e, m): the header on an inferring microbatch, then buffers
/// allocated from the (validated) metadata receive the values (or the
/// buffers posted ahead for them).
llvm::Error Executor::recvForward(const Action &a) {
  const int m = a.microbatch;
  const Edge &edge = schedule.edges[a.edge];
  int channel = channelOf(schedule, a);
  std::string what = describeEdge(edge, m);
  auto ahead = takePosted(posted, current, postedAhead);
  if (inferring(m)) {
    auto metas = recvHeader(edge, m, a.peerRank, channel, what);
    if (!metas)
      return metas.takeError();
    MetaTable &table = (*step.tables)[step.signatures[m].text];
    for (size_t k = 0; k < edge.outputs.size(); ++k)
      table[{edge.producer, edge.outputs[k]}] = (*metas)[k];
  }
  auto in =
      ahead ? llvm::Expected<Incoming>(std::move(*ahead)) : incoming(a, what);
  if (!in)
    return in.takeError();
  for (at::Tensor &t : in->message.crossing)
    if (llvm::Error err = plan.transport->recv(t, a.peerRank, channel, what))
      return err;
  auto next = in->message.wire.begin();
  for (size_t k = 0; k < edge.outputs.size(); ++k) {
    int o = edge.outputs[k];
    auto meta = metaFor(m, edge.producer, o);
    if (!meta)
      return meta.takeError();
    std::vector<at::Tensor> wire(next, next + in->counts[k]);
    next += in->counts[k];
    auto value = fromWire(std::move(wire), **meta, what);
    if (!value)
      return value.takeError();
    store(edge.producer, o, m, std::move(*value));
  }
  return llvm::Error::success();
}

/// OUT(m): keeps microbatch m's model outputs for concatenation.
llvm::Error Executor::collectOutputs(const Action &a) {
  for (size_t k = 0; k < manifest.modelOutputs.size(); ++k) {
    const ValueRef &ref = manifest.modelOutputs[k];
    auto v = take(ref.stage, ref.output, a.microbatch);
    if (!v)
      return v.takeError();
    result.outputParts[k].push_back(std::move(*v));
  }
  return llvm::Error::success();
}

llvm::Expected<at::Tensor> Executor::lossOf(const SavedForward &f, int m) {
  const LossSpec &loss = *plan.loss;
  const c10::IValue &out = f.outputs[loss.output];
  std::string what = llvm::formatv("cannot compute the {0} loss of "
                                   "microbatch {1}",
                                   lossName(loss.kind), m);
  if (!out.isTensor())
    return makeError(what + llvm::formatv(": model output {0} is a {1}, not "
                                          "a Tensor",
                                          loss.modelOutput, out.tagKind())
                                .str());
  if (m >= static_cast<int>(step.targets.size()))
    return makeError(what + ": no target");
  namespace F = torch::nn::functional;
  const at::Tensor &output = out.toTensor();
  const at::Tensor &target = step.targets[m];
  if (loss.kind == LossKind::MSE && output.sizes() != target.sizes())
    return makeError(what + llvm::formatv(": the output is {0}, the target "
                                          "{1}; mse needs equal shapes",
                                          TensorMeta::of(output).str(),
                                          TensorMeta::of(target).str())
                                .str());
  return torchCall(what, [&] {
    // In fp32 whatever precision the stage ran in (bf16: a bf16 output).
    at::ScalarType type = output.scalar_type();
    at::Tensor x = type == at::kBFloat16 || type == at::kHalf
                       ? output.to(at::kFloat)
                       : output;
    at::Tensor value = loss.kind == LossKind::MSE
                           ? F::mse_loss(x, target.to(x.dtype()))
                           : F::cross_entropy(x, target);
    return value * step.lossWeights[m];
  });
}

void Executor::handOutInputGradients(int s, int m, const SavedForward &f,
                                     const std::vector<at::Tensor> &grads) {
  const StageInfo &info = manifest.stages[s];
  size_t next = 0;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    const ValueRef &src = info.inputs[i].source;
    for (size_t k = 0; k < f.leaves[i].size(); ++k) {
      if (!f.leaves[i][k].defined())
        continue;
      const at::Tensor &g = grads[next++];
      if (plan.schedule->placement.rankOf(src.stage) == plan.rank)
        accumulate(outputGrads[{src.stage, src.output, m}], k, g);
      else
        accumulate(toSend[{s, src.stage, src.output, m}], k, g);
    }
  }
}

/// B(s, m) (`inputsOnly` false) and I(s, m) (true).
llvm::Error Executor::backward(const Action &a, bool inputsOnly) {
  const int s = a.stage, m = a.microbatch;
  auto it = saved.find({s, m});
  if (it == saved.end())
    return makeError(llvm::formatv("internal error: backward of stage {0} "
                                   "microbatch {1} before its forward",
                                   s, m)
                         .str());
  SavedForward &f = it->second;
  const StageInfo &info = manifest.stages[s];
  if (f.recompute)
    if (llvm::Error err = recomputeForward(s, m, f))
      return err;
  // The loss joins the stage's graph whatever the caller's grad mode.
  at::AutoGradMode gradMode(true);
  std::vector<at::Tensor> roots, rootGrads;
  for (size_t o = 0; o < info.outputs.size(); ++o) {
    auto g = outputGrads.find({s, static_cast<int>(o), m});
    if (g == outputGrads.end())
      continue;
    std::vector<at::Tensor> tensors =
        tensorsOf(f.outputs[o], info.outputs[o].kind);
    for (size_t k = 0; k < tensors.size() && k < g->second.size(); ++k)
      if (g->second[k].defined() && tensors[k].requires_grad()) {
        roots.push_back(tensors[k]);
        rootGrads.push_back(g->second[k]);
      }
    outputGrads.erase(g);
  }
  if (plan.loss && plan.loss->stage == s) {
    auto loss = lossOf(f, m);
    if (!loss)
      return loss.takeError();
    // Summed where the loss lives, read once after the step: an item() per
    // microbatch would wait for the device each time. In double, as the
    // host would sum it.
    at::Tensor part = loss->detach().to(at::kDouble);
    lossSum = lossSum.defined() ? lossSum + part : part;
    if (loss->requires_grad()) {
      roots.push_back(*loss);
      rootGrads.push_back(at::ones_like(*loss));
    }
  }
  std::vector<at::Tensor> leaves;
  for (const auto &slot : f.leaves)
    for (const at::Tensor &t : slot)
      if (t.defined())
        leaves.push_back(t);
  std::vector<at::Tensor> grads(leaves.size());
  std::string what = llvm::formatv("backward of stage {0} microbatch {1} "
                                   "failed",
                                   s, m);
  if (!roots.empty()) {
    llvm::Error err = torchCall(what, [&] {
      if (!inputsOnly) {
        torch::autograd::backward(roots, rootGrads);
        for (size_t k = 0; k < leaves.size(); ++k)
          grads[k] = leaves[k].grad();
      } else if (!leaves.empty()) {
        grads = torch::autograd::grad(roots, leaves, rootGrads,
                                      /*retain_graph=*/true,
                                      /*create_graph=*/false,
                                      /*allow_unused=*/true);
      }
    });
    if (err)
      return err;
  }
  handOutInputGradients(s, m, f, grads);
  if (inputsOnly) {
    f.roots = std::move(roots);
    f.rootGrads = std::move(rootGrads);
  } else {
    saved.erase(it);
    --live[s];
  }
  return llvm::Error::success();
}

llvm::Error Executor::recomputeForward(int s, int m, SavedForward &f) {
  const StageInfo &info = manifest.stages[s];
  std::vector<c10::IValue> args;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    auto arg = stageArgument(info.inputs[i], f.inputs[i], /*otherUses=*/true);
    if (!arg)
      return arg.takeError();
    args.push_back(std::move(*arg));
  }
  StageExecutable &exe = plan.stages->at(s).executable();
  std::string what =
      llvm::formatv("cannot recompute stage {0} microbatch {1}", s, m);
  // The buffers as they are now, put back after the recompute; the
  // generator where the first forward found it, then back where it is.
  std::vector<at::Tensor> buffers, kept;
  at::Tensor generatorNow;
  at::Generator gen;
  if (llvm::Error err = torchCall(what, [&] {
        at::NoGradGuard noGrad;
        for (const NamedTensor &b : exe.namedBuffers())
          if (b.value.defined()) {
            buffers.push_back(b.value);
            kept.push_back(b.value.clone());
          }
        gen = at::globalContext().defaultGenerator(plan.device);
        std::lock_guard<std::mutex> lock(gen.mutex());
        generatorNow = gen.get_state();
        gen.set_state(f.generatorState);
      }))
    return err;
  std::optional<llvm::Expected<std::vector<c10::IValue>>> ran;
  {
    at::AutoGradMode gradMode(true);
    AutocastGuard autocast(plan.precision, plan.device);
    ran.emplace(plan.stages->at(s).run(std::move(args)));
  }
  llvm::Expected<std::vector<c10::IValue>> &outputs = *ran;
  llvm::Error restored = torchCall(what, [&] {
    at::NoGradGuard noGrad;
    // Through a view of their data with a version counter of its own: the
    // recomputed graph may have saved a buffer (BatchNorm's running
    // statistics) and must not see it as modified.
    for (size_t k = 0; k < buffers.size(); ++k)
      buffers[k].variable_data().copy_(kept[k]);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(generatorNow);
  });
  if (!outputs) {
    llvm::consumeError(std::move(restored));
    return outputs.takeError();
  }
  if (restored)
    return restored;
  f.outputs = std::move(*outputs);
  f.inputs.clear();
  f.generatorState = at::Tensor();
  f.recompute = false;
  return llvm::Error::success();
}

/// W(s, m): the parameters' gradients from the roots I kept.
llvm::Error Executor::backwardWeights(const Action &a) {
  const int s = a.stage, m = a.microbatch;
  auto it = saved.find({s, m});
  if (it == saved.end())
    return makeError(llvm::formatv("internal error: W of stage {0} "
                                   "microbatch {1} before its I",
                                   s, m)
                         .str());
  SavedForward &f = it->second;
  std::vector<at::Tensor> params;
  for (const at::Tensor &p : plan.stages->at(s).executable().parameters())
    if (p.requires_grad())
      params.push_back(p);
  if (!f.roots.empty() && !params.empty())
    if (llvm::Error err = torchCall(
            llvm::formatv("weight gradients of stage {0} microbatch {1} "
                          "failed",
                          s, m),
            [&] {
              torch::autograd::backward(f.roots, f.rootGrads,
                                        /*retain_graph=*/false,
                                        /*create_graph=*/false, params);
            }))
      return err;
  saved.erase(it);
  --live[s];
  return llvm::Error::success();
}

llvm::Error Executor::forEachGradient(
    const Edge &edge, int m,
    llvm::function_ref<llvm::Error(int, size_t, const TensorMeta &)> fn) {
  for (int o : edge.outputs) {
    auto meta = metaFor(m, edge.producer, o);
    if (!meta)
      return meta.takeError();
    const std::vector<TensorMeta> &tensors = (*meta)->tensors;
    for (size_t k = 0; k < tensors.size(); ++k)
      if (carriesGradient(tensors[k]))
        if (llvm::Error err = fn(o, k, tensors[k]))
          return err;
  }
  return llvm::Error::success();
}

/// SEND_B(e, m): the consumer's gradients for the edge's values, one tensor
/// per value tensor that carries a gradient (zeros where none flowed), as
/// one message (WirePack.h).
llvm::Error Executor::sendBackward(const Action &a) {
  const Edge &edge = schedule.edges[a.edge];
  std::string what = "the gradients of " + describeEdge(edge, a.microbatch);
  std::vector<at::Tensor> wire;
  llvm::Error err = forEachGradient(
      edge, a.microbatch,
      [&](int o, size_t k, const TensorMeta &meta) -> llvm::Error {
        auto it = toSend.find({edge.consumer, edge.producer, o, a.microbatch});
        at::Tensor g;
        if (it != toSend.end() && k < it->second.size())
          g = it->second[k];
        // On the plan's device, where the producer's buffer is.
        c10::Device device = plan.device;
        auto t = torchCall("cannot prepare " + what, [&] {
          return g.defined() ? g.detach().to(device).contiguous()
                             : at::zeros(meta.sizes, at::TensorOptions()
                                                         .dtype(meta.dtype)
                                                         .device(device));
        });
        if (!t)
          return t.takeError();
        wire.push_back(std::move(*t));
        return llvm::Error::success();
      });
  for (int o : edge.outputs)
    toSend.erase({edge.consumer, edge.producer, o, a.microbatch});
  if (err)
    return err;
  auto message = packMessage(wire, plan.device, plan.coalesce, what);
  if (!message)
    return message.takeError();
  for (const at::Tensor &t : *message)
    if (llvm::Error err =
            plan.transport->send(t, a.peerRank, channelOf(schedule, a), what))
      return err;
  return llvm::Error::success();
}

/// RECV_B(e, m): receives the consumer's gradients and adds them to the
/// producer's.
llvm::Error Executor::recvBackward(const Action &a) {
  const Edge &edge = schedule.edges[a.edge];
  std::string what = "the gradients of " + describeEdge(edge, a.microbatch);
  auto ahead = takePosted(posted, current, postedAhead);
  auto in =
      ahead ? llvm::Expected<Incoming>(std::move(*ahead)) : incoming(a, what);
  if (!in)
    return in.takeError();
  for (at::Tensor &t : in->message.crossing)
    if (llvm::Error err =
            plan.transport->recv(t, a.peerRank, channelOf(schedule, a), what))
      return err;
  size_t next = 0;
  return forEachGradient(
      edge, a.microbatch,
      [&](int o, size_t k, const TensorMeta &) -> llvm::Error {
        accumulate(outputGrads[{edge.producer, o, a.microbatch}], k,
                   in->message.wire[next++]);
        return llvm::Error::success();
      });
}

void Executor::record(const Action &a, int64_t startUs) {
  const ActionInfo &info = actionInfo(a.kind);
  TraceEvent e;
  e.name = info.name.str();
  e.category = info.category.str();
  e.stage = a.stage;
  e.microbatch = a.microbatch;
  e.startUs = startUs;
  e.durationUs = std::max<int64_t>(TraceRecorder::nowUs() - startUs, 0);
  if (int channel = channelOf(schedule, a); channel >= 0) {
    bool sending = info.category == "send";
    int from = sending ? plan.rank : a.peerRank;
    int to = sending ? a.peerRank : plan.rank;
    int64_t seq = messages[{channel, from, to}]++;
    // Job ranks: with data-parallel replicas, pipelines' ranks repeat.
    e.flowId = messageFlowId(channel, plan.transport->globalRank(from),
                             plan.transport->globalRank(to),
                             (step.runIndex << 24) + seq);
    e.flowOut = sending;
    e.durationUs = std::max<int64_t>(e.durationUs, 1);
    e.link =
        plan.transport
            ->linkName(at::empty({0}, at::TensorOptions().device(plan.device)),
                       a.peerRank)
            .str();
  }
  step.trace->add(std::move(e));
}

llvm::Expected<ExecutorResult> Executor::run() {
  Clock::time_point start = Clock::now();
  result.outputParts.resize(manifest.modelOutputs.size());
  const std::vector<Action> &actions = schedule.ranks[plan.rank];
  size_t lastOfFirst = 0;
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].microbatch == 0)
      lastOfFirst = i;
  if (step.trace)
    step.trace->reserve(step.trace->events().size() + actions.size() + 1);
  postAheadTraced(0);
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action &a = actions[i];
    current = i;
    int64_t startUs = step.trace ? TraceRecorder::nowUs() : 0;
    llvm::Error err = llvm::Error::success();
    switch (a.kind) {
    case ActionKind::Forward:
      err = forward(a);
      break;
    case ActionKind::SendF:
      err = sendForward(a);
      break;
    case ActionKind::RecvF:
      err = recvForward(a);
      break;
    case ActionKind::Output:
      err = collectOutputs(a);
      break;
    case ActionKind::Backward:
      err = backward(a, /*inputsOnly=*/false);
      break;
    case ActionKind::BackwardInput:
      err = backward(a, /*inputsOnly=*/true);
      break;
    case ActionKind::BackwardWeight:
      err = backwardWeights(a);
      break;
    case ActionKind::SendB:
      err = sendBackward(a);
      break;
    case ActionKind::RecvB:
      err = recvBackward(a);
      break;
    }
    if (err) {
      step.failedMicrobatch = a.microbatch;
      return err;
    }
    if (step.trace)
      record(a, startUs);
    postAheadTraced(i + 1);
    if (i == lastOfFirst)
      result.firstOutputMs =
          std::chrono::duration<double, std::milli>(Clock::now() - start)
              .count();
  }
  if (lossSum.defined()) {
    auto loss = torchCall("cannot read the loss",
                          [&] { return lossSum.item<double>(); });
    if (!loss)
      return loss.takeError();
    result.loss = *loss;
  }
  int64_t flushStart = step.trace ? TraceRecorder::nowUs() : 0;
  if (llvm::Error err = plan.transport->flushSends()) {
    step.failedMicrobatch = schedule.microbatches - 1;
    return err;
  }
  if (step.trace)
    step.trace->add({"flush", "wait", -1, -1, flushStart,
                     TraceRecorder::nowUs() - flushStart});
  return result;
}
} // namespace

ExecutorPlan makeExecutorPlan(const Manifest &manifest,
                              const Schedule &schedule, int rank,
                              std::map<int, Stage> &stages,
                              Transport &transport, c10::Device device,
                              std::optional<LossSpec> loss) {
  ExecutorPlan plan;
  plan.manifest = &manifest;
  plan.schedule = &schedule;
  plan.rank = rank;
  plan.stages = &stages;
  plan.transport = &transport;
  plan.device = device;
  plan.loss = loss;
  const char *coalesce = std::getenv("PPC_COALESCE");
  plan.coalesce = !coalesce || std::string(coalesce) != "0";
  plan.globalUses = outputUses(manifest);
  const Placement &placement = schedule.placement;
  std::map<std::pair<int, int>, int> &localUses = plan.localUses;
  for (const StageInfo &s : manifest.stages)
    if (placement.rankOf(s.index) == rank)
      for (const StageInput &in : s.inputs)
        if (!in.source.isModelInput())
          ++localUses[{in.source.stage, in.source.output}];
  // A training schedule collects no model outputs: the loss stage keeps
  // its own.
  bool collects = llvm::any_of(schedule.ranks[rank], [](const Action &a) {
    return a.kind == ActionKind::Output;
  });
  if (collects)
    for (const ValueRef &ref : manifest.modelOutputs)
      ++localUses[{ref.stage, ref.output}];
  for (const Edge &e : schedule.edges)
    if (placement.rankOf(e.producer) == rank &&
        placement.rankOf(e.consumer) != rank)
      for (int o : e.outputs)
        ++localUses[{e.producer, o}];
  return plan;
}

llvm::Expected<ExecutorResult> execute(const ExecutorPlan &plan,
                                       ExecutorStep &step) {
  return Executor(plan, step).run();
}

} // namespace ppc
