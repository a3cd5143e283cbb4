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
  /// Largest |expected - actual| over all elements (0 for equal non-float
  /// values); negative when shapes, dtypes or kinds differ.
  double maxAbsDiff = 0;
  /// One readable line: "max abs diff 3.1e-07 (rtol 1e-05, atol 1e-05)" or
  /// "shape [5, 10] != [5, 9]".
  std::string detail;
};

/// Compares with torch.allclose semantics (|a - e| <= atol + rtol * |e|),
/// element by element through tuples and lists.
OutputComparison compareValues(const c10::IValue &expected,
                               const c10::IValue &actual, double rtol,
                               double atol);

} // namespace ppc

#endif // PPC_LIB_COMPARE_H
