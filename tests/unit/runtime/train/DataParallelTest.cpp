//===- tests/unit/runtime/train/DataParallelTest.cpp ----------------------===//
//
// Replicas of a pipeline.
// Replicas of a pipeline
//
// Tests runtime/train/DataParallel.h: the [dp, pp] mesh and its errors, the
// pipeline's view of the environment, gradient buckets, and the bucketed
// all-reduce over replica groups whose ranks are threads on the loopback
// link (the sum on every replica bitwise the same, a lost replica named by
// its job rank; on the GradientReducer's thread too, bitwise as after the
// schedule; OverlappedAllReduce starting each bucket after its gradients'
// last accumulation), and the two transports of a 2 x 2 job meeting at a real
// store (Gloo), each rank talking to its pipeline and its replica group.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/DataParallel.h"
#include "runtime/exec/Trace.h"
#include "runtime/link/Collectives.h"
#include "runtime/link/LoopbackLink.h"
#include "runtime/link/Rendezvous.h"

#include "llvm/ADT/STLExtras.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

using namespace ppc;

namespace {
std::string errorText(llvm::Error err) {
  return llvm::toString(std::move(err));
}

/// Runs `body(replica, transport)` on a thread per member of a replica
/// group of the job ranks `ranks`, over one loopback hub; returns each
/// member's error text ("" on success).
std::vector<std::string>
onReplicas(const std::vector<int> &ranks, std::chrono::milliseconds timeout,
           const std::function<llvm::Error(int, Transport &)> &body) {
  const int world = static_cast<int>(ranks.size());
  auto hub = std::make_shared<LoopbackHub>(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int d = 0; d < world; ++d)
    threads.emplace_back([&, d] {
      LinkSetup setup;
      setup.rank = d;
      setup.worldSize = world;
      setup.timeout = timeout;
      setup.loopback = hub;
      setup.globalRanks = ranks;
      auto t = Transport::create(setup);
      if (!t) {
        errors[d] = errorText(t.takeError());
        return;
      }
      if (llvm::Error err = body(d, **t))
        errors[d] = errorText(std::move(err));
      hub->close(d);
    });
  for (std::thread &t : threads)
    t.join();
  return errors;
}
} // namespace

TEST(DataParallelLayout, MeshWithPipelineInnermost) {
  auto layout = DataParallelLayout::create(6, 2);
  ASSERT_TRUE(bool(layout));
  EXPECT_EQ(layout->pipelineRanks, 3);
  EXPECT_EQ(layout->pipeline(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(layout->pipeline(1), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(layout->replicaGroup(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(layout->replicaGroup(2), (std::vector<int>{2, 5}));
  for (int g = 0; g < 6; ++g)
    EXPECT_EQ(layout->rankOf(layout->replicaOf(g), layout->pipelineRankOf(g)),
              g);
  EXPECT_EQ(layout->replicaOf(4), 1);
  EXPECT_EQ(layout->pipelineRankOf(4), 1);

  LaunchEnv env;
  env.rank = 4;
  env.worldSize = 6;
  env.localRank = 4;
  env.localWorldSize = 6;
  LaunchEnv local = layout->pipelineEnv(env);
  EXPECT_EQ(local.rank, 1);
  EXPECT_EQ(local.worldSize, 3);
  // The machine's ranks (devices, threads) stay the job's.
  EXPECT_EQ(local.localRank, 4);
  EXPECT_EQ(local.localWorldSize, 6);

  auto one = DataParallelLayout::create(4, 1);
  ASSERT_TRUE(bool(one));
  EXPECT_EQ(one->pipeline(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(one->replicaGroup(3), (std::vector<int>{3}));
}

TEST(DataParallelLayout, Errors) {
  EXPECT_EQ(errorText(DataParallelLayout::create(4, 3).takeError()),
            "dataParallel 3 does not divide WORLD_SIZE 4");
  EXPECT_EQ(errorText(DataParallelLayout::create(4, 0).takeError()),
            "dataParallel 0 is not an integer in 1..65536");
}

TEST(DataParallel, BucketsCloseAtTheirSizeAndSplitByDtype) {
  std::vector<at::Tensor> tensors = {
      at::zeros({4}),                 // 16 bytes
      at::zeros({4}),                 // 32
      at::Tensor(),                   // left out
      at::zeros({2}),                 // bucket 0 reached 32: a new one
      at::zeros({2}, at::kDouble),    // another dtype: a new one
      at::zeros({100}, at::kDouble)}; // fits the open one (16 < 32)
  std::vector<GradientBucket> buckets = planBuckets(tensors, 32);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].members, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(buckets[0].numel, 8);
  EXPECT_EQ(buckets[1].members, (std::vector<size_t>{3}));
  EXPECT_EQ(buckets[2].members, (std::vector<size_t>{4, 5}));
  EXPECT_EQ(buckets[2].numel, 102);
  EXPECT_TRUE(planBuckets({}, 32).empty());
}

TEST(DataParallel, GradientsSumBitwiseEquallyOnEveryReplica) {
  // Three replicas of pipeline rank 1 of a 3 x 2 job: ranks 1, 3, 5.
  const std::vector<int> ranks = {1, 3, 5};
  std::vector<std::vector<at::Tensor>> params(3);
  for (int d = 0; d < 3; ++d) {
    at::manual_seed(d);
    for (auto shape : {std::vector<int64_t>{3, 5}, {7}, {2, 2, 2}}) {
      at::Tensor p = at::randn(shape).requires_grad_();
      p.mutable_grad() = at::randn(shape);
      params[d].push_back(p);
    }
  }
  std::vector<at::Tensor> want;
  for (size_t i = 0; i < params[0].size(); ++i)
    want.push_back(params[0][i].grad() + params[1][i].grad() +
                   params[2][i].grad());
  // 40-byte buckets: every tensor travels in a bucket of its own or two.
  auto errors = onReplicas(
      ranks, std::chrono::milliseconds(5000), [&](int d, Transport &t) {
        return allReduceGradients(t, params[d], 40, 0, nullptr);
      });
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(at::allclose(params[0][i].grad(), want[i]));
    for (int d = 1; d < 3; ++d)
      EXPECT_TRUE(at::equal(params[d][i].grad(), params[0][i].grad()));
  }

  std::vector<double> sums(3);
  errors = onReplicas(ranks, std::chrono::milliseconds(5000),
                      [&](int d, Transport &t) -> llvm::Error {
                        auto sum = allReduceScalar(t, 0.25 * (d + 1), "loss");
                        if (!sum)
                          return sum.takeError();
                        sums[d] = *sum;
                        return llvm::Error::success();
                      });
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(errors[d], "");
    EXPECT_EQ(sums[d], 1.5);
  }
}

TEST(DataParallel, LostReplicaIsNamedByItsJobRank) {
  // Replica 1 (job rank 3) leaves before the all-reduce.
  at::Tensor p = at::ones({4}).requires_grad_();
  auto errors = onReplicas(
      {1, 3}, std::chrono::milliseconds(2000),
      [&](int d, Transport &t) -> llvm::Error {
        if (d == 1)
          return llvm::Error::success();
        at::Tensor mine = p.detach().clone().requires_grad_();
        mine.mutable_grad() = at::ones({4});
        return allReduceGradients(t, {mine}, kGradientBucketBytes, 2, nullptr);
      });
  EXPECT_EQ(errors[0].rfind("lost rank 3 (", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("gradient bucket 0 of stage 2"), std::string::npos)
      << errors[0];
  EXPECT_EQ(errors[1], "");
}

TEST(DataParallel, ReducerSumsBitwiseAsAfterTheSchedule) {
  // Three replicas; two "stages" of gradients each, started in the order a
  // schedule's backward ends them (stage 1, then stage 0) and summed on the
  // reducer's thread in 40-byte buckets; the same gradients summed by
  // allReduceGradients() in 4 MiB buckets, stage 0 first: bitwise equal.
  const std::vector<int> ranks = {0, 2, 4};
  auto gradients = [](int d) {
    std::vector<std::vector<at::Tensor>> stages(2);
    at::manual_seed(d);
    for (auto shape : {std::vector<int64_t>{3, 5}, {7}, {2, 2, 2}, {11}})
      for (auto &stage : stages) {
        at::Tensor p = at::randn(shape).requires_grad_();
        p.mutable_grad() = at::randn(shape);
        stage.push_back(p);
      }
    return stages;
  };
  std::vector<std::vector<std::vector<at::Tensor>>> overlapped(3), after(3);
  for (int d = 0; d < 3; ++d) {
    overlapped[d] = gradients(d);
    after[d] = gradients(d);
  }
  std::vector<std::string> notes(3);
  auto errors = onReplicas(
      ranks, std::chrono::milliseconds(5000),
      [&](int d, Transport &t) -> llvm::Error {
        GradientReducer reducer(t, 40);
        for (int stage : {1, 0}) {
          std::vector<at::Tensor> grads;
          for (const at::Tensor &p : overlapped[d][stage])
            grads.push_back(p.grad());
          reducer.start(std::move(grads), stage);
        }
        TraceRecorder trace(d);
        auto times = reducer.wait(&trace);
        if (!times)
          return times.takeError();
        int buckets = 0, waits = 0;
        for (const TraceEvent &e : trace.events()) {
          buckets +=
              e.name == "ALLREDUCE" && e.category == "other" && e.tid == 1;
          waits +=
              e.name == "ALLREDUCE_WAIT" && e.category == "wait" && e.tid == 0;
        }
        notes[d] = std::to_string(buckets) + " " + std::to_string(waits);
        for (int stage : {0, 1})
          if (llvm::Error err = allReduceGradients(
                  t, after[d][stage], kGradientBucketBytes, stage, nullptr))
            return err;
        // A second round on the same reducer, after the first wait.
        reducer.start({overlapped[d][0][0].grad()}, 0);
        auto again = reducer.wait(nullptr);
        return again ? llvm::Error::success() : again.takeError();
      });
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(errors[d], "");
    // Each stage's 4 tensors of 15, 7 + 8 and 11 floats: 3 buckets.
    EXPECT_EQ(notes[d], "6 1");
  }
  for (int stage = 0; stage < 2; ++stage)
    for (size_t i = 0; i < 4; ++i) {
      at::Tensor once = after[0][stage][i].grad();
      for (int d = 0; d < 3; ++d) {
        at::Tensor got = overlapped[d][stage][i].grad();
        // The first tensor of stage 0 went round twice.
        if (stage == 0 && i == 0)
          EXPECT_TRUE(at::allclose(got, once * 3));
        else
          EXPECT_TRUE(at::equal(got, once)) << stage << " " << i;
        EXPECT_TRUE(at::equal(after[d][stage][i].grad(), once));
      }
    }
}

TEST(DataParallel, ReducerNamesALostReplicaAndDropsTheRest) {
  // Replica 1 (job rank 3) leaves; replica 0's first bucket waits for it
  // until the timeout, and the four buckets behind it are dropped, not
  // waited for one by one.
  auto errors = onReplicas(
      {1, 3}, std::chrono::milliseconds(1000),
      [&](int d, Transport &t) -> llvm::Error {
        if (d == 1)
          return llvm::Error::success();
        GradientReducer reducer(t, 16);
        std::vector<at::Tensor> grads;
        for (int k = 0; k < 5; ++k)
          grads.push_back(at::ones({4}));
        reducer.start(std::move(grads), 2);
        TraceRecorder trace(0);
        auto times = reducer.wait(&trace);
        if (times)
          return makeError("the all-reduce succeeded without its peer");
        size_t buckets =
            llvm::count_if(trace.events(), [](const TraceEvent &e) {
              return e.name == "ALLREDUCE";
            });
        if (buckets != 1) {
          llvm::consumeError(times.takeError());
          return makeError(std::to_string(buckets) + " buckets ran");
        }
        return times.takeError();
      });
  EXPECT_EQ(errors[0].rfind("lost rank 3 (", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("gradient bucket 0 of stage 2"), std::string::npos)
      << errors[0];
  EXPECT_EQ(errors[1], "");
}

TEST(DataParallel, OverlapStartsEachBucketAfterItsLastAccumulation) {
  // Two replicas, one stage of three parameters (a bucket each), two
  // backwards a step (two microbatches): with perBucket, every bucket has
  // started when the second backward returns, none after the first; without
  // it, they start at stageDone(). The sums are the replicas' gradients
  // added in replica order, bitwise.
  auto model = [](int d) {
    at::manual_seed(10 + d);
    return std::vector<at::Tensor>{at::randn({4, 3}).requires_grad_(),
                                   at::randn({3}).requires_grad_(),
                                   at::randn({3, 2}).requires_grad_()};
  };
  auto backward = [](const std::vector<at::Tensor> &p, int m) {
    at::Tensor x = at::arange(8 * (m + 1), 8 * (m + 2), at::kFloat)
                       .reshape({2, 4})
                       .div(10);
    at::Tensor y = (at::matmul(x, p[0]) + p[1]).relu().matmul(p[2]).sum();
    y.backward();
  };
  std::vector<std::vector<at::Tensor>> want(2);
  for (int d = 0; d < 2; ++d) {
    std::vector<at::Tensor> p = model(d);
    backward(p, 0);
    backward(p, 1);
    for (const at::Tensor &t : p)
      want[d].push_back(t.grad());
  }
  for (bool perBucket : {true, false}) {
    std::vector<std::vector<at::Tensor>> params = {model(0), model(1)};
    std::vector<std::string> seen(2);
    auto errors =
        onReplicas({0, 1}, std::chrono::milliseconds(5000),
                   [&](int d, Transport &t) -> llvm::Error {
                     auto overlap = OverlappedAllReduce::create(
                         t, {{3, params[d]}}, {{3, 2}}, perBucket, 8);
                     if (!overlap)
                       return overlap.takeError();
                     // A backward outside a step counts for nothing.
                     backward(params[d], 0);
                     for (at::Tensor &p : params[d])
                       p.mutable_grad() = at::Tensor();
                     (*overlap)->beginStep();
                     backward(params[d], 0);
                     seen[d] += std::to_string((*overlap)->startedBuckets(3));
                     backward(params[d], 1);
                     seen[d] += std::to_string((*overlap)->startedBuckets(3));
                     (*overlap)->stageDone(3);
                     seen[d] += std::to_string((*overlap)->startedBuckets(3));
                     auto times = (*overlap)->finish(nullptr);
                     return times ? llvm::Error::success() : times.takeError();
                   });
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(errors[d], "");
      EXPECT_EQ(seen[d], perBucket ? "033" : "003");
      for (size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(at::equal(params[d][i].grad(), want[0][i] + want[1][i]))
            << perBucket << " " << d << " " << i;
    }
  }
}

TEST(DataParallel, TensorsShaDependsOnEveryByte) {
  at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3});
  std::string sha = tensorsSha256({a, at::ones({2})});
  EXPECT_EQ(sha.size(), 64u);
  EXPECT_EQ(sha, tensorsSha256({a.clone(), at::ones({2})}));
  at::Tensor b = a.clone();
  b[1][2] = std::nextafter(5.0f, 6.0f);
  EXPECT_NE(sha, tensorsSha256({b, at::ones({2})}));
}

TEST(DataParallel, TwoByTwoJobConnectsPipelinesAndReplicaGroups) {
  auto store = StoreHost::start(0);
  ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
  std::vector<std::string> errors(4);
  // What each rank received from its pipeline peer and its replica peer.
  std::vector<double> fromPipeline(4), fromReplica(4);
  std::vector<std::thread> threads;
  for (int g = 0; g < 4; ++g)
    threads.emplace_back([&, g] {
      LaunchEnv env;
      env.rank = g;
      env.worldSize = 4;
      env.masterPort = (*store)->port();
      env.launcherHostsStore = true;
      env.jobToken = "dp-test";
      // What a RankContext given this rank's mesh connects.
      auto mesh = pipelineMesh(env, 2);
      if (!mesh) {
        errors[g] = llvm::toString(mesh.takeError());
        return;
      }
      if (mesh->replica != g / 2 || mesh->pipelineEnv.rank != g % 2 ||
          mesh->pipelineEnv.worldSize != 2) {
        errors[g] = "unexpected mesh";
        return;
      }
      auto t = connectGroupTransports(
          env, DeviceKind::CPU, std::chrono::seconds(20), LinkPolicy::Gloo,
          {mesh->pipeline, mesh->replicaGroup});
      if (!t) {
        errors[g] = llvm::toString(t.takeError());
        return;
      }
      llvm::Error err = [&]() -> llvm::Error {
        Transport &pipe = *(*t)[0], &reps = *(*t)[1];
        if (pipe.rank() != g % 2 || pipe.worldSize() != 2 ||
            reps.rank() != g / 2 || reps.worldSize() != 2 ||
            pipe.globalRank(1 - g % 2) != (g ^ 1) ||
            reps.globalRank(1 - g / 2) != (g ^ 2))
          return makeError("unexpected ranks");
        // Each value names its sender: 10 * sender + 1 (pipeline) or + 2.
        if (llvm::Error e = pipe.send(at::full({1}, 10.0 * g + 1, at::kDouble),
                                      1 - pipe.rank(), 0, "p"))
          return e;
        if (llvm::Error e = reps.send(at::full({1}, 10.0 * g + 2, at::kDouble),
                                      1 - reps.rank(), 0, "r"))
          return e;
        at::Tensor a = at::zeros({1}, at::kDouble), b = at::zeros_like(a);
        if (llvm::Error e = pipe.recv(a, 1 - pipe.rank(), 0, "p"))
          return e;
        if (llvm::Error e = reps.recv(b, 1 - reps.rank(), 0, "r"))
          return e;
        fromPipeline[g] = a.item<double>();
        fromReplica[g] = b.item<double>();
        if (llvm::Error e = pipe.flushSends())
          return e;
        if (llvm::Error e = reps.flushSends())
          return e;
        if (llvm::Error e = barrier(pipe))
          return e;
        return barrier(reps);
      }();
      if (err)
        errors[g] = llvm::toString(std::move(err));
    });
  for (std::thread &t : threads)
    t.join();
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(errors[g], "") << "rank " << g;
    EXPECT_EQ(fromPipeline[g], 10.0 * (g ^ 1) + 1) << "rank " << g;
    EXPECT_EQ(fromReplica[g], 10.0 * (g ^ 2) + 2) << "rank " << g;
  }
}
