#pragma once
// The taps of Resize with antialias (opset 18) along one axis, shared by the CPU and CUDA engines:
// ONNX's definition, which ONNX Runtime follows.  When shrinking by scale s the filter (the
// triangle of linear mode, the Keys cubic of cubic mode) is stretched by 1 / s, so each output
// averages every input pixel under it.  Around the output's source coordinate x, written i + r
// with r in (0, 1], the taps are i + k for k in [start, 1 - start], start = 1 - ceil(h / s) for the
// filter's half-width h (1 or 2), weights normalized to sum 1; taps beyond the edges read the edge
// pixel, or with exclude_outside are dropped and the rest renormalized.  (PIL and torch's
// antialias drop the outside taps always, so near the borders they differ from ONNX.)
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// Output coordinate o -> input coordinate along one axis, for Resize's coordinate modes
// (half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn).
float resize_source_coord(const std::string& mode, int64_t o, float scale, int64_t in_len, int64_t out_len);

struct ResizeTaps {
  int64_t width = 0;             // taps per output
  std::vector<int64_t> index;    // [out_len * width]: input positions, clamped into the axis
  std::vector<float> weight;     // [out_len * width]
};

ResizeTaps antialias_taps(const std::string& coord, float scale, int64_t in_len, int64_t out_len, bool cubic,
                          float cubic_a, bool exclude_outside);

}  // namespace sluice
