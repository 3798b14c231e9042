// Resize (opset 10..18) and the older Upsample: nearest on any axes and any dtype, linear
// (bilinear) and cubic (bicubic, separable: rows, then columns) on the last two axes of a float
// tensor, with antialias (opset 18) too (engine/resize_taps.h).  Coordinates are computed in
// float32 the way the ONNX reference and ONNX Runtime do, so nearest picks the same source pixels.
#include <cmath>

#include "engine/cpu/index_map.h"
#include "engine/resize_taps.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

// Output coordinate -> input coordinate along one axis (engine/resize_taps.h).
float source_coord(const std::string& mode, int64_t o, float scale, int64_t in_len, int64_t out_len) {
  return resize_source_coord(mode, o, scale, in_len, out_len);
}

int64_t nearest_index(const std::string& mode, float x, float scale) {
  if (mode == "round_prefer_floor") {
    if (x == static_cast<float>(static_cast<int64_t>(x)) + 0.5f) return static_cast<int64_t>(std::floor(x));
    return static_cast<int64_t>(std::round(x));
  }
  if (mode == "round_prefer_ceil") return static_cast<int64_t>(std::round(x));
  if (mode == "floor") return static_cast<int64_t>(std::floor(x));
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(x));
  // "simple" (Resize-10, Upsample): ceil when downsampling, truncate otherwise.
  return scale < 1.f ? static_cast<int64_t>(std::ceil(x)) : static_cast<int64_t>(x);
}

class ResizeKernel final : public Kernel {
 public:
  explicit ResizeKernel(const KernelInit& init) {
    const ValueInfo& xi = init.input(0);
    const ValueInfo& yi = init.output(0);
    in_ = xi.shape;
    out_ = yi.shape;
    const std::size_t r = in_.size();
    if (out_.size() != r || yi.dtype != xi.dtype) init.fail("output ", shape_str(out_), " does not match input ", shape_str(in_));
    if (r == 0 || r > kMaxRank) init.fail("rank ", r, " is not supported");
    const bool legacy = init.node.op == "Upsample" || init.opset < 11;
    const std::string mode = init.node.get_string("mode", "nearest");
    const std::string coord = legacy ? "asymmetric" : init.node.get_string("coordinate_transformation_mode", "half_pixel");
    const std::string nearest = legacy ? "simple" : init.node.get_string("nearest_mode", "round_prefer_floor");
    if (mode != "nearest" && mode != "linear" && mode != "bilinear" && mode != "cubic")
      init.fail("mode '", mode, "' is not implemented (nearest, linear, cubic)");
    if (coord != "half_pixel" && coord != "pytorch_half_pixel" && coord != "align_corners" && coord != "asymmetric" &&
        coord != "tf_half_pixel_for_nn")
      init.fail("coordinate_transformation_mode '", coord, "' is not implemented");
    if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" && nearest != "ceil" &&
        nearest != "simple")
      init.fail("nearest_mode '", nearest, "' is unknown");
    const bool antialias = init.node.get_int("antialias", 0) != 0;
    if (antialias && mode == "nearest") init.fail("antialias=1 applies to linear and cubic modes, not nearest");

    const std::vector<float> scales = resolve_scales(init, legacy);
    linear_ = mode != "nearest";
    cubic_ = mode == "cubic";
    if (linear_) {
      init.require_float(0);
      if (r < 2) init.fail("linear mode needs rank 2 or more");
      for (std::size_t d = 0; d + 2 < r; ++d)
        if (in_[d] != out_[d]) init.fail("linear mode resizes the last two axes only, axis ", d, " changes");
      planes_ = shape_numel(in_) / (in_[r - 2] * in_[r - 1] > 0 ? in_[r - 2] * in_[r - 1] : 1);
      ih_ = in_[r - 2];
      iw_ = in_[r - 1];
      oh_ = out_[r - 2];
      ow_ = out_[r - 1];
      if (antialias) {
        antialias_ = true;
        const float a = init.node.get_float("cubic_coeff_a", -0.75f);
        const bool exclude = init.node.get_int("exclude_outside", 0) != 0;
        ay_ = antialias_taps(coord, scales[r - 2], ih_, oh_, cubic_, a, exclude);
        ax_ = antialias_taps(coord, scales[r - 1], iw_, ow_, cubic_, a, exclude);
      } else if (cubic_) {
        const float a = init.node.get_float("cubic_coeff_a", -0.75f);
        const bool exclude = init.node.get_int("exclude_outside", 0) != 0;
        cubic_taps(coord, scales[r - 2], ih_, oh_, a, exclude, &ty_, &twy_);
        cubic_taps(coord, scales[r - 1], iw_, ow_, a, exclude, &tx_, &twx_);
      } else {
        axis_weights(coord, scales[r - 2], ih_, oh_, &y0_, &y1_, &wy0_, &wy1_);
        axis_weights(coord, scales[r - 1], iw_, ow_, &x0_, &x1_, &wx0_, &wx1_);
      }
    } else {
      map_.out = out_;
      map_.elem = dtype_size(xi.dtype);
      const auto st = strides_of(in_);
      map_.offsets.resize(r);
      for (std::size_t d = 0; d < r; ++d) {
        auto& m = map_.offsets[d];
        m.resize(static_cast<std::size_t>(out_[d]));
        for (int64_t o = 0; o < out_[d]; ++o) {
          // A scale of 1 maps every index to itself, whatever the coordinate mode (as ONNX Runtime).
          int64_t i = scales[d] == 1.f
                          ? o
                          : nearest_index(nearest, source_coord(coord, o, scales[d], in_[d], out_[d]), scales[d]);
          i = std::max<int64_t>(0, std::min(i, in_[d] - 1));
          m[o] = i * st[d];
        }
      }
    }
  }

  void run(const KernelArgs& a) override {
    if (!linear_) {
      gather_by_map(map_, a.in[0], a.out[0], a.pool);
      return;
    }
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    if (antialias_) {
      a.pool.parallel_for(planes_, [&](int64_t p, int) {
        const float* xp = x + p * ih_ * iw_;
        float* yp = y + p * oh_ * ow_;
        std::vector<float> rows(static_cast<std::size_t>(ih_ * ow_));  // each input row resized to ow
        for (int64_t iy = 0; iy < ih_; ++iy)
          for (int64_t ox = 0; ox < ow_; ++ox) rows[iy * ow_ + ox] = apply(ax_, ox, xp + iy * iw_, 1);
        for (int64_t oy = 0; oy < oh_; ++oy)
          for (int64_t ox = 0; ox < ow_; ++ox) yp[oy * ow_ + ox] = apply(ay_, oy, rows.data() + ox, ow_);
      });
      return;
    }
    if (cubic_) {
      a.pool.parallel_for(planes_, [&](int64_t p, int) {
        const float* xp = x + p * ih_ * iw_;
        float* yp = y + p * oh_ * ow_;
        std::vector<float> rows(static_cast<std::size_t>(ih_ * ow_));  // each input row resized to ow
        for (int64_t iy = 0; iy < ih_; ++iy)
          for (int64_t ox = 0; ox < ow_; ++ox) {
            float v = 0.f;
            for (int t = 0; t < 4; ++t) v += twx_[ox * 4 + t] * xp[iy * iw_ + tx_[ox * 4 + t]];
            rows[iy * ow_ + ox] = v;
          }
        for (int64_t oy = 0; oy < oh_; ++oy)
          for (int64_t ox = 0; ox < ow_; ++ox) {
            float v = 0.f;
            for (int t = 0; t < 4; ++t) v += twy_[oy * 4 + t] * rows[ty_[oy * 4 + t] * ow_ + ox];
            yp[oy * ow_ + ox] = v;
          }
      });
      return;
    }
    a.pool.parallel_for(planes_, [&](int64_t p, int) {
      const float* xp = x + p * ih_ * iw_;
      float* yp = y + p * oh_ * ow_;
      for (int64_t oy = 0; oy < oh_; ++oy) {
        const float* r0 = xp + y0_[oy] * iw_;
        const float* r1 = xp + y1_[oy] * iw_;
        const float a0 = wy0_[oy], a1 = wy1_[oy];
        float* yr = yp + oy * ow_;
        for (int64_t ox = 0; ox < ow_; ++ox) {
          const int64_t c0 = x0_[ox], c1 = x1_[ox];
          const float b0 = wx0_[ox], b1 = wx1_[ox];
          yr[ox] = a0 * b0 * r0[c0] + a0 * b1 * r0[c1] + a1 * b0 * r1[c0] + a1 * b1 * r1[c1];
        }
      }
    });
  }

 private:
  // One scale per axis: the scales input, or sizes/input when sizes are given (ONNX semantics,
  // including the opset-18 axes and keep_aspect_ratio_policy).
  std::vector<float> resolve_scales(const KernelInit& init, bool legacy) const {
    const std::size_t r = in_.size();
    std::vector<int64_t> axes(r);
    for (std::size_t d = 0; d < r; ++d) axes[d] = static_cast<int64_t>(d);
    if (init.node.has("axes")) {
      axes = init.node.get_ints("axes");
      for (auto& a : axes) a = init.axis(a, static_cast<int64_t>(r));
    }
    std::vector<float> scales(r, 1.f);
    std::vector<float> given;
    std::vector<int64_t> sizes;
    if (init.node.op == "Upsample" && init.opset < 9) {
      given = init.node.get_floats("scales");
    } else {
      const std::size_t si = legacy ? 1 : 2;
      if (init.has_input(si) && shape_numel(init.input(si).shape) > 0) given = init.const_input(si, "scales").as_float();
      if (!legacy && init.has_input(3) && shape_numel(init.input(3).shape) > 0) sizes = init.const_ints(3, "sizes");
    }
    if (!given.empty()) {
      if (given.size() != axes.size()) init.fail("scales has ", given.size(), " values for ", axes.size(), " axes");
      for (std::size_t i = 0; i < axes.size(); ++i) {
        if (!(given[i] > 0.f)) init.fail("scales must be positive");
        scales[axes[i]] = given[i];
      }
      return scales;
    }
    if (!sizes.empty()) {
      if (sizes.size() != axes.size()) init.fail("sizes has ", sizes.size(), " values for ", axes.size(), " axes");
      const std::string policy = init.node.get_string("keep_aspect_ratio_policy", "stretch");
      float keep = policy == "not_larger" ? 1e30f : 0.f;
      for (std::size_t i = 0; i < axes.size(); ++i) {
        const float s = static_cast<float>(sizes[i]) / static_cast<float>(in_[axes[i]]);
        scales[axes[i]] = s;
        keep = policy == "not_larger" ? std::min(keep, s) : std::max(keep, s);
      }
      if (policy != "stretch") {
        if (policy != "not_larger" && policy != "not_smaller") init.fail("keep_aspect_ratio_policy '", policy, "' is unknown");
        for (auto a : axes) scales[a] = keep;
      }
      return scales;
    }
    // Neither: the output shape alone defines the scales.
    for (std::size_t d = 0; d < r; ++d) scales[d] = static_cast<float>(out_[d]) / static_cast<float>(in_[d]);
    return scales;
  }

  static void axis_weights(const std::string& coord, float scale, int64_t in_len, int64_t out_len,
                           std::vector<int64_t>* i0, std::vector<int64_t>* i1, std::vector<float>* w0,
                           std::vector<float>* w1) {
    i0->resize(out_len);
    i1->resize(out_len);
    w0->resize(out_len);
    w1->resize(out_len);
    for (int64_t o = 0; o < out_len; ++o) {
      float x = scale == 1.f ? static_cast<float>(o) : source_coord(coord, o, scale, in_len, out_len);
      x = std::max(0.f, std::min(x, static_cast<float>(in_len - 1)));
      const int64_t a = std::min(static_cast<int64_t>(x), in_len - 1);
      const int64_t b = std::min(a + 1, in_len - 1);
      const float frac = x - static_cast<float>(a);
      (*i0)[o] = a;
      (*i1)[o] = b;
      (*w0)[o] = 1.f - frac;
      (*w1)[o] = frac;
    }
  }

  // Four taps per output index: the Keys kernel with coefficient a at the input coordinate's
  // neighbours floor(x)-1 .. floor(x)+2, clamped to the edge, or (exclude_outside) dropped and
  // the rest renormalized, as ONNX Runtime does.
  static void cubic_taps(const std::string& coord, float scale, int64_t in_len, int64_t out_len, float a, bool exclude,
                         std::vector<int64_t>* idx, std::vector<float>* w) {
    idx->resize(static_cast<std::size_t>(out_len * 4));
    w->resize(static_cast<std::size_t>(out_len * 4));
    for (int64_t o = 0; o < out_len; ++o) {
      const float x = scale == 1.f ? static_cast<float>(o) : source_coord(coord, o, scale, in_len, out_len);
      const float base = std::floor(x), r = x - base;
      const float c[4] = {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                          ((a + 2) * r - (a + 3)) * r * r + 1,
                          ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
                          ((a * (2 - r) - 5 * a) * (2 - r) + 8 * a) * (2 - r) - 4 * a};
      float sum = 0.f;
      for (int t = 0; t < 4; ++t) {
        const int64_t i = static_cast<int64_t>(base) - 1 + t;
        const bool inside = i >= 0 && i < in_len;
        (*idx)[o * 4 + t] = std::max<int64_t>(0, std::min(i, in_len - 1));
        (*w)[o * 4 + t] = exclude && !inside ? 0.f : c[t];
        sum += (*w)[o * 4 + t];
      }
      if (exclude && sum != 0.f)
        for (int t = 0; t < 4; ++t) (*w)[o * 4 + t] /= sum;
    }
  }

  // Output o along an antialiased axis: its taps of x (elements `stride` apart) weighted.
  static float apply(const ResizeTaps& t, int64_t o, const float* x, int64_t stride) {
    const float* wo = t.weight.data() + o * t.width;
    const int64_t* io = t.index.data() + o * t.width;
    float v = 0.f;
    for (int64_t k = 0; k < t.width; ++k) v += wo[k] * x[io[k] * stride];
    return v;
  }

  Shape in_, out_;
  bool linear_ = false, cubic_ = false, antialias_ = false;
  ResizeTaps ay_, ax_;   // antialias (engine/resize_taps.h)
  std::vector<int64_t> ty_, tx_;
  std::vector<float> twy_, twx_;
  IndexMap map_;
  int64_t planes_ = 0, ih_ = 0, iw_ = 0, oh_ = 0, ow_ = 0;
  std::vector<int64_t> y0_, y1_, x0_, x1_;
  std::vector<float> wy0_, wy1_, wx0_, wx1_;
};

}  // namespace

void add_resize_kernels(KernelTable& t) {
  t["Resize"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ResizeKernel>(i); };
  t["Upsample"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ResizeKernel>(i); };
}

}  // namespace sluice::cpu
