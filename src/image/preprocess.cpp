// The CPU resize (where the image lands: core/image_geometry.cpp): a separable triangle filter, widened by the downscale factor so that shrinking averages every
// input pixel (antialiasing), as torch's interpolate(mode="bilinear", antialias=True) computes it
// for torchvision's Resize.  Float32 throughout, the horizontal pass first, one rounding at the
// end; only the part of the resized image that survives the crop is computed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "image/image.h"

namespace sluice {

namespace {

// The filters at distance x (in input pixels over the filter's scale): the triangle, and Keys'
// cubic with a = -0.5 (PIL's and torch's antialiased bicubic), each zero from `filter_support` on.
double filter_weight(Interpolation f, double x) {
  x = std::fabs(x);
  if (f == Interpolation::Bicubic) {
    constexpr double a = -0.5;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
  }
  return x < 1.0 ? 1.0 - x : 0.0;
}
double filter_support(Interpolation f) { return f == Interpolation::Bicubic ? 2.0 : 1.0; }

// Nearest: one tap, the input pixel under the output pixel's centre.  PIL finds it with a running
// double sum (the centre of output pixel o is 0.5 * scale + o * scale, added up pixel by pixel,
// then truncated), and where a centre falls on a pixel boundary its rounding decides the side;
// the same sum here gives PIL's pixels exactly.
void nearest_taps(int in, int out, int begin, int n, AxisTaps& t) {
  t.max_taps = 1;
  t.first.resize(static_cast<std::size_t>(n));
  t.count.assign(static_cast<std::size_t>(n), in > 0 ? 1 : 0);
  t.weight.assign(static_cast<std::size_t>(n), 1.f);
  const double scale = static_cast<double>(in) / out;
  double centre = scale * 0.5;
  for (int o = 0; o < begin + n; ++o, centre += scale)
    if (o >= begin)
      t.first[static_cast<std::size_t>(o - begin)] = std::clamp(static_cast<int>(centre), 0, std::max(in - 1, 0));
}

// Taps of output coordinates [begin, end) only (the ones a crop keeps), in `t` (reused).
void taps_range(int in, int out, int begin, int end, AxisTaps& t, Interpolation filter) {
  const int n = std::max(0, end - begin);
  if (filter == Interpolation::Nearest) return nearest_taps(in, out, begin, n, t);
  const double scale = static_cast<double>(in) / out;
  // Downscaling widens the filter to cover `scale` times its support each side; upscaling keeps
  // it (plain bilinear or bicubic with half-pixel centres).
  const double filter_scale = scale >= 1.0 ? scale : 1.0;
  const double support = filter_support(filter) * filter_scale;
  const double inv = 1.0 / filter_scale;
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<std::size_t>(n));
  t.count.resize(static_cast<std::size_t>(n));
  t.weight.assign(static_cast<std::size_t>(n) * static_cast<std::size_t>(t.max_taps), 0.f);
  double w[64];  // max_taps is at most 2 * ceil(in / out) + 1; larger ratios are handled below
  std::vector<double> big;
  for (int i = 0; i < n; ++i) {
    const double center = scale * (i + begin + 0.5);
    // Truncation, not floor, as torch and PIL compute the window; the clamp makes them agree.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in);
    const int count = std::max(hi - lo, 0);
    double* ws = w;
    if (count > 64) {
      big.resize(static_cast<std::size_t>(count));
      ws = big.data();
    }
    double total = 0;
    for (int k = 0; k < count; ++k) {
      ws[k] = filter_weight(filter, (lo + k - center + 0.5) * inv);
      total += ws[k];
    }
    float* dst = &t.weight[static_cast<std::size_t>(i) * static_cast<std::size_t>(t.max_taps)];
    for (int k = 0; k < count && k < t.max_taps; ++k) dst[k] = static_cast<float>(total != 0 ? ws[k] / total : ws[k]);
    t.first[static_cast<std::size_t>(i)] = lo;
    t.count[static_cast<std::size_t>(i)] = std::min(count, t.max_taps);
  }
}

inline uint8_t round_u8(float v) {
  // Round half up and clamp (a bicubic's negative lobes can take v below 0 or above 255); for
  // v > -0.5 truncation of v + 0.5 is floor.
  const float r = v + 0.5f;
  return r >= 255.f ? 255 : static_cast<uint8_t>(r > 0.f ? static_cast<int>(r) : 0);
}

}  // namespace

AxisTaps axis_taps(int in, int out, Interpolation filter) {
  AxisTaps t;
  taps_range(in, out, 0, out, t, filter);
  return t;
}

void preprocess_rgb(const uint8_t* rgb, const ResizePlan& plan, uint8_t* out_chw) {
  ResizeScratch scratch;
  preprocess_rgb(rgb, plan, out_chw, scratch);
}

void preprocess_rgb(const uint8_t* rgb, const ResizePlan& p, uint8_t* out, ResizeScratch& sc) {
  const std::size_t plane = static_cast<std::size_t>(p.out_h) * static_cast<std::size_t>(p.out_w);
  // The output rows and columns that show the resized image; the rest is padding.
  const int y0 = std::max(0, -p.offset_y), y1 = std::min(p.out_h, p.resized_h - p.offset_y);
  const int x0 = std::max(0, -p.offset_x), x1 = std::min(p.out_w, p.resized_w - p.offset_x);
  if (y0 > 0 || x0 > 0 || y1 < p.out_h || x1 < p.out_w)
    for (int c = 0; c < 3; ++c) std::memset(out + static_cast<std::size_t>(c) * plane, p.pad[static_cast<std::size_t>(c)], plane);
  if (y0 >= y1 || x0 >= x1) return;
  const int ncols = x1 - x0, nrows = y1 - y0;
  taps_range(p.in_w, p.resized_w, x0 + p.offset_x, x1 + p.offset_x, sc.cols, p.interpolation);
  taps_range(p.in_h, p.resized_h, y0 + p.offset_y, y1 + p.offset_y, sc.rows, p.interpolation);
  const bool round_rows = rounds_each_pass(p.interpolation);
  int iy_lo = p.in_h, iy_hi = 0;
  for (int r = 0; r < nrows; ++r) {
    iy_lo = std::min(iy_lo, sc.rows.first[static_cast<std::size_t>(r)]);
    iy_hi = std::max(iy_hi, sc.rows.first[static_cast<std::size_t>(r)] + sc.rows.count[static_cast<std::size_t>(r)]);
  }
  const std::size_t stride = static_cast<std::size_t>(ncols) * 3;  // floats per row of the horizontal pass
  sc.horizontal.resize(static_cast<std::size_t>(std::max(iy_hi - iy_lo, 1)) * stride + stride);

  // Horizontal pass: the input rows the vertical taps read, at the kept output columns.
  const std::size_t ct = static_cast<std::size_t>(sc.cols.max_taps);
  for (int iy = iy_lo; iy < iy_hi; ++iy) {
    const uint8_t* src = rgb + static_cast<std::size_t>(iy) * static_cast<std::size_t>(p.in_w) * 3;
    float* dst = sc.horizontal.data() + static_cast<std::size_t>(iy - iy_lo) * stride;
    for (int x = 0; x < ncols; ++x) {
      const float* w = &sc.cols.weight[static_cast<std::size_t>(x) * ct];
      const uint8_t* s = src + static_cast<std::size_t>(sc.cols.first[static_cast<std::size_t>(x)]) * 3;
      const int n = sc.cols.count[static_cast<std::size_t>(x)];
      float r = w[0] * s[0], g = w[0] * s[1], b = w[0] * s[2];
      for (int k = 1; k < n; ++k) {
        r += w[k] * s[3 * k];
        g += w[k] * s[3 * k + 1];
        b += w[k] * s[3 * k + 2];
      }
      if (round_rows) {
        r = round_u8(r);
        g = round_u8(g);
        b = round_u8(b);
      }
      dst[3 * x] = r;
      dst[3 * x + 1] = g;
      dst[3 * x + 2] = b;
    }
  }

  // Vertical pass into the planar output, one accumulated row at a time (the last row of
  // `horizontal` is the accumulator).
  float* acc = sc.horizontal.data() + static_cast<std::size_t>(std::max(iy_hi - iy_lo, 1)) * stride;
  const std::size_t rt = static_cast<std::size_t>(sc.rows.max_taps);
  for (int r = 0; r < nrows; ++r) {
    const float* w = &sc.rows.weight[static_cast<std::size_t>(r) * rt];
    const int first = sc.rows.first[static_cast<std::size_t>(r)] - iy_lo;
    const int n = sc.rows.count[static_cast<std::size_t>(r)];
    const float* row0 = sc.horizontal.data() + static_cast<std::size_t>(first) * stride;
    for (std::size_t i = 0; i < stride; ++i) acc[i] = w[0] * row0[i];
    for (int k = 1; k < n; ++k) {
      const float wk = w[k];
      const float* row = row0 + static_cast<std::size_t>(k) * stride;
      for (std::size_t i = 0; i < stride; ++i) acc[i] += wk * row[i];
    }
    const std::size_t y = static_cast<std::size_t>(y0 + r);
    for (int c = 0; c < 3; ++c) {
      uint8_t* o = out + static_cast<std::size_t>(c) * plane + y * static_cast<std::size_t>(p.out_w) + static_cast<std::size_t>(x0);
      for (int x = 0; x < ncols; ++x) o[x] = round_u8(acc[3 * x + c]);
    }
  }
}

}  // namespace sluice
