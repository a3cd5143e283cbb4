//===- examples/train_pipeline.cpp - Pipeline training from C++ -----------===//
//
// A user program that links libppc_runtime and trains: run it on every rank
// of a job (ppc launch --nproc-per-node N -- train_pipeline MANIFEST DATA.pt
// [STEPS] [MICROBATCHES]); DATA.pt holds (input, target) as for ppc train
// (docs/training.md). The rank computing the loss prints it per step, then
// every rank prints its parameters' count and the sum of their values.
//
// Build it against an installed ppc with:
//   find_package(ppc REQUIRED)
//   target_link_libraries(my_program PRIVATE ppc::runtime)
//
//===----------------------------------------------------------------------===//
#include "runtime/TrainData.h"
#include "runtime/Trainer.h"

#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>

#include <cstdlib>

int main(int argc, char **argv) {
  if (argc < 3) {
    llvm::errs() << "usage: train_pipeline MANIFEST DATA.pt [STEPS] "
                    "[MICROBATCHES]\n";
    return 2;
  }
  auto fail = [](llvm::Error err) {
    llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
    return 2;
  };

  auto env = ppc::LaunchEnv::fromEnvironment();
  if (!env)
    return fail(env.takeError());
  ppc::TrainOptions options;
  options.run.microbatches = argc > 4 ? std::atoi(argv[4]) : 2;
  options.run.schedule = ppc::ScheduleKind::OneFOneB;
  options.run.useMetaCache = false;
  options.loss = ppc::LossKind::MSE;
  options.optimizer = ppc::OptimizerKind::Adam;
  options.lr = 1e-3;
  int steps = argc > 3 ? std::atoi(argv[3]) : 3;

  auto trainer = ppc::Trainer::create(argv[1], *env, options);
  if (!trainer)
    return fail(trainer.takeError());
  ppc::Trainer &t = **trainer;
  ppc::TrainingBatch batch;
  if (t.needsInputs() || t.needsTargets()) {
    auto data = ppc::loadTrainingData(argv[2], t.modelInputCount());
    if (!data)
      return fail(data.takeError());
    batch = (*data)[0];
  }
  for (int step = 1; step <= steps; ++step) {
    auto loss = t.step(batch.inputs, batch.target);
    if (!loss)
      return fail(loss.takeError());
    if (t.rank() == t.lossRank())
      llvm::outs() << "step " << step << " loss " << *loss << "\n";
  }
  double sum = 0;
  size_t count = 0;
  for (const auto &[name, param] : t.namedParameters()) {
    sum += param.sum().item<double>();
    ++count;
  }
  llvm::outs() << "rank " << t.rank() << ": " << count << " parameters, sum "
               << sum << "\n";
  if (llvm::Error err = t.finish())
    return fail(std::move(err));
  return 0;
}
