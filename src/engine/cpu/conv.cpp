// Conv and sluice.FusedConv: im2col + sgemm per sample, tile by tile, with the bias, residual and
// activation applied while the tile is still in cache.  Pointwise convolutions skip im2col; those
// where each output channel reads one input channel (depthwise) run a direct loop instead of a
// GEMM with a single row.
#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/cpu/activation.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel.h"
#include "engine/cpu/window.h"

namespace sluice::cpu {
namespace {

// Copies the patch rows of columns [n0, n0 + nt) of one sample's group: col[K, nt], K = cg*kernel.
void im2col(const Window& w, const float* x, int64_t cg, int64_t n0, int64_t nt, float* col) {
  const int64_t plane = w.in_size();
  const int64_t ohw = w.out[1] * w.out[2];
  for (int64_t c = 0; c < cg; ++c) {
    const float* xc = x + c * plane;
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw) {
          float* dst = col;
          col += nt;
          int64_t p = n0;
          const int64_t end = n0 + nt;
          while (p < end) {
            const int64_t od = p / ohw, oh = (p % ohw) / w.out[2], ow = p % w.out[2];
            const int64_t seg = std::min(end - p, w.out[2] - ow);
            const int64_t id = od * w.s[0] - w.p[0] + kd * w.d[0];
            const int64_t ih = oh * w.s[1] - w.p[1] + kh * w.d[1];
            if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
              std::memset(dst, 0, static_cast<std::size_t>(seg) * sizeof(float));
            } else {
              const float* src = xc + (id * w.in[1] + ih) * w.in[2];
              const int64_t iw0 = ow * w.s[2] - w.p[2] + kw * w.d[2];
              const int64_t sw = w.s[2];
              // Columns q with 0 <= iw0 + q*sw < W read the input, the others are padding.
              int64_t qlo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
              int64_t qhi = iw0 >= w.in[2] ? 0 : (w.in[2] - iw0 + sw - 1) / sw;
              qlo = std::min(qlo, seg);
              qhi = std::max(qlo, std::min(qhi, seg));
              for (int64_t q = 0; q < qlo; ++q) dst[q] = 0.f;
              if (sw == 1) {
                std::memcpy(dst + qlo, src + iw0 + qlo, static_cast<std::size_t>(qhi - qlo) * sizeof(float));
              } else {
                for (int64_t q = qlo; q < qhi; ++q) dst[q] = src[iw0 + q * sw];
              }
              for (int64_t q = qhi; q < seg; ++q) dst[q] = 0.f;
            }
            dst += seg;
            p += seg;
          }
        }
  }
}

class ConvKernel final : public Kernel {
 public:
  explicit ConvKernel(const KernelInit& init) {
    for (std::size_t i = 0; i < 2; ++i) init.require_float(i);
    const Shape& xs = init.input(0).shape;
    const Shape& ws = init.input(1).shape;
    const Shape& ys = init.output(0).shape;
    if (xs.size() < 3 || ws.size() != xs.size()) init.fail("input ", shape_str(xs), " and weights ", shape_str(ws), " do not match");
    group_ = init.node.get_int("group", 1);
    batch_ = xs[0];
    c_ = xs[1];
    m_ = ws[0];
    if (group_ < 1 || c_ % group_ != 0 || m_ % group_ != 0 || ws[1] * group_ != c_)
      init.fail("group ", group_, " does not fit input channels ", c_, " and weights ", shape_str(ws));
    if (ys[0] != batch_ || ys[1] != m_) init.fail("output ", shape_str(ys), " does not match input and weights");
    std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
    const auto ks = init.node.get_ints("kernel_shape", kernel);
    if (ks != kernel) init.fail("kernel_shape ", shape_str(ks), " does not match weights ", shape_str(ws));
    win_ = resolve_window(init, xs, ys, kernel, false);
    cg_ = c_ / group_;
    mg_ = m_ / group_;
    kk_ = cg_ * win_.k_size();
    has_bias_ = init.has_input(2);
    if (has_bias_) {
      init.require_float(2);
      if (init.input(2).shape != Shape{m_}) init.fail("bias ", shape_str(init.input(2).shape), " should be [", m_, "]");
    }
    has_z_ = init.has_input(3);
    if (has_z_) {
      init.require_float(3);
      if (init.input(3).shape != ys) init.fail("residual ", shape_str(init.input(3).shape), " should be ", shape_str(ys));
    }
    const std::string act = init.node.get_string("activation", "");
    if (act == "Relu") {
      act_.kind = Activation::Relu;
    } else if (act == "Clip") {
      act_.kind = Activation::Clip;
      act_.lo = init.node.get_float("clip_min", -std::numeric_limits<float>::infinity());
      act_.hi = init.node.get_float("clip_max", std::numeric_limits<float>::infinity());
    } else if (act == "LeakyRelu") {
      act_.kind = Activation::LeakyRelu;
      act_.alpha = init.node.get_float("alpha", 0.01f);
    } else if (act == "Gelu") {
      act_.kind = Activation::Gelu;
    } else if (act == "GeluTanh") {
      act_.kind = Activation::GeluTanh;
    } else if (!act.empty()) {
      init.fail("unknown activation '", act, "'");
    }
    direct_ = cg_ == 1 && mg_ <= 4 && win_.in[0] == 1 && win_.k[0] == 1 && win_.out[0] == 1;
    pointwise_ = win_.is_pointwise();
    tiles_ = choose_gemm_tiles(mg_, win_.out_size(), kk_);
  }

  std::size_t scratch_bytes(int threads) const override {
    if (direct_ || pointwise_) return 0;
    return static_cast<std::size_t>(threads) * per_thread_bytes();
  }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    const float* w = static_cast<const float*>(a.in[1]);
    const float* b = has_bias_ ? static_cast<const float*>(a.in[2]) : nullptr;
    const float* z = has_z_ ? static_cast<const float*>(a.in[3]) : nullptr;
    float* y = static_cast<float*>(a.out[0]);
    if (direct_) {
      a.pool.parallel_for(batch_ * m_, [&](int64_t t, int) { direct_channel(t / m_, t % m_, x, w, b, z, y); });
      return;
    }
    const int64_t per_sample = group_ * tiles_.mc * tiles_.nc;
    a.pool.parallel_for(batch_ * per_sample, [&](int64_t t, int thread) {
      const int64_t n = t / per_sample;
      int64_t r = t % per_sample;
      const int64_t g = r / (tiles_.mc * tiles_.nc);
      r %= tiles_.mc * tiles_.nc;
      const int64_t m0 = (r / tiles_.nc) * tiles_.mt, n0 = (r % tiles_.nc) * tiles_.nt;
      float* scratch = pointwise_ ? nullptr
                                  : reinterpret_cast<float*>(static_cast<char*>(a.scratch) + thread * per_thread_bytes());
      gemm_tile(n, g, m0, n0, x, w, b, z, y, scratch);
    });
  }

 private:
  std::size_t per_thread_bytes() const {
    return align64(static_cast<std::size_t>(kk_ * tiles_.nt) * sizeof(float));
  }

  void gemm_tile(int64_t n, int64_t g, int64_t m0, int64_t n0, const float* x, const float* w, const float* b,
                 const float* z, float* y, float* col) const {
    const int64_t osz = win_.out_size();
    const int64_t mt = std::min(tiles_.mt, mg_ - m0), nt = std::min(tiles_.nt, osz - n0);
    const float* xg = x + (n * c_ + g * cg_) * win_.in_size();
    const float* bmat;
    int64_t ldb;
    if (pointwise_) {
      bmat = xg + n0;
      ldb = win_.in_size();
    } else {
      im2col(win_, xg, cg_, n0, nt, col);
      bmat = col;
      ldb = nt;
    }
    const int64_t mabs = g * mg_ + m0;
    float* yt = y + (n * m_ + mabs) * osz + n0;
    sgemm(false, false, mt, nt, kk_, 1.f, w + mabs * kk_, kk_, bmat, ldb, 0.f, yt, osz);
    for (int64_t i = 0; i < mt; ++i) epilogue(yt + i * osz, nt, b ? b[mabs + i] : 0.f, z ? z + (yt - y) + i * osz : nullptr);
  }

  void epilogue(float* y, int64_t n, float bias, const float* z) const {
    if (bias != 0.f)
      for (int64_t j = 0; j < n; ++j) y[j] += bias;
    if (z)
      for (int64_t j = 0; j < n; ++j) y[j] += z[j];
    act_.apply(y, n);
  }

  // One output plane of a convolution where each output channel reads a single input channel.
  void direct_channel(int64_t n, int64_t m, const float* x, const float* w, const float* b, const float* z,
                      float* y) const {
    const int64_t g = m / mg_;
    const float* xc = x + (n * c_ + g) * win_.in_size();
    const float* wm = w + m * win_.k_size();
    const int64_t osz = win_.out_size();
    float* yc = y + (n * m_ + m) * osz;
    const int64_t H = win_.in[1], W = win_.in[2], OH = win_.out[1], OW = win_.out[2];
    const int64_t sh = win_.s[1], sw = win_.s[2];
    for (int64_t oh = 0; oh < OH; ++oh) {
      float* yr = yc + oh * OW;
      for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = 0.f;
      for (int64_t kh = 0; kh < win_.k[1]; ++kh) {
        const int64_t ih = oh * sh - win_.p[1] + kh * win_.d[1];
        if (ih < 0 || ih >= H) continue;
        const float* xr = xc + ih * W;
        for (int64_t kw = 0; kw < win_.k[2]; ++kw) {
          const float wv = wm[kh * win_.k[2] + kw];
          const int64_t iw0 = -win_.p[2] + kw * win_.d[2];
          int64_t lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
          int64_t hi = iw0 >= W ? 0 : (W - iw0 + sw - 1) / sw;
          lo = std::min(lo, OW);
          hi = std::max(lo, std::min(hi, OW));
          if (sw == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[iw0 + ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[iw0 + ow * sw];
          }
        }
      }
    }
    epilogue(yc, osz, b ? b[m] : 0.f, z ? z + (yc - y) : nullptr);
  }

  Window win_;
  int64_t batch_ = 0, c_ = 0, m_ = 0, group_ = 1, cg_ = 0, mg_ = 0, kk_ = 0;
  bool has_bias_ = false, has_z_ = false, direct_ = false, pointwise_ = false;
  Activation act_;
  GemmTiles tiles_;
};

std::unique_ptr<Kernel> make_conv(const KernelInit& init) {
  if (init.node.op == "Conv" && init.has_input(3)) init.fail("Conv takes at most 3 inputs");
  return std::make_unique<ConvKernel>(init);
}

}  // namespace

void add_conv_kernels(KernelTable& t) {
  t["Conv"] = make_conv;
  t["sluice.FusedConv"] = make_conv;
}

}  // namespace sluice::cpu
