//===- examples/pipeline_infer.cpp - Pipeline inference from C++ ----------===//
//
// A user program on libppc_runtime's public API (<ppc/ppc.h>): run it on
// every rank of a job (ppc launch --nproc-per-node N -- pipeline_infer
// MANIFEST INPUT.pt [MICROBATCHES] [OUTPUT.pt]); the rank of the last stage
// prints each output's shape and sum and, given OUTPUT.pt, saves the outputs
// there for torch.load. Any failure is one "error: ..." line and status 2.
// Build it against an installed ppc: examples/CMakeLists.txt, docs/library.md.
//
//===----------------------------------------------------------------------===//
#include <ppc/ppc.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

int main(int argc, char **argv) try {
  if (argc < 3) {
    std::cerr << "usage: pipeline_infer MANIFEST INPUT.pt [MICROBATCHES] "
                 "[OUTPUT.pt]\n";
    return 2;
  }
  ppc::api::RunOptions options;
  options.microbatches = argc > 3 ? std::atoi(argv[3]) : 2;
  options.useMetaCache = false;
  ppc::api::Pipeline pipeline(argv[1], options);
  auto inputs = pipeline.needsInputs() ? ppc::api::loadInputs(argv[2])
                                       : std::vector<c10::IValue>();
  std::vector<c10::IValue> outputs = pipeline.run(inputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    at::Tensor t = outputs[i].toTensor();
    std::cout << "output " << i << ": shape [" << c10::Join(",", t.sizes())
              << "] sum " << std::setprecision(9) << t.sum().item<double>()
              << "\n";
  }
  if (argc > 4 && pipeline.rank() == pipeline.outputRank())
    ppc::api::saveOutputs(argv[4], outputs, pipeline.outputIsTuple());
  pipeline.finish();
  std::cout << pipeline.stats().line() << "\n";
  return 0;
} catch (const ppc::api::Error &e) {
  std::cerr << "error: " << e.what() << "\n";
  return 2;
}
