#pragma once
// A tensor seen as [outer, n, inner] around one of its axes: how the ops that work along an axis
// (Concat, Split, Gather, CumSum, Softmax, reductions) walk their tensors.
#include <cstdint>

#include "core/dtype.h"

namespace sluice {

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;   // elements before the axis, its extent, elements after it
};

// Shape s around `axis` (0 <= axis < s.size()).
inline AxisView axis_view(const Shape& s, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis) v.outer *= s[static_cast<std::size_t>(d)];
    else if (d == axis) v.n = s[static_cast<std::size_t>(d)];
    else v.inner *= s[static_cast<std::size_t>(d)];
  }
  return v;
}

}  // namespace sluice
