//===- runtime/exec/Executor.cpp - Runs one rank's schedule ---------------===//
//
// This file implements execute() and makeExecutorPlan() (see Executor.h):
// the Executor's table of the values in flight, its dispatch of one handler
// per action kind, and its trace records. The handlers themselves are in
// ExecutorCompute.cpp and ExecutorMessages.cpp (ExecutorState.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Executor.h"

#include "lib/Error.h"
#include "lib/ValueWalk.h"
#include "runtime/exec/ExecutorState.h"
#include "runtime/exec/StatusRecord.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/Link.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>

#include <chrono>

namespace ppc {

namespace exec_detail {
namespace {
using Clock = std::chrono::steady_clock;

/// "rank 0 4, rank 2 3", or "nothing".
std::string countsText(const std::map<int, int> &counts) {
  std::string text;
  for (const auto &[peer, count] : counts)
    text +=
        llvm::formatv("{0}rank {1} {2}", text.empty() ? "" : ", ", peer, count)
            .str();
  return text.empty() ? "nothing" : text;
}

llvm::json::Object countsJson(const std::map<int, int> &counts) {
  llvm::json::Object object;
  for (const auto &[peer, count] : counts)
    object[std::to_string(peer)] = count;
  return object;
}

} // namespace

llvm::Error Executor::located(llvm::Error err, size_t index) {
  const std::vector<Action> &actions = schedule.ranks[plan.rank];
  llvm::json::Object record{{"action", int64_t(index + 1)},
                            {"actions", int64_t(actions.size())},
                            {"sent", countsJson(sentTo)},
                            {"received", countsJson(receivedFrom)}};
  std::string where;
  if (index < actions.size()) {
    const Action &a = actions[index];
    llvm::StringRef kind = actionInfo(a.kind).name;
    record["kind"] = kind;
    record["microbatch"] = a.microbatch;
    record["stage"] = a.stage;
    where =
        llvm::formatv("at action {0} of {1} ({2} mb {3} stage {4})", index + 1,
                      actions.size(), kind, a.microbatch, a.stage)
            .str();
  } else {
    record["kind"] = "flush";
    where = llvm::formatv("at the final flush of {0} actions", actions.size())
                .str();
  }
  return withPosition(
      std::move(err), plan.transport->globalRank(plan.rank), std::move(record),
      llvm::formatv("{0}; sent: {1}; received: {2}", where, countsText(sentTo),
                    countsText(receivedFrom))
          .str());
}

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

void Executor::record(const Action &a, int64_t startUs) {
  const ActionInfo &info = actionInfo(a.kind);
  TraceEvent e;
  e.name = skipped ? "SKIP" : info.name.str();
  e.category = skipped ? "other" : info.category.str();
  e.stage = a.stage;
  e.microbatch = a.microbatch;
  if (schedule.tokens && a.microbatch >= 0) {
    e.group = schedule.tokens->groupOf(a.microbatch);
    e.step = schedule.tokens->stepOf(a.microbatch);
  }
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

llvm::Error Executor::perform(const Action &a) {
  switch (a.kind) {
  case ActionKind::Forward:
    return forward(a);
  case ActionKind::SendF:
    return sendForward(a);
  case ActionKind::RecvF:
    return recvForward(a);
  case ActionKind::Output:
    return collectOutputs(a);
  case ActionKind::Backward:
    return backward(a, /*inputsOnly=*/false);
  case ActionKind::BackwardInput:
    return backward(a, /*inputsOnly=*/true);
  case ActionKind::BackwardWeight:
    return backwardWeights(a);
  case ActionKind::SendB:
    return sendBackward(a);
  case ActionKind::RecvB:
    return recvBackward(a);
  case ActionKind::SendTokens:
    return sendTokens(a);
  case ActionKind::RecvTokens:
    return recvTokens(a);
  }
  return llvm::Error::success();
}

llvm::Expected<ExecutorResult> Executor::run() {
  Clock::time_point start = Clock::now();
  result.outputParts.resize(manifest.modelOutputs.size());
  const std::vector<Action> &actions = schedule.ranks[plan.rank];
  size_t lastOfFirst = 0;
  // Per stage, the index of its last action that writes parameter gradients.
  std::map<int, size_t> lastWeights;
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].microbatch == 0)
      lastOfFirst = i;
    if (actions[i].kind == ActionKind::Backward ||
        actions[i].kind == ActionKind::BackwardWeight)
      lastWeights[actions[i].stage] = i;
  }
  if (step.trace)
    step.trace->reserve(step.trace->events().size() + actions.size() + 1);
  postAheadTraced(0);
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action &a = actions[i];
    current = i;
    skipped = false;
    int64_t startUs = step.trace ? TraceRecorder::nowUs() : 0;
    if (llvm::Error err = perform(a)) {
      step.failedMicrobatch = a.microbatch;
      return located(std::move(err), i);
    }
    if (int channel = channelOf(schedule, a); channel >= 0) {
      int peer = plan.transport->globalRank(a.peerRank);
      ++(actionInfo(a.kind).category == "send" ? sentTo : receivedFrom)[peer];
    }
    if (step.trace)
      record(a, startUs);
    if (step.afterWeightGradients) {
      auto last = lastWeights.find(a.stage);
      if (last != lastWeights.end() && last->second == i)
        if (llvm::Error err = step.afterWeightGradients(a.stage)) {
          step.failedMicrobatch = a.microbatch;
          return located(std::move(err), i);
        }
    }
    postAheadTraced(i + 1);
    if (i == lastOfFirst)
      result.firstOutputMs =
          std::chrono::duration<double, std::milli>(Clock::now() - start)
              .count();
  }
  if (!lossParts.empty()) {
    auto loss = torchCall("cannot read the loss", [&] {
      at::Tensor sum;
      for (const at::Tensor &part : lossParts)
        if (part.defined())
          sum = sum.defined() ? sum + part : part;
      return sum.item<double>();
    });
    if (!loss)
      return loss.takeError();
    result.loss = *loss;
  }
  int64_t flushStart = step.trace ? TraceRecorder::nowUs() : 0;
  if (llvm::Error err = plan.transport->flushSends()) {
    step.failedMicrobatch = schedule.microbatches - 1;
    return located(std::move(err), actions.size());
  }
  if (step.trace)
    step.trace->add({"flush", "wait", -1, -1, flushStart,
                     TraceRecorder::nowUs() - flushStart});
  return result;
}

} // namespace exec_detail

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
  return exec_detail::Executor(plan, step).run();
}

} // namespace ppc
