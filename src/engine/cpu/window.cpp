#include "engine/cpu/window.h"

namespace sluice::cpu {

Window resolve_window(const KernelInit& init, const Shape& x, const Shape& y, const std::vector<int64_t>& kernel,
                      bool ceil_mode) {
  const int64_t rank = static_cast<int64_t>(x.size()) - 2;
  if (rank < 1 || rank > 3) init.fail("expects 1 to 3 spatial dimensions, got input ", shape_str(x));
  if (static_cast<int64_t>(y.size()) != rank + 2) init.fail("output ", shape_str(y), " does not match input ", shape_str(x));
  if (static_cast<int64_t>(kernel.size()) != rank) init.fail("kernel has ", kernel.size(), " dimensions, input has ", rank);
  const auto strides = init.node.get_ints("strides", std::vector<int64_t>(rank, 1));
  const auto dilations = init.node.get_ints("dilations", std::vector<int64_t>(rank, 1));
  const auto pads = init.node.get_ints("pads", std::vector<int64_t>(2 * rank, 0));
  const std::string auto_pad = init.node.get_string("auto_pad", "NOTSET");
  if (static_cast<int64_t>(strides.size()) != rank || static_cast<int64_t>(dilations.size()) != rank ||
      static_cast<int64_t>(pads.size()) != 2 * rank)
    init.fail("strides, dilations or pads do not match ", rank, " spatial dimensions");

  Window w;
  w.rank = static_cast<int>(rank);
  const int off = 3 - w.rank;
  for (int64_t i = 0; i < rank; ++i) {
    const int j = off + static_cast<int>(i);
    w.in[j] = x[2 + i];
    w.out[j] = y[2 + i];
    w.k[j] = kernel[i];
    w.s[j] = strides[i];
    w.d[j] = dilations[i];
    if (w.k[j] < 1 || w.s[j] < 1 || w.d[j] < 1) init.fail("kernel, strides and dilations must be positive");
    const int64_t span = (w.k[j] - 1) * w.d[j] + 1;
    int64_t lo = 0, hi = 0;  // accepted output extents
    if (auto_pad == "NOTSET") {
      w.p[j] = pads[i];
      w.pe[j] = pads[i + rank];
      if (w.p[j] < 0 || w.pe[j] < 0) init.fail("negative pads are not supported");
      const int64_t room = w.in[j] + w.p[j] + w.pe[j] - span;
      lo = room < 0 ? 0 : room / w.s[j] + 1;
      hi = ceil_mode && room >= 0 ? (room + w.s[j] - 1) / w.s[j] + 1 : lo;
    } else if (auto_pad == "VALID") {
      const int64_t room = w.in[j] - span;
      lo = room < 0 ? 0 : room / w.s[j] + 1;
      hi = ceil_mode && room >= 0 ? (room + w.s[j] - 1) / w.s[j] + 1 : lo;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      lo = hi = (w.in[j] + w.s[j] - 1) / w.s[j];
      const int64_t total = std::max<int64_t>(0, (lo - 1) * w.s[j] + span - w.in[j]);
      w.p[j] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pe[j] = total - w.p[j];
    } else {
      init.fail("unknown auto_pad '", auto_pad, "'");
    }
    if (w.out[j] < lo || w.out[j] > hi)
      init.fail("output extent ", w.out[j], " along spatial axis ", i, " does not follow from input ", shape_str(x),
                " and the attributes (expected ", lo, hi != lo ? str("..", hi) : std::string(), ")");
  }
  return w;
}

}  // namespace sluice::cpu
