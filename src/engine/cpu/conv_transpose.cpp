// ConvTranspose: per sample and group, a GEMM turns the input into columns (one row per output
// channel and kernel tap), which col2im scatters into the output.  Tasks own disjoint output
// channels, so the scatter needs no locks and adds contributions in a fixed order.
#include <algorithm>

#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

class ConvTransposeKernel final : public Kernel {
 public:
  explicit ConvTransposeKernel(const KernelInit& init) {
    init.require_float(0);
    init.require_float(1);
    const Shape& xs = init.input(0).shape;
    const Shape& ws = init.input(1).shape;
    const Shape& ys = init.output(0).shape;
    const int64_t rank = static_cast<int64_t>(xs.size()) - 2;
    if (rank < 1 || rank > 3 || ws.size() != xs.size() || ys.size() != xs.size())
      init.fail("input ", shape_str(xs), ", weights ", shape_str(ws), " and output ", shape_str(ys), " do not fit");
    group_ = init.node.get_int("group", 1);
    batch_ = xs[0];
    c_ = xs[1];
    if (group_ < 1 || c_ % group_ != 0 || ws[0] != c_) init.fail("group ", group_, " does not fit input ", shape_str(xs), " and weights ", shape_str(ws));
    cg_ = c_ / group_;
    mg_ = ws[1];
    m_ = mg_ * group_;
    if (ys[0] != batch_ || ys[1] != m_) init.fail("output ", shape_str(ys), " should have ", m_, " channels");
    std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
    if (init.node.get_ints("kernel_shape", kernel) != kernel) init.fail("kernel_shape does not match weights ", shape_str(ws));
    const auto strides = init.node.get_ints("strides", std::vector<int64_t>(rank, 1));
    const auto dil = init.node.get_ints("dilations", std::vector<int64_t>(rank, 1));
    const auto pads = init.node.get_ints("pads", std::vector<int64_t>(2 * rank, 0));
    const auto outpad = init.node.get_ints("output_padding", std::vector<int64_t>(rank, 0));
    auto out_shape = init.node.get_ints("output_shape", {});
    if (static_cast<int64_t>(out_shape.size()) == rank + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    const std::string auto_pad = init.node.get_string("auto_pad", "NOTSET");
    if (static_cast<int64_t>(strides.size()) != rank || static_cast<int64_t>(dil.size()) != rank ||
        static_cast<int64_t>(pads.size()) != 2 * rank || static_cast<int64_t>(outpad.size()) != rank ||
        (!out_shape.empty() && static_cast<int64_t>(out_shape.size()) != rank))
      init.fail("strides, dilations, pads, output_padding or output_shape do not match ", rank, " spatial dimensions");
    const int off = 3 - static_cast<int>(rank);
    for (int64_t i = 0; i < rank; ++i) {
      const int j = off + static_cast<int>(i);
      in_[j] = xs[2 + i];
      out_[j] = ys[2 + i];
      k_[j] = kernel[i];
      s_[j] = strides[i];
      d_[j] = dil[i];
      if (k_[j] < 1 || s_[j] < 1 || d_[j] < 1) init.fail("kernel, strides and dilations must be positive");
      const int64_t full = s_[j] * (in_[j] - 1) + outpad[i] + (k_[j] - 1) * d_[j] + 1;  // before cropping
      int64_t expect;
      if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        expect = !out_shape.empty() ? out_shape[i] : in_[j] * s_[j];
        // An output larger than the full result is padded at the end (total clamped at 0, as ONNX
        // Runtime does).  The split of the total follows the ONNX spec: the odd element goes to the
        // end for SAME_UPPER, to the start otherwise.
        const int64_t total = std::max<int64_t>(0, full - expect);
        p_[j] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      } else if (auto_pad == "VALID") {
        expect = full;
        p_[j] = 0;
      } else if (auto_pad == "NOTSET") {
        p_[j] = pads[i];
        expect = full - pads[i] - pads[i + rank];
      } else {
        init.fail("unknown auto_pad '", auto_pad, "'");
      }
      if (expect != out_[j]) init.fail("output extent ", out_[j], " along spatial axis ", i, " should be ", expect);
    }
    kk_ = k_[0] * k_[1] * k_[2];
    in_size_ = in_[0] * in_[1] * in_[2];
    out_size_ = out_[0] * out_[1] * out_[2];
    has_bias_ = init.has_input(2);
    if (has_bias_ && init.input(2).shape != Shape{m_}) init.fail("bias should be [", m_, "]");
    // Output channels per task: bounded column buffer, and several tasks per sample and group.
    const int64_t per_channel = std::max<int64_t>(1, kk_ * in_size_);
    mc_ = std::max<int64_t>(1, std::min<int64_t>(mg_, (int64_t{1} << 20) / per_channel));
    mc_ = std::min(mc_, std::max<int64_t>(1, (mg_ + 3) / 4));
    chunks_ = (mg_ + mc_ - 1) / mc_;
  }

  std::size_t scratch_bytes(int threads) const override { return threads * per_thread_bytes(); }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    const float* w = static_cast<const float*>(a.in[1]);
    const float* b = has_bias_ ? static_cast<const float*>(a.in[2]) : nullptr;
    float* y = static_cast<float*>(a.out[0]);
    a.pool.parallel_for(batch_ * group_ * chunks_, [&](int64_t t, int thread) {
      const int64_t n = t / (group_ * chunks_), g = (t / chunks_) % group_, m0 = (t % chunks_) * mc_;
      float* col = reinterpret_cast<float*>(static_cast<char*>(a.scratch) + thread * per_thread_bytes());
      task(n, g, m0, x, w, b, y, col);
    });
  }

 private:
  std::size_t per_thread_bytes() const { return align64(static_cast<std::size_t>(mc_ * kk_ * in_size_) * sizeof(float)); }

  void task(int64_t n, int64_t g, int64_t m0, const float* x, const float* w, const float* b, float* y, float* col) const {
    const int64_t mc = std::min(mc_, mg_ - m0);
    const float* xg = x + (n * c_ + g * cg_) * in_size_;
    const float* wg = w + g * cg_ * mg_ * kk_ + m0 * kk_;
    // col[(m, tap), pixel] = sum_c W[c, m, tap] * x[c, pixel]
    sgemm(true, false, mc * kk_, in_size_, cg_, 1.f, wg, mg_ * kk_, xg, in_size_, 0.f, col, in_size_);
    for (int64_t m = 0; m < mc; ++m) {
      const int64_t mabs = g * mg_ + m0 + m;
      float* yp = y + (n * m_ + mabs) * out_size_;
      const float bias = b ? b[mabs] : 0.f;
      std::fill(yp, yp + out_size_, bias);
      const float* row = col + m * kk_ * in_size_;
      for (int64_t kd = 0; kd < k_[0]; ++kd)
        for (int64_t kh = 0; kh < k_[1]; ++kh)
          for (int64_t kw = 0; kw < k_[2]; ++kw, row += in_size_) scatter(row, yp, kd, kh, kw);
    }
  }

  // Adds one kernel tap's row of columns to the output plane.
  void scatter(const float* row, float* yp, int64_t kd, int64_t kh, int64_t kw) const {
    const int64_t W = in_[2], OW = out_[2];
    // Input columns iw whose output column ow = iw*s - p + kw*d falls inside [0, OW).
    const int64_t base = -p_[2] + kw * d_[2];
    const int64_t lo = base >= 0 ? 0 : std::min(W, (-base + s_[2] - 1) / s_[2]);
    const int64_t hi = base >= OW ? lo : std::max(lo, std::min(W, (OW - base + s_[2] - 1) / s_[2]));
    for (int64_t id = 0; id < in_[0]; ++id) {
      const int64_t od = id * s_[0] - p_[0] + kd * d_[0];
      if (od < 0 || od >= out_[0]) continue;
      for (int64_t ih = 0; ih < in_[1]; ++ih) {
        const int64_t oh = ih * s_[1] - p_[1] + kh * d_[1];
        if (oh < 0 || oh >= out_[1]) continue;
        const float* src = row + (id * in_[1] + ih) * W;
        float* dst = yp + (od * out_[1] + oh) * OW;
        for (int64_t iw = lo; iw < hi; ++iw) dst[base + iw * s_[2]] += src[iw];
      }
    }
  }

  int64_t batch_ = 0, c_ = 0, m_ = 0, group_ = 1, cg_ = 0, mg_ = 0, kk_ = 0, in_size_ = 0, out_size_ = 0;
  int64_t in_[3] = {1, 1, 1}, out_[3] = {1, 1, 1}, k_[3] = {1, 1, 1}, s_[3] = {1, 1, 1}, d_[3] = {1, 1, 1},
          p_[3] = {0, 0, 0};
  int64_t mc_ = 1, chunks_ = 1;
  bool has_bias_ = false;
};

}  // namespace

void add_conv_transpose_kernels(KernelTable& t) {
  t["ConvTranspose"] = [](const KernelInit& init) -> std::unique_ptr<Kernel> {
    return std::make_unique<ConvTransposeKernel>(init);
  };
}

}  // namespace sluice::cpu
