//===- bench/plain_forward.cpp - The baseline of a 1-stage ppc run --------===//
//
// Benchmark 3's baseline (bench/run.py): what a user gets without ppc. It
// loads a TorchScript module with torch::jit::load and runs forward on a
// batch exactly as a 1-stage `ppc run --threads T --microbatches M` does:
// the same thread bounds (ppc::boundThreads), no autograd (NoGradGuard),
// the batch split with at::tensor_split along dim 0, one forward per
// microbatch, the outputs concatenated with at::cat.
//
//   plain_forward MODEL.pt INPUT.pt MICROBATCHES THREADS COLD WARMUP REPS
//                 [DEVICE]
//
// DEVICE (default cpu; cuda:0 for bench/gpu-check.sh) holds the module; a
// timed batch then also moves the input there and the output back to the
// CPU, as `ppc run --device cuda` does, which waits for the GPU.
//
// COLD times the first batch of COLD freshly loaded modules (what a ppc run,
// which runs its batch once, pays: the TorchScript profiling executor's
// first calls); then WARMUP untimed batches and REPS timed batches on one
// module. Prints one JSON object on stdout:
//   {"load_ms": L, "cold_ms": [...], "warm_ms": [...]}
//
//===----------------------------------------------------------------------===//
#include "lib/TensorIO.h"
#include "runtime/platform/Threads.h"

#include <ATen/ATen.h>
#include <torch/script.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

/// One batch: split, a forward per microbatch, concatenate.
at::Tensor runBatch(torch::jit::Module &module, const at::Tensor &input,
                    int microbatches) {
  std::vector<at::Tensor> outs;
  for (const at::Tensor &mb : at::tensor_split(input, microbatches, 0)) {
    c10::IValue out = module.forward({mb});
    // A ppc stage file returns a tuple of its outputs: take the first.
    outs.push_back(out.isTuple() ? out.toTupleRef().elements()[0].toTensor()
                                 : out.toTensor());
  }
  return outs.size() == 1 ? outs[0] : at::cat(outs, 0);
}

void printList(const char *key, const std::vector<double> &values) {
  std::printf("\"%s\": [", key);
  for (size_t i = 0; i < values.size(); ++i)
    std::printf("%s%.3f", i ? ", " : "", values[i]);
  std::printf("]");
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 8 && argc != 9) {
    std::fprintf(stderr, "usage: plain_forward MODEL.pt INPUT.pt MICROBATCHES "
                         "THREADS COLD WARMUP REPS [DEVICE]\n");
    return 2;
  }
  const std::string modelPath = argv[1];
  const int microbatches = std::atoi(argv[3]);
  const int threads = std::atoi(argv[4]);
  const int cold = std::atoi(argv[5]);
  const int warmup = std::atoi(argv[6]);
  const int reps = std::atoi(argv[7]);
  ppc::boundThreads(threads); // as ppc run --threads does, before any op

  auto inputs = ppc::loadTensors(argv[2]);
  if (!inputs) {
    std::fprintf(stderr, "error: %s\n",
                 llvm::toString(inputs.takeError()).c_str());
    return 2;
  }
  const at::Tensor input = (*inputs)[0].toTensor();
  torch::NoGradGuard noGrad;

  try {
    const c10::Device device(argc == 9 ? argv[8] : "cpu");
    // On the CPU both moves are no-ops.
    auto batch = [&](torch::jit::Module &m) {
      return runBatch(m, input.to(device), microbatches).cpu();
    };
    Clock::time_point start = Clock::now();
    torch::jit::Module module = torch::jit::load(modelPath, device);
    module.eval();
    double loadMs = msSince(start);

    std::vector<double> coldMs;
    for (int i = 0; i < cold; ++i) {
      torch::jit::Module fresh = torch::jit::load(modelPath, device);
      fresh.eval();
      start = Clock::now();
      batch(fresh);
      coldMs.push_back(msSince(start));
    }
    for (int i = 0; i < warmup; ++i)
      batch(module);
    std::vector<double> warmMs;
    for (int i = 0; i < reps; ++i) {
      start = Clock::now();
      batch(module);
      warmMs.push_back(msSince(start));
    }
    std::printf("{\"load_ms\": %.3f, ", loadMs);
    printList("cold_ms", coldMs);
    std::printf(", ");
    printList("warm_ms", warmMs);
    std::printf("}\n");
  } catch (const c10::Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
