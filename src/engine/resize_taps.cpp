#include "engine/resize_taps.h"

#include <algorithm>
#include <cmath>

namespace sluice {

float resize_source_coord(const std::string& mode, int64_t o, float scale, int64_t in_len, int64_t out_len) {
  const float x = static_cast<float>(o);
  if (mode == "half_pixel") return (x + 0.5f) / scale - 0.5f;
  if (mode == "pytorch_half_pixel") return out_len > 1 ? (x + 0.5f) / scale - 0.5f : 0.f;
  if (mode == "align_corners")
    return out_len == 1 ? 0.f : x * static_cast<float>(in_len - 1) / static_cast<float>(out_len - 1);
  if (mode == "asymmetric") return x / scale;
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5f) / scale;
  return 0.f;  // the engines validate the mode first
}

ResizeTaps antialias_taps(const std::string& coord, float scale, int64_t in_len, int64_t out_len, bool cubic, float a,
                          bool exclude) {
  const float s = std::min(scale, 1.f);
  auto filter = [&](float d) {
    d = std::fabs(d);
    if (!cubic) return d < 1.f ? 1.f - d : 0.f;
    if (d <= 1.f) return ((a + 2.f) * d - (a + 3.f)) * d * d + 1.f;
    if (d < 2.f) return ((a * d - 5.f * a) * d + 8.f * a) * d - 4.f * a;
    return 0.f;
  };
  const int64_t start = static_cast<int64_t>(std::floor((cubic ? -2.f : -1.f) / s)) + 1;
  const int64_t n = 2 - 2 * start;
  ResizeTaps t;
  t.width = n;
  t.index.assign(static_cast<std::size_t>(out_len * n), 0);
  t.weight.assign(static_cast<std::size_t>(out_len * n), 0.f);
  for (int64_t o = 0; o < out_len; ++o) {
    const float x = resize_source_coord(coord, o, scale, in_len, out_len);
    const float base = std::ceil(x) - 1.f, r = x - base;   // r in (0, 1]
    float* wo = t.weight.data() + o * n;
    int64_t* io = t.index.data() + o * n;
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      wo[k] = filter((static_cast<float>(start + k) - r) * s);
      sum += wo[k];
    }
    for (int64_t k = 0; k < n; ++k) wo[k] = static_cast<float>(wo[k] / sum);
    double kept = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = static_cast<int64_t>(base) + start + k;
      if (exclude && (i < 0 || i >= in_len)) wo[k] = 0.f;
      kept += wo[k];
      io[k] = std::max<int64_t>(0, std::min(i, in_len - 1));
    }
    if (exclude && kept != 0)
      for (int64_t k = 0; k < n; ++k) wo[k] = static_cast<float>(wo[k] / kept);
  }
  return t;
}

}  // namespace sluice
