//===- runtime/exec/ExecutorCompute.cpp - The executor's compute actions --===//
//
// This file implements the Executor's handlers that run stages: F (with the
// copy rule and, under --recompute, what its recompute needs), OUT, B, I and
// W, the recompute itself, the loss, and the order in which an edge's
// gradients cross (see Executor.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/ExecutorState.h"

#include "lib/Error.h"
#include "lib/StageExecutable.h"
#include "lib/ValueWalk.h"
#include "runtime/schedule/Decode.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <mutex>
#include <optional>

namespace ppc::exec_detail {

/// F(s, m)'s arguments: the stage's inputs, taken from the model's
/// microbatch or the values stored for it, cut from their producers'
/// graphs when training (the leaves go to f.leaves, the inputs themselves
/// to f.inputs when recomputing), with the copy rule applied.
llvm::Expected<std::vector<c10::IValue>>
Executor::forwardArguments(const Action &a, bool recomputing, SavedForward &f) {
  const int m = a.microbatch;
  const StageInfo &info = manifest.stages[a.stage];
  std::vector<c10::IValue> args;
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
  return args;
}

/// F(s, m): gathers the stage's inputs (applying the copy rule), runs it,
/// and records (inferring) or checks the metadata of its outputs.
llvm::Error Executor::forward(const Action &a) {
  const int m = a.microbatch;
  if (skips(m))
    return skipForward(a);
  const StageInfo &info = manifest.stages[a.stage];
  const bool recomputing = training && step.recompute;
  SavedForward f;
  auto gathered = forwardArguments(a, recomputing, f);
  if (!gathered)
    return gathered.takeError();
  std::vector<c10::IValue> args = std::move(*gathered);
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
  if (step.beforeForward)
    if (llvm::Error err = step.beforeForward(a.stage, m))
      return err;
  at::AutoGradMode gradMode(training);
  // Autocast covers the stage alone: an evaluation loss below is computed
  // as B computes a training one.
  std::optional<llvm::Expected<std::vector<c10::IValue>>> ran;
  {
    AutocastGuard autocast(plan.precision, plan.device);
    ran.emplace(plan.stages->at(a.stage).run(std::move(args)));
  }
  llvm::Expected<std::vector<c10::IValue>> &outputs = *ran;
  if (!outputs)
    return outputs.takeError();
  if (step.afterForward)
    step.afterForward(a.stage, m);
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
  // Evaluation: no backward, so the loss is computed here.
  if (schedule.evaluation && plan.loss && plan.loss->stage == a.stage) {
    auto loss = lossOf(*outputs, m);
    if (!loss)
      return loss.takeError();
    keepLoss(m, *loss);
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

llvm::Error Executor::skipForward(const Action &a) {
  const int m = a.microbatch;
  const StageInfo &info = manifest.stages[a.stage];
  for (size_t o = 0; o < info.outputs.size(); ++o) {
    int out = static_cast<int>(o);
    auto meta = metaFor(m, a.stage, out);
    if (!meta)
      return meta.takeError();
    std::string what =
        llvm::formatv("stage {0} output {1} of microbatch {2}", a.stage, o, m);
    auto wire = allocateWire(**meta, plan.device, what);
    if (!wire)
      return wire.takeError();
    for (at::Tensor &t : *wire)
      t.zero_();
    auto value = fromWire(std::move(*wire), **meta, what);
    if (!value)
      return value.takeError();
    store(a.stage, out, m, std::move(*value));
  }
  skipped = true;
  ++result.skippedForwards;
  return llvm::Error::success();
}

/// OUT(m): keeps microbatch m's model outputs for concatenation.
llvm::Error Executor::collectOutputs(const Action &a) {
  const int m = a.microbatch;
  std::vector<c10::IValue> outputs;
  for (size_t k = 0; k < manifest.modelOutputs.size(); ++k) {
    const ValueRef &ref = manifest.modelOutputs[k];
    auto v = take(ref.stage, ref.output, m);
    if (!v)
      return v.takeError();
    outputs.push_back(std::move(*v));
  }
  const std::optional<TokenReturn> &tokens = schedule.tokens;
  if (!tokens) {
    for (size_t k = 0; k < outputs.size(); ++k)
      result.outputParts[k].push_back(std::move(outputs[k]));
    return llvm::Error::success();
  }
  if (!tokens->picks(m))
    return llvm::Error::success();
  auto picks = step.pick(m, std::move(outputs));
  if (!picks)
    return picks.takeError();
  if (!tokens->returns(m))
    return llvm::Error::success();
  // One SEND_TOK to each other rank (Decode.h).
  size_t sends = tokenReturnRanks(schedule).size();
  if (sends > 0)
    picked[m] = {*picks, static_cast<int>(sends)};
  return heardTokens(m, *picks);
}

llvm::Expected<at::Tensor>
Executor::lossOf(const std::vector<c10::IValue> &outputs, int m) {
  const LossSpec &loss = *plan.loss;
  const c10::IValue &out = outputs[loss.output];
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
  auto value = loss(out.toTensor(), step.targets[m], what);
  if (!value)
    return value.takeError();
  return *value * step.lossWeights[m];
}

void Executor::keepLoss(int m, const at::Tensor &loss) {
  // Read once after the run: an item() per microbatch would wait for the
  // device each time. In double, as the host would sum it.
  if (lossParts.size() <= static_cast<size_t>(m))
    lossParts.resize(m + 1);
  lossParts[m] = loss.detach().to(at::kDouble);
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
    auto loss = lossOf(f.outputs, m);
    if (!loss)
      return loss.takeError();
    keepLoss(m, *loss);
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
} // namespace ppc::exec_detail
