//===- tests/unit/runtime/train/TrainJob.h - A job to train ----*- C++ -*-===//
//
// For unit tests of Trainer (runtime/train/Trainer.h) whose ranks run in
// threads of one process, meeting over TCP on this host: a manifest of two
// TorchScript stages with parameters (TwoStageJob's layout), a = x @ w0 on
// stage 0 and b = a @ w1 + b1 on stage 1 (x float32[N,3], b float32[N,2]),
// and the same model unsplit (Reference) to compare a step with.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_RUNTIME_TRAIN_TRAINJOB_H
#define PPC_TESTS_UNIT_RUNTIME_TRAIN_TRAINJOB_H

#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "runtime/train/Trainer.h"
#include "tests/unit/runtime/FreePort.h"
#include "tests/unit/runtime/TwoStageJob.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ppc::testing {

class TrainJob : public TwoStageJob {
protected:
  /// Stage 0: a = x @ w0; stage 1: b = a @ w1 + b1, with parameters.
  torch::jit::Module stageModule(int s) const override {
    torch::jit::Module m("Stage" + std::to_string(s));
    if (s == 0) {
      m.register_parameter("w0", initialW0().requires_grad_(true),
                           /*is_buffer=*/false);
      m.define("def forward(self, x: Tensor):\n"
               "    return (torch.matmul(x, self.w0),)\n");
    } else {
      m.register_parameter("w1", initialW1().requires_grad_(true), false);
      m.register_parameter("b1", initialB1().requires_grad_(true), false);
      m.define("def forward(self, a: Tensor):\n"
               "    return (torch.matmul(a, self.w1) + self.b1,)\n");
    }
    return m;
  }

  static at::Tensor initialW0() {
    return at::arange(12, at::kFloat).reshape({3, 4}) / 8.0 - 0.5;
  }
  static at::Tensor initialW1() {
    return at::arange(8, at::kFloat).reshape({4, 2}) / -4.0 + 1.0;
  }
  static at::Tensor initialB1() { return at::tensor({0.25f, -0.75f}); }

  /// A batch of `rows` rows and its target.
  static at::Tensor batch(int rows) {
    return at::arange(rows * 3, at::kFloat).reshape({rows, 3}) / 4.0 - 1.0;
  }
  static at::Tensor target(int rows) {
    return at::arange(rows * 2, at::kFloat).reshape({rows, 2}).cos();
  }

  /// The unsplit model's parameters (w0, w1, b1), requiring gradients.
  struct Reference {
    at::Tensor w0 = initialW0().requires_grad_(true);
    at::Tensor w1 = initialW1().requires_grad_(true);
    at::Tensor b1 = initialB1().requires_grad_(true);
    std::vector<at::Tensor> params() const { return {w0, w1, b1}; }
    at::Tensor forward(const at::Tensor &x) const {
      return at::matmul(at::matmul(x, w0), w1) + b1;
    }
    /// The batch's mean squared error; its backward leaves the gradients.
    at::Tensor lossBackward(const at::Tensor &x, const at::Tensor &t) const {
      at::Tensor loss = at::mse_loss(forward(x), t);
      loss.backward();
      return loss.detach();
    }
  };

  static TrainOptions options(int microbatches = 1) {
    TrainOptions o;
    o.run.microbatches = microbatches;
    o.run.useMetaCache = false;
    o.run.timeout = std::chrono::milliseconds(20000);
    o.run.threads = 1;
    o.lr = 0.1;
    return o;
  }

  /// Creates a Trainer on each of `world` ranks, in threads, runs
  /// `body(trainer, rank)` and finish(); returns each rank's first error
  /// ("" when none). A create error is returned as "create: ...".
  std::vector<std::string>
  onRanks(int world, const TrainOptions &o,
          const std::function<llvm::Error(Trainer &, int)> &body) {
    return onRankThreads<Trainer>(
        world,
        [&](const std::string &manifest, const LaunchEnv &env) {
          return Trainer::create(manifest, env, o);
        },
        body, "create: ");
  }

  /// The inputs of step() for `trainer`: the batch where it reads inputs.
  static std::vector<c10::IValue> inputsFor(const Trainer &trainer,
                                            const at::Tensor &x) {
    if (!trainer.needsInputs())
      return {};
    return {x};
  }

  /// Every rank's parameters after a body that keeps them, merged.
  std::mutex mu;
  std::map<std::string, at::Tensor> trained;
  void keepParameters(const Trainer &t) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto &[name, value] : parametersOf(t))
      trained[name] = value;
  }

  /// Each of this rank's parameters by name ("stage 1: w1"), cloned.
  static std::map<std::string, at::Tensor> parametersOf(const Trainer &t) {
    std::map<std::string, at::Tensor> out;
    for (const auto &[name, value] : t.namedParameters())
      out[name] = value.detach().clone();
    return out;
  }
};

} // namespace ppc::testing

#endif // PPC_TESTS_UNIT_RUNTIME_TRAIN_TRAINJOB_H
