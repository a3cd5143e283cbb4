//===- tests/unit/runtime/exec/MetaBuilders.h - Metadata written by hand --===//
//
// Builds the expected metadata of the hand-written fixtures and layouts in
// the runtime's unit tests.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_RUNTIME_EXEC_METABUILDERS_H
#define PPC_TESTS_UNIT_RUNTIME_EXEC_METABUILDERS_H

#include "runtime/exec/TensorMeta.h"

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

#endif // PPC_TESTS_UNIT_RUNTIME_EXEC_METABUILDERS_H
