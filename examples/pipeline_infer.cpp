//===- examples/pipeline_infer.cpp - Pipeline inference from C++ ----------===//
//
// A user program on libppc_runtime's public API (<ppc/ppc.h>): run it on
// every rank of a job (ppc launch --nproc-per-node N -- pipeline_infer
// MANIFEST INPUT.pt [MICROBATCHES] [OUTPUT.pt] [BATCHES]); the rank of the
// last stage prints each output's shape and sum and, given OUTPUT.pt, saves
// the outputs there for torch.load. Given BATCHES, it streams that many
// batches (submit / next / flush): batch b is INPUT's rows less b % 2 of
// them, times b + 1, so that signatures differ; batch b's outputs go to
// OUTPUT.pt.b. Any failure is one "error: ..." line and status 2.
// Build it against an installed ppc: examples/CMakeLists.txt, docs/library.md.
//
//===----------------------------------------------------------------------===//
#include <ppc/ppc.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

int main(int argc, char **argv) try {
  if (argc < 3) {
    std::cerr << "usage: pipeline_infer MANIFEST INPUT.pt [MICROBATCHES] "
                 "[OUTPUT.pt] [BATCHES]\n";
    return 2;
  }
  ppc::api::RunOptions options;
  options.microbatches = argc > 3 ? std::atoi(argv[3]) : 2;
  options.useMetaCache = false;
  ppc::api::Pipeline pipeline(argv[1], options);
  auto inputs = pipeline.needsInputs() ? ppc::api::loadInputs(argv[2])
                                       : std::vector<c10::IValue>();
  auto print = [](const std::string &prefix,
                  const std::vector<c10::IValue> &outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      at::Tensor t = outputs[i].toTensor();
      std::cout << prefix << "output " << i << ": shape ["
                << c10::Join(",", t.sizes()) << "] sum " << std::setprecision(9)
                << t.sum().item<double>() << "\n";
    }
  };
  bool writes = argc > 4 && pipeline.rank() == pipeline.outputRank();
  if (argc > 5) {
    // Streaming: submit() queues a batch, and full windows run in the
    // background; the outputs of every batch whose window ran are taken as
    // they come, and flush() waits for the rest.
    int batches = std::atoi(argv[5]), done = 0;
    auto take = [&] {
      while (std::optional<std::vector<c10::IValue>> out = pipeline.next()) {
        print("batch " + std::to_string(done) + " ", *out);
        if (writes)
          ppc::api::saveOutputs(std::string(argv[4]) + "." +
                                    std::to_string(done),
                                *out, pipeline.outputIsTuple());
        ++done;
      }
    };
    for (int b = 0; b < batches; ++b) {
      std::vector<c10::IValue> batch;
      for (const c10::IValue &v : inputs) {
        at::Tensor t = v.toTensor();
        batch.push_back(t.slice(0, 0, t.size(0) - b % 2) * (b + 1));
      }
      pipeline.submit(batch);
      take();
    }
    pipeline.flush();
    take();
    std::cout << "streamed " << done << " batches in windows of "
              << pipeline.windowBatches() << "\n";
  } else {
    std::vector<c10::IValue> outputs = pipeline.run(inputs);
    print("", outputs);
    if (writes)
      ppc::api::saveOutputs(argv[4], outputs, pipeline.outputIsTuple());
  }
  pipeline.finish();
  std::cout << pipeline.stats().line() << "\n";
  return 0;
} catch (const ppc::api::Error &e) {
  std::cerr << "error: " << e.what() << "\n";
  return 2;
}
