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
  at::Tensor ed = e.to(at::kDouble), ad = a.to(at::kDouble);
  at::Tensor diff = (ed - ad).abs();
  // NaNs in the same places count as equal (as allclose with equal_nan).
  at::Tensor bothNan = ed.isnan().logical_and(ad.isnan());
  diff = diff.masked_fill(bothNan, 0);
  out.maxAbsDiff = diff.max().item<double>();
  bool close =
      diff.le(atol + rtol * ed.abs()).logical_or(bothNan).all().item<bool>();
  out.match = close && !std::isnan(out.maxAbsDiff);
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
