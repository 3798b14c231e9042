// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool: one task per (sample, channel) plane.
#include <algorithm>
#include <limits>

#include "engine/cpu/kernel.h"
#include "engine/cpu/window.h"

namespace sluice::cpu {
namespace {

// Taps t in [0, k) of a window starting at `start` whose position start + t*d lies in [lo, hi).
inline void tap_range(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t* t0, int64_t* t1) {
  int64_t a = start >= lo ? 0 : (lo - start + d - 1) / d;
  int64_t b = start >= hi ? 0 : (hi - start + d - 1) / d;
  a = std::min(a, k);
  b = std::max(a, std::min(b, k));
  *t0 = a;
  *t1 = b;
}

class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelInit& init, bool is_max) : max_(is_max) {
    init.require_float(0);
    const Shape& xs = init.input(0).shape;
    const Shape& ys = init.output(0).shape;
    const auto kernel = init.node.get_ints("kernel_shape");
    if (kernel.empty()) init.fail("kernel_shape is required");
    if (ys.size() != xs.size() || ys[0] != xs[0] || ys[1] != xs[1]) init.fail("output ", shape_str(ys), " does not match input ", shape_str(xs));
    win_ = resolve_window(init, xs, ys, kernel, init.node.get_int("ceil_mode", 0) != 0);
    planes_ = xs[0] * xs[1];
    include_pad_ = init.node.get_int("count_include_pad", 0) != 0;
    // The optional Indices output of MaxPool: flat row-major positions in the input.
    want_indices_ = is_max && init.out.size() > 1 && init.out[1] != nullptr;
    if (want_indices_) {
      if (init.node.get_int("storage_order", 0) != 0) init.fail("Indices with storage_order=1 are not implemented");
      init.require_dtype(init.output(1), DType::I64);
    }
  }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    int64_t* idx = want_indices_ ? static_cast<int64_t*>(a.out[1]) : nullptr;
    a.pool.parallel_for(planes_, [&](int64_t p, int) {
      plane(x + p * win_.in_size(), y + p * win_.out_size(), idx ? idx + p * win_.out_size() : nullptr, p * win_.in_size());
    });
  }

 private:
  void plane(const float* x, float* y, int64_t* idx, int64_t x_offset) const {
    const Window& w = win_;
    for (int64_t od = 0; od < w.out[0]; ++od) {
      const int64_t sd = od * w.s[0] - w.p[0];
      int64_t d0, d1;
      tap_range(sd, w.k[0], w.d[0], 0, w.in[0], &d0, &d1);
      for (int64_t oh = 0; oh < w.out[1]; ++oh) {
        const int64_t sh = oh * w.s[1] - w.p[1];
        int64_t h0, h1;
        tap_range(sh, w.k[1], w.d[1], 0, w.in[1], &h0, &h1);
        for (int64_t ow = 0; ow < w.out[2]; ++ow, ++y) {
          const int64_t sw = ow * w.s[2] - w.p[2];
          int64_t w0, w1;
          tap_range(sw, w.k[2], w.d[2], 0, w.in[2], &w0, &w1);
          if (max_) {
            float best = -std::numeric_limits<float>::infinity();
            int64_t at = -1;
            for (int64_t td = d0; td < d1; ++td)
              for (int64_t th = h0; th < h1; ++th) {
                const int64_t row = ((sd + td * w.d[0]) * w.in[1] + sh + th * w.d[1]) * w.in[2];
                for (int64_t tw = w0; tw < w1; ++tw) {
                  const int64_t pos = row + sw + tw * w.d[2];
                  if (x[pos] > best || at < 0) {
                    best = x[pos];
                    at = pos;
                  }
                }
              }
            *y = best;
            if (idx) *idx++ = at < 0 ? 0 : x_offset + at;
          } else {
            float sum = 0.f;
            for (int64_t td = d0; td < d1; ++td)
              for (int64_t th = h0; th < h1; ++th) {
                const int64_t row = ((sd + td * w.d[0]) * w.in[1] + sh + th * w.d[1]) * w.in[2];
                for (int64_t tw = w0; tw < w1; ++tw) sum += x[row + sw + tw * w.d[2]];
              }
            // count_include_pad counts the taps on the explicit padding but not those that ceil_mode
            // pushed past the end padding.
            const int64_t count = include_pad_ ? (dn_count(sd, 0) * dn_count(sh, 1) * dn_count(sw, 2))
                                               : (d1 - d0) * (h1 - h0) * (w1 - w0);
            *y = count > 0 ? sum / static_cast<float>(count) : 0.f;
          }
        }
      }
    }
  }

  int64_t dn_count(int64_t start, int axis) const {
    int64_t t0, t1;
    tap_range(start, win_.k[axis], win_.d[axis], -win_.p[axis], win_.in[axis] + win_.pe[axis], &t0, &t1);
    return t1 - t0;
  }

  Window win_;
  int64_t planes_ = 0;
  bool max_ = false, include_pad_ = false, want_indices_ = false;
};

class GlobalPoolKernel final : public Kernel {
 public:
  GlobalPoolKernel(const KernelInit& init, bool is_max) : max_(is_max) {
    init.require_float(0);
    const Shape& xs = init.input(0).shape;
    if (xs.size() < 3) init.fail("expects [N, C, spatial...], got ", shape_str(xs));
    planes_ = xs[0] * xs[1];
    size_ = shape_numel(xs) / std::max<int64_t>(planes_, 1);
    if (init.output(0).bytes() != static_cast<std::size_t>(planes_) * sizeof(float)) init.fail("output should hold one value per channel");
  }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    a.pool.parallel_for(chunk_count(planes_, 64), [&](int64_t t, int) {
      const int64_t end = std::min(planes_, (t + 1) * 64);
      for (int64_t p = t * 64; p < end; ++p) {
        const float* xp = x + p * size_;
        if (max_) {
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < size_; ++i) best = std::max(best, xp[i]);
          y[p] = best;
        } else {
          double sum = 0.0;
          for (int64_t i = 0; i < size_; ++i) sum += xp[i];
          y[p] = static_cast<float>(sum / static_cast<double>(size_));
        }
      }
    });
  }

 private:
  bool max_;
  int64_t planes_ = 0, size_ = 0;
};

}  // namespace

void add_pool_kernels(KernelTable& t) {
  t["MaxPool"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PoolKernel>(i, true); };
  t["AveragePool"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PoolKernel>(i, false); };
  t["GlobalAveragePool"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<GlobalPoolKernel>(i, false);
  };
  t["GlobalMaxPool"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<GlobalPoolKernel>(i, true); };
}

}  // namespace sluice::cpu
