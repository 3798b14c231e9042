// LayerNormalization, GroupNormalization and InstanceNormalization (inference), float32.  Each
// normalized group's mean and variance accumulate in double over the group, in a fixed order.
#include <cmath>

#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

// The mean of n contiguous values and 1 / sqrt(variance + eps), accumulated in double: the mean
// first, then the mean of squared deviations from it (two passes keep the variance accurate when
// the mean is large next to the spread).  Both rounded to float, as the kernels apply them.
struct Moments {
  float mean, inv;
};
Moments moments(const float* x, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    sq += d * d;
  }
  return {static_cast<float>(mean), static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps))};
}

// Offsets into a parameter tensor of shape `p` for each element of the trailing `dims` it
// broadcasts over (numpy rules, aligned on the right).
std::vector<int64_t> broadcast_table(const KernelInit& init, const Shape& p, const Shape& dims) {
  if (p.size() > dims.size()) init.fail("scale or bias ", shape_str(p), " has more axes than the normalized ", shape_str(dims));
  const std::size_t off = dims.size() - p.size();
  const std::vector<int64_t> ps = strides_of(p);
  std::vector<int64_t> table(static_cast<std::size_t>(shape_numel(dims)), 0);
  std::vector<int64_t> idx(dims.size(), 0);
  for (std::size_t k = 0; k < table.size(); ++k) {
    int64_t o = 0;
    for (std::size_t d = 0; d < p.size(); ++d) {
      if (p[d] != 1 && p[d] != dims[off + d]) init.fail("scale or bias ", shape_str(p), " does not broadcast to ", shape_str(dims));
      o += p[d] == 1 ? 0 : idx[off + d] * ps[d];
    }
    table[k] = o;
    for (std::size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return table;
}

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const KernelInit& init) {
    init.require_float(0);
    init.require_float(1);
    const Shape& xs = init.input(0).shape;
    const int64_t r = static_cast<int64_t>(xs.size());
    const int64_t axis = init.axis(init.node.get_int("axis", -1), r);
    const Shape dims(xs.begin() + axis, xs.end());
    n_ = shape_numel(dims);
    rows_ = n_ == 0 ? 0 : shape_numel(xs) / n_;
    eps_ = init.node.get_float("epsilon", 1e-5f);
    scale_ = broadcast_table(init, init.input(1).shape, dims);
    if (init.has_input(2)) {
      init.require_float(2);
      bias_ = broadcast_table(init, init.input(2).shape, dims);
    }
    for (std::size_t k = 1; k < 3; ++k)
      if (k < init.node.outputs.size() && !init.node.outputs[k].empty()) {
        if (init.out[k]) init.require_dtype(*init.out[k], DType::F32);
        stats_ = static_cast<int>(k);
      }
  }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    const float* scale = static_cast<const float*>(a.in[1]);
    const float* bias = bias_.empty() ? nullptr : static_cast<const float*>(a.in[2]);
    float* y = static_cast<float*>(a.out[0]);
    float* mean_out = stats_ >= 1 ? static_cast<float*>(a.out[1]) : nullptr;
    float* inv_out = stats_ >= 2 ? static_cast<float*>(a.out[2]) : nullptr;
    const int64_t n = n_;
    a.pool.parallel_for(rows_, [&](int64_t row, int) {
      const float* xr = x + row * n;
      float* yr = y + row * n;
      const auto [m, s] = moments(xr, n, eps_);
      for (int64_t i = 0; i < n; ++i) {
        float v = (xr[i] - m) * s * scale[scale_[i]];
        if (bias) v += bias[bias_[i]];
        yr[i] = v;
      }
      if (mean_out) mean_out[row] = m;
      if (inv_out) inv_out[row] = s;
    });
  }

 private:
  int64_t n_ = 0, rows_ = 0;
  float eps_ = 1e-5f;
  int stats_ = 0;  // how many of the optional Mean and InvStdDev outputs the node has
  std::vector<int64_t> scale_, bias_;
};

// Group (and, with one channel per group, instance) normalization over [N, C, spatial...]; the
// scale and bias hold one value per channel (`per_group` false) or per group.
class GroupNormKernel final : public Kernel {
 public:
  GroupNormKernel(const KernelInit& init, bool instance) {
    for (std::size_t i = 0; i < 3; ++i) init.require_float(i);
    const Shape& xs = init.input(0).shape;
    if (xs.size() < 2) init.fail("input ", shape_str(xs), " has no channel axis");
    n_ = xs[0];
    c_ = xs[1];
    inner_ = shape_numel(xs) / std::max<int64_t>(1, n_ * c_);
    groups_ = instance ? c_ : init.node.get_int("num_groups", 0);
    if (groups_ < 1 || c_ % groups_ != 0) init.fail("num_groups ", groups_, " does not divide the ", c_, " channels");
    eps_ = init.node.get_float("epsilon", 1e-5f);
    const int64_t ps = shape_numel(init.input(1).shape);
    if (ps != shape_numel(init.input(2).shape)) init.fail("scale and bias differ in size");
    if (ps == c_) per_group_ = false;
    else if (ps == groups_) per_group_ = true;
    else init.fail("scale and bias must hold one value per channel (", c_, ") or per group (", groups_, ")");
  }

  void run(const KernelArgs& a) override {
    const float* x = static_cast<const float*>(a.in[0]);
    const float* scale = static_cast<const float*>(a.in[1]);
    const float* bias = static_cast<const float*>(a.in[2]);
    float* y = static_cast<float*>(a.out[0]);
    const int64_t cpg = c_ / groups_, len = cpg * inner_;
    a.pool.parallel_for(n_ * groups_, [&](int64_t t, int) {
      const int64_t grp = t % groups_;
      const float* xg = x + t * len;
      float* yg = y + t * len;
      const auto [m, inv] = moments(xg, len, eps_);
      for (int64_t c = 0; c < cpg; ++c) {
        const int64_t p = per_group_ ? grp : grp * cpg + c;
        const float mul = inv * scale[p], add = bias[p];
        const float* xc = xg + c * inner_;
        float* yc = yg + c * inner_;
        for (int64_t i = 0; i < inner_; ++i) yc[i] = (xc[i] - m) * mul + add;
      }
    });
  }

 private:
  int64_t n_ = 0, c_ = 0, inner_ = 0, groups_ = 1;
  float eps_ = 1e-5f;
  bool per_group_ = false;
};

}  // namespace

void add_norm_kernels(KernelTable& t) {
  t["LayerNormalization"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<LayerNormKernel>(i); };
  t["GroupNormalization"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<GroupNormKernel>(i, false); };
  t["InstanceNormalization"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<GroupNormKernel>(i, true); };
}

}  // namespace sluice::cpu
