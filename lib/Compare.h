//===- lib/Compare.h - Compare model outputs --------------------*- C++ -*-===//
#ifndef PPC_LIB_COMPARE_H
#define PPC_LIB_COMPARE_H

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace ppc {

/// How one output of a split model compares with the unsplit model's.
struct OutputComparison {
  bool match = false;
  /// Largest |expected - actual| over the elements that are not equal
  /// (0 when all are; NaN when a NaN meets a number); negative when shapes,
  /// dtypes or kinds differ.
  double maxAbsDiff = 0;
  /// One readable line: "max abs diff 3.1e-07 (rtol 1e-05, atol 1e-05)" or
  /// "shape [5, 10] != [5, 9]".
  std::string detail;
};

/// Compares element by element through tuples and lists, tensors with
/// at::isclose semantics: |actual - expected| <= atol + rtol * |expected|,
/// equal values (including equal infinities) always match, and NaN matches
/// NaN in the same place (equal_nan; not for complex tensors). Shapes and
/// dtypes must be equal. `rtol` and `atol` must be >= 0. May throw
/// c10::Error (callers guard with torchCall).
OutputComparison compareValues(const c10::IValue &expected,
                               const c10::IValue &actual, double rtol,
                               double atol);

} // namespace ppc

#endif // PPC_LIB_COMPARE_H
