//===- examples/pipeline_infer.cpp - Pipeline inference from C++ ----------===//
//
// A user program that links libppc_runtime: run it on every rank of a job
// (ppc launch --nproc-per-node N -- pipeline_infer MANIFEST INPUT.pt [M])
// and the rank of the last stage prints each output's shape and sum.
//
// Build it against an installed ppc with:
//   find_package(ppc REQUIRED)
//   target_link_libraries(my_program PRIVATE ppc::runtime)
//
//===----------------------------------------------------------------------===//
#include "runtime/Pipeline.h"

#include "llvm/Support/raw_ostream.h"

#include <torch/serialize.h>

#include <fstream>
#include <iterator>

static std::vector<c10::IValue> readInputs(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  c10::IValue value = torch::pickle_load(bytes);
  if (value.isTuple())
    return value.toTupleRef().elements().vec();
  return {value};
}

int main(int argc, char **argv) {
  if (argc < 3) {
    llvm::errs() << "usage: pipeline_infer MANIFEST INPUT.pt [MICROBATCHES]\n";
    return 2;
  }
  auto fail = [](llvm::Error err) {
    llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
    return 2;
  };

  auto env = ppc::LaunchEnv::fromEnvironment();
  if (!env)
    return fail(env.takeError());
  ppc::RunOptions options;
  options.microbatches = argc > 3 ? std::atoi(argv[3]) : 2;
  options.useMetaCache = false;

  auto pipeline = ppc::Pipeline::create(argv[1], *env, options);
  if (!pipeline)
    return fail(pipeline.takeError());
  std::vector<c10::IValue> inputs;
  if ((*pipeline)->needsInputs())
    inputs = readInputs(argv[2]);
  auto outputs = (*pipeline)->run(inputs);
  if (!outputs)
    return fail(outputs.takeError());
  for (size_t i = 0; i < outputs->size(); ++i) {
    const at::Tensor &t = (*outputs)[i].toTensor();
    llvm::outs() << "output " << i << ": shape [";
    for (int64_t d = 0; d < t.dim(); ++d)
      llvm::outs() << (d ? "," : "") << t.size(d);
    llvm::outs() << "] sum " << t.sum().item<double>() << "\n";
  }
  if (llvm::Error err = (*pipeline)->finish())
    return fail(std::move(err));
  llvm::outs() << (*pipeline)->stats().line() << "\n";
  return 0;
}
