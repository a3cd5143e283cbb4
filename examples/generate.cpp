//===- examples/generate.cpp - Pipelined decoding from C++ ----------------===//
//
// Run on every rank: ppc launch --nproc-per-node N -- generate MANIFEST
// PROMPT.pt [NEW_TOKENS [submit]]. The last stage's rank prints each new
// token as soon as it is picked ("picked ROW INDEX TOKEN"), then each row's
// new tokens. With "submit" the prompt is queued as a service queues
// requests, with a token callback of its own. docs/library.md builds it;
// docs/generate.md exports a decoder.
//
//===----------------------------------------------------------------------===//
#include <ppc/ppc.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char **argv) try {
  if (argc < 3) {
    std::cerr << "usage: generate MANIFEST PROMPT.pt [NEW_TOKENS [submit]]\n";
    return 2;
  }
  auto print = [](const ppc::api::PickedToken &t) {
    std::cout << "picked " << t.row << " " << t.index << " " << t.token
              << std::endl;
  };
  bool submit = argc > 4 && std::string(argv[4]) == "submit";
  ppc::api::GenerateOptions options;
  if (!submit)
    options.onToken = print; // every request's tokens
  ppc::api::Generator generator(argv[1], options);
  at::Tensor prompt = ppc::api::loadInputs(argv[2]).at(0).toTensor();
  int newTokens = argc > 3 ? std::atoi(argv[3]) : 8;
  at::Tensor tokens;
  if (submit) {
    generator.submit(prompt, newTokens, std::nullopt, print);
    generator.flush();
    tokens = generator.next().value_or(at::Tensor());
  } else {
    tokens = generator.generate(prompt, newTokens);
  }
  for (int64_t row = 0; tokens.defined() && row < tokens.size(0); ++row) {
    std::cout << "row " << row << ":";
    for (int64_t t = 0; t < tokens.size(1); ++t)
      std::cout << " " << tokens[row][t].item<int64_t>();
    std::cout << "\n";
  }
  generator.finish();
  return 0;
} catch (const ppc::api::Error &e) {
  std::cerr << "error: " << e.what() << "\n";
  return 2;
}
