//===- tests/unit/runtime/TwoStageJob.h - A two-stage job -------*- C++ -*-===//
//
// For unit tests of the library (runtime/run/Pipeline.h) whose ranks run in
// threads of one process: a manifest of two TorchScript stages, a = x * 2
// on stage 0 and b = a + 1 on stage 1 (or the modules a derived fixture's
// stageModule() makes), written to a fresh directory that the fixture
// removes.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_RUNTIME_TWOSTAGEJOB_H
#define PPC_TESTS_UNIT_RUNTIME_TWOSTAGEJOB_H

#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "runtime/link/LaunchEnv.h"
#include "tests/unit/runtime/FreePort.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>
#include <torch/script.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ppc::testing {

/// The job's directory holds manifest.json and stage0.pt, stage1.pt.
class TwoStageJob : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-two-stage", dir));
    manifest.modelInputs.push_back({"x", ValueKind::Tensor, {}, {}});
    for (int s = 0; s < 2; ++s) {
      StageInfo info;
      info.index = s;
      info.file = "stage" + std::to_string(s) + ".pt";
      stageModule(s).save(path(info.file));
      auto sha = sha256File(path(info.file));
      ASSERT_TRUE(static_cast<bool>(sha));
      info.sha256 = *sha;
      StageInput in;
      in.name = s == 0 ? "x" : "a";
      in.source =
          s == 0 ? ValueRef::fromModelInput(0) : ValueRef::fromStage(0, 0);
      info.inputs.push_back(in);
      StageOutput out;
      out.name = s == 0 ? "a" : "b";
      if (s == 0)
        out.consumers = {1};
      info.outputs.push_back(out);
      manifest.stages.push_back(info);
    }
    manifest.modelOutputs = {ValueRef::fromStage(1, 0)};
    manifest.costModel = "nodes";
    ASSERT_FALSE(static_cast<bool>(manifest.verify()));
    ASSERT_FALSE(static_cast<bool>(manifest.save(path("manifest.json"))));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  /// Stage `s`'s module: takes one tensor (x, then a), returns a tuple of
  /// one tensor (a, then b).
  virtual torch::jit::Module stageModule(int s) const {
    const char *code[] = {"def forward(self, x: Tensor):\n"
                          "    return (x * 2.0,)\n",
                          "def forward(self, a: Tensor):\n"
                          "    return (a + 1.0,)\n"};
    torch::jit::Module m("Stage");
    m.define(code[s]);
    return m;
  }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  /// Runs the job's `world` ranks in threads of this process, meeting on
  /// a free port: each makes its object with `create(manifest, env)`
  /// (Pipeline::create, Trainer::create), runs `body(object, rank)`, then
  /// finish(). Returns each rank's first error ("" when none), a create
  /// error prefixed with `createPrefix`.
  template <typename T, typename Create>
  std::vector<std::string>
  onRankThreads(int world, Create create,
                const std::function<llvm::Error(T &, int)> &body,
                const std::string &createPrefix = "") {
    int port = freePort();
    std::vector<std::string> errors(world);
    auto rank = [&](int r) {
      LaunchEnv env;
      env.rank = env.localRank = r;
      env.worldSize = env.localWorldSize = world;
      env.masterPort = port;
      llvm::Expected<std::unique_ptr<T>> made =
          create(path("manifest.json"), env);
      if (!made) {
        errors[r] = createPrefix + llvm::toString(made.takeError());
        return;
      }
      llvm::Error err = body(**made, r);
      if (!err)
        err = (*made)->finish();
      if (err)
        errors[r] = llvm::toString(std::move(err));
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back(rank, r);
    for (std::thread &t : threads)
      t.join();
    return errors;
  }

  llvm::SmallString<128> dir;
  Manifest manifest;
};

} // namespace ppc::testing

#endif // PPC_TESTS_UNIT_RUNTIME_TWOSTAGEJOB_H
