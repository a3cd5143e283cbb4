//===- tests/unit/runtime/MetaBuilders.h - Metadata written by hand -*- C++
//-*-===//
//
// Builds the expected metadata of the hand-written fixtures and layouts in
// the runtime's unit tests.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_RUNTIME_METABUILDERS_H
#define PPC_TESTS_UNIT_RUNTIME_METABUILDERS_H

#include "runtime/TensorMeta.h"

#include <utility>
#include <vector>

namespace ppc {

inline TensorMeta tensorMeta(c10::ScalarType dtype, std::vector<int64_t> sizes,
                             std::vector<int64_t> strides, bool grad = false) {
  TensorMeta t;
  t.dtype = dtype;
  t.sizes = std::move(sizes);
  t.strides = std::move(strides);
  t.requiresGrad = grad;
  return t;
}

} // namespace ppc

#endif // PPC_TESTS_UNIT_RUNTIME_METABUILDERS_H
