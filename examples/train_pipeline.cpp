//===- examples/train_pipeline.cpp - Pipeline training from C++ -----------===//
//
// A user program on libppc_runtime's public API (<ppc/ppc.h>) that trains:
// run it on every rank of a job (ppc launch --nproc-per-node N --
// train_pipeline MANIFEST DATA.pt [STEPS] [MICROBATCHES]); DATA.pt holds
// (input, target) as for ppc train (docs/training.md). The rank computing
// the loss prints it per step, then every rank prints its parameters' count
// and the sum of their values. Any failure is one "error: ..." line and
// status 2. Build it as examples/CMakeLists.txt does (docs/library.md).
//
//===----------------------------------------------------------------------===//
#include <ppc/ppc.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

int main(int argc, char **argv) try {
  if (argc < 3) {
    std::cerr << "usage: train_pipeline MANIFEST DATA.pt [STEPS] "
                 "[MICROBATCHES]\n";
    return 2;
  }
  ppc::api::TrainOptions options;
  options.run.microbatches = argc > 4 ? std::atoi(argv[4]) : 2;
  options.run.schedule = "1f1b";
  options.run.useMetaCache = false;
  options.loss = "mse";
  options.optimizer = "adam";
  options.lr = 1e-3;
  int steps = argc > 3 ? std::atoi(argv[3]) : 3;

  ppc::api::Trainer trainer(argv[1], options);
  ppc::api::TrainingBatch batch;
  if (trainer.needsInputs() || trainer.needsTargets())
    batch = ppc::api::loadTrainingData(argv[2], trainer.modelInputCount())[0];
  std::cout << std::setprecision(9);
  for (int step = 1; step <= steps; ++step) {
    double loss = trainer.step(batch.inputs, batch.target);
    if (trainer.rank() == trainer.lossRank())
      std::cout << "step " << step << " loss " << loss << "\n";
  }
  double sum = 0;
  size_t count = 0;
  for (const auto &[name, param] : trainer.namedParameters()) {
    sum += param.sum().item<double>();
    ++count;
  }
  std::cout << "rank " << trainer.rank() << ": " << count << " parameters, sum "
            << sum << "\n";
  trainer.finish();
  return 0;
} catch (const ppc::api::Error &e) {
  std::cerr << "error: " << e.what() << "\n";
  return 2;
}
