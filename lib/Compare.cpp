//===- lib/Compare.cpp - Compare model outputs ----------------------------===//
#include "lib/Compare.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>

#include <optional>
#include <sstream>

namespace ppc {

static std::string shapeString(const at::Tensor &t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

static std::string describeDiff(double maxAbsDiff, double rtol, double atol) {
  return llvm::formatv("max abs diff {0} (rtol {1}, atol {2})",
                       llvm::format("%.3g", maxAbsDiff),
                       llvm::format("%g", rtol), llvm::format("%g", atol));
}

static OutputComparison compareTensors(const at::Tensor &e, const at::Tensor &a,
                                       double rtol, double atol) {
  OutputComparison out;
  if (!e.sizes().equals(a.sizes())) {
    out.maxAbsDiff = -1;
    out.detail = "shape " + shapeString(a) + " != expected " + shapeString(e);
    return out;
  }
  if (e.scalar_type() != a.scalar_type()) {
    out.maxAbsDiff = -1;
    out.detail = std::string("dtype ") + c10::toString(a.scalar_type()) +
                 " != expected " + c10::toString(e.scalar_type());
    return out;
  }
  if (e.numel() == 0) {
    out.match = true;
    out.detail = "empty";
    return out;
  }
  // Equal NaNs are close: the split reproduces the model where both give
  // NaN. Complex tensors have no NaN ordering for at::isclose to use.
  bool equalNan = !e.is_complex();
  out.match = at::isclose(a, e, rtol, atol, equalNan).all().item<bool>();
  // The reported difference skips elements that are equal (inf == inf,
  // where inf - inf would be NaN) and NaNs in the same places.
  at::Tensor same = e.eq(a);
  if (equalNan && e.is_floating_point())
    same = same.logical_or(e.isnan().logical_and(a.isnan()));
  at::Tensor diff;
  if (e.scalar_type() == at::kBool)
    diff = e.ne(a).to(at::kDouble);
  else if (e.is_complex())
    diff = (e - a).abs().to(at::kDouble);
  else // in double, so unsigned integers do not wrap around
    diff = (e.to(at::kDouble) - a.to(at::kDouble)).abs();
  out.maxAbsDiff = diff.masked_fill(same, 0).max().item<double>();
  out.detail = describeDiff(out.maxAbsDiff, rtol, atol);
  return out;
}

OutputComparison compareValues(const c10::IValue &expected,
                               const c10::IValue &actual, double rtol,
                               double atol) {
  if (expected.isTensor() && actual.isTensor())
    return compareTensors(expected.toTensor(), actual.toTensor(), rtol, atol);
  auto elements =
      [](const c10::IValue &v) -> std::optional<std::vector<c10::IValue>> {
    if (v.isTuple())
      return v.toTupleRef().elements().vec();
    if (v.isList())
      return v.toList().vec();
    return std::nullopt;
  };
  auto ee = elements(expected), ae = elements(actual);
  if (ee && ae) {
    if (ee->size() != ae->size())
      return {false, -1,
              llvm::formatv("{0} elements != expected {1}", ae->size(),
                            ee->size())};
    OutputComparison out{true, 0, ""};
    for (size_t i = 0; i < ee->size(); ++i) {
      OutputComparison c = compareValues((*ee)[i], (*ae)[i], rtol, atol);
      if (!c.match && out.match)
        out.detail = llvm::formatv("element {0}: {1}", i, c.detail);
      out.match &= c.match;
      out.maxAbsDiff = (c.maxAbsDiff < 0 || out.maxAbsDiff < 0)
                           ? -1
                           : std::max(out.maxAbsDiff, c.maxAbsDiff);
    }
    if (out.match)
      out.detail = describeDiff(out.maxAbsDiff, rtol, atol);
    return out;
  }
  if (expected == actual)
    return {true, 0, "equal"};
  std::ostringstream os;
  os << actual << " != expected " << expected;
  return {false, -1, os.str()};
}

} // namespace ppc
