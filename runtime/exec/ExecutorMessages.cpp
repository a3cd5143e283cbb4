//===- runtime/exec/ExecutorMessages.cpp - The executor's message actions -===//
//
// This file implements the Executor's handlers that move values between
// ranks: SEND_F and RECV_F (with the metadata header on an inferring
// microbatch), SEND_B and RECV_B, and the receives posted ahead of need
// (see Executor.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/ExecutorState.h"

#include "lib/Error.h"
#include "runtime/exec/Trace.h"
#include "runtime/exec/WirePack.h"

#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <optional>

namespace ppc::exec_detail {

namespace {
/// How errors name the values of one edge and microbatch.
std::string describeEdge(const Edge &edge, int microbatch) {
  return llvm::formatv("stage {0} -> {1} of microbatch {2}", edge.producer,
                       edge.collector ? std::string("output")
                                      : std::to_string(edge.consumer),
                       microbatch);
}

/// Receives kept ahead per rank: enough to have the next microbatches'
/// messages in flight while this one computes, few enough that their
/// buffers stay a small multiple of one microbatch's.
constexpr int kRecvAhead = 4;

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

} // namespace

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

/// Decoding: the token input of microbatch m + groups (its placeholder
/// until fed).
llvm::Expected<c10::IValue *> Executor::tokenSlot(int m) {
  const TokenReturn &ret = *schedule.tokens;
  int next = ret.next(m);
  if (next < 0 || static_cast<size_t>(next) >= step.microbatches.size() ||
      !step.microbatches[next][ret.input].isTensor())
    return makeError(llvm::formatv("internal error: no microbatch {0} to "
                                   "feed the tokens of microbatch {1}",
                                   next, m)
                         .str());
  return &step.microbatches[next][ret.input];
}

llvm::Error Executor::feedTokens(int m, const at::Tensor &tokens) {
  auto slot = tokenSlot(m);
  if (!slot)
    return slot.takeError();
  const at::Tensor &like = (*slot)->toTensor();
  if (tokens.numel() != like.numel())
    return makeError(llvm::formatv("microbatch {0} picked {1} tokens; the "
                                   "token input takes {2}",
                                   m, tokens.numel(), like.numel())
                         .str());
  // In the placeholder's shape, dtype and device.
  auto fed = torchCall("cannot feed the picked tokens", [&] {
    return tokens.reshape(like.sizes()).to(like.options());
  });
  if (!fed)
    return fed.takeError();
  **slot = std::move(*fed);
  return llvm::Error::success();
}

/// SEND_TOK(m): the tokens picked from microbatch m, to a reader rank.
llvm::Error Executor::sendTokens(const Action &a) {
  auto it = picked.find(a.microbatch);
  if (it == picked.end())
    return makeError(llvm::formatv("internal error: no tokens picked from "
                                   "microbatch {0} on rank {1}",
                                   a.microbatch, plan.rank)
                         .str());
  std::string what =
      llvm::formatv("the tokens of microbatch {0}", a.microbatch).str();
  if (llvm::Error err = plan.transport->send(it->second.first, a.peerRank,
                                             channelOf(schedule, a), what))
    return err;
  if (--it->second.second == 0)
    picked.erase(it);
  return llvm::Error::success();
}

/// RECV_TOK(m): the tokens picked from microbatch m, from the collector.
llvm::Error Executor::recvTokens(const Action &a) {
  if (step.tokenRows < 1)
    return makeError("internal error: a decode without its rows per group");
  auto tokens = torchCall("cannot allocate the returned tokens", [&] {
    return at::empty({step.tokenRows}, at::kLong);
  });
  if (!tokens)
    return tokens.takeError();
  std::string what =
      llvm::formatv("the tokens of microbatch {0}", a.microbatch).str();
  if (llvm::Error err = plan.transport->recv(*tokens, a.peerRank,
                                             channelOf(schedule, a), what))
    return err;
  return heardTokens(a.microbatch, *tokens);
}

llvm::Error Executor::heardTokens(int m, const at::Tensor &tokens) {
  if (step.endToken >= 0) {
    auto all = torchCall("cannot read the returned tokens", [&] {
      return tokens.eq(step.endToken).all().item<bool>();
    });
    if (!all)
      return all.takeError();
    ended.resize(schedule.microbatches, 0);
    if (int next = schedule.tokens->next(m); next >= 0)
      ended[next] = *all;
  }
  bool readsHere = llvm::any_of(schedule.tokens->readers, [&](int k) {
    return schedule.placement.rankOf(k) == plan.rank;
  });
  return readsHere ? feedTokens(m, tokens) : llvm::Error::success();
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
} // namespace ppc::exec_detail
