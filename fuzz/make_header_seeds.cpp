//===- fuzz/make_header_seeds.cpp - Seeds for fuzz_meta_header ------------===//
//
// Writes metadata headers made by encodeHeader, the encoder the sending rank
// uses, in fuzz_meta_header's input layout (four bytes of expectations, then
// the words), one file per header, into the directory given as argument.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/TensorMeta.h"

#include <cstdio>
#include <string>

using namespace ppc;

static TensorMeta tensor(c10::ScalarType dtype, std::vector<int64_t> sizes) {
  TensorMeta t;
  t.dtype = dtype;
  t.sizes = sizes;
  t.strides.assign(sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d)
    t.strides[d] = t.strides[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
  return t;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_header_seeds DIR\n");
    return 2;
  }
  ValueMeta mlp{ValueKind::Tensor, {tensor(c10::kFloat, {2, 64})}};
  ValueMeta image{ValueKind::Tensor, {tensor(c10::kFloat, {1, 3, 8, 8})}};
  image.tensors[0].requiresGrad = true;
  ValueMeta pair{ValueKind::TensorTuple,
                 {tensor(c10::kFloat, {2, 4}), tensor(c10::kLong, {2})}};
  ValueMeta list{ValueKind::TensorList,
                 {tensor(c10::kBool, {3}), tensor(c10::kDouble, {0, 5})}};
  ValueMeta integer{ValueKind::Int, {}}, real{ValueKind::Float, {}},
      flag{ValueKind::Bool, {}}, ints{ValueKind::IntList, {}, 3};
  std::vector<std::vector<ValueMeta>> headers = {
      {mlp}, {image}, {pair}, {list}, {mlp, integer, real, flag, ints}, {}};
  for (size_t i = 0; i < headers.size(); ++i) {
    int producer = i % 3, consumer = producer + 1, microbatch = i;
    std::vector<int64_t> words =
        encodeHeader(producer, consumer, microbatch, headers[i]);
    unsigned char expect[4] = {static_cast<unsigned char>(producer),
                               static_cast<unsigned char>(consumer),
                               static_cast<unsigned char>(microbatch),
                               static_cast<unsigned char>(headers[i].size())};
    std::string path =
        std::string(argv[1]) + "/header_" + std::to_string(i) + ".bin";
    std::FILE *f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(expect, 1, 4, f) != 4 ||
        std::fwrite(words.data(), 8, words.size(), f) != words.size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "error: cannot write '%s'\n", path.c_str());
      return 2;
    }
  }
  return 0;
}
