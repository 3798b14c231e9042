#pragma once
// Sliding-window geometry shared by Conv, FusedConv and the pools: kernel_shape, strides,
// dilations, pads and auto_pad resolved against the static input and output shapes.  One, two and
// three spatial dimensions are handled as three, with leading dimensions of extent 1.
#include <cstdint>
#include <vector>

#include "engine/cpu/kernel.h"

namespace sluice::cpu {

struct Window {
  int rank = 0;                      // spatial dimensions of the op (1..3)
  int64_t in[3] = {1, 1, 1};         // input extent
  int64_t out[3] = {1, 1, 1};        // output extent (from the graph's shapes)
  int64_t k[3] = {1, 1, 1};          // kernel extent
  int64_t s[3] = {1, 1, 1};          // stride
  int64_t d[3] = {1, 1, 1};          // dilation
  int64_t p[3] = {0, 0, 0};          // padding at the start
  int64_t pe[3] = {0, 0, 0};         // padding at the end

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
  bool is_pointwise() const {
    for (int i = 0; i < 3; ++i)
      if (k[i] != 1 || s[i] != 1 || p[i] != 0) return false;
    return true;
  }
};

// x: [N, C, spatial...], y: [N, M, spatial...]; `kernel`: the window extent per spatial dimension.
// `ceil_mode` (pools) lets the output extent be the rounded-up one.  Fails on shapes that do not
// agree with the attributes.
Window resolve_window(const KernelInit& init, const Shape& x, const Shape& y, const std::vector<int64_t>& kernel,
                      bool ceil_mode);

}  // namespace sluice::cpu
