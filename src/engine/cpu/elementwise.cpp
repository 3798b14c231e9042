// Unary float ops (activations and math), Clip, BatchNormalization (inference) and sluice.Normalize.
#include <cmath>
#include <limits>

#include "engine/cpu/kernel.h"

namespace sluice::cpu {
namespace {

// A float -> float op applied element by element; `f` holds the op's attributes.
template <typename F>
std::unique_ptr<Kernel> unary(const KernelInit& init, F f) {
  init.require_float(0);
  init.require_dtype(init.output(0), DType::F32);
  const int64_t n = shape_numel(init.input(0).shape);
  if (shape_numel(init.output(0).shape) != n) init.fail("output and input sizes differ");
  return lambda_kernel([n, f](const KernelArgs& a) {
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    for_chunks(a.pool, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
    });
  });
}

float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

std::unique_ptr<Kernel> make_clip(const KernelInit& init) {
  init.require_float(0);
  const int64_t n = shape_numel(init.input(0).shape);
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (init.opset < 11) {  // bounds as attributes
    lo = init.node.get_float("min", lo);
    hi = init.node.get_float("max", hi);
    return unary(init, [lo, hi](float v) { return std::min(std::max(v, lo), hi); });
  }
  // Opset 11+: optional scalar inputs, read at run time (absent = unbounded).
  for (std::size_t i = 1; i < 3; ++i)
    if (init.has_input(i)) {
      init.require_float(i);
      if (shape_numel(init.input(i).shape) != 1) init.fail("min and max must be scalars");
    }
  const bool has_lo = init.has_input(1), has_hi = init.has_input(2);
  return lambda_kernel([=](const KernelArgs& a) {
    const float l = has_lo ? *static_cast<const float*>(a.in[1]) : lo;
    const float h = has_hi ? *static_cast<const float*>(a.in[2]) : hi;
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    for_chunks(a.pool, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = std::min(std::max(x[i], l), h);
    });
  });
}

// y = x * a[c] + b[c] over [N, C, inner] with per-channel a and b computed at run time (the
// statistics may be graph inputs in principle; in practice they are constants).
std::unique_ptr<Kernel> make_batchnorm(const KernelInit& init) {
  for (std::size_t i = 0; i < 5; ++i) init.require_float(i);
  if (init.node.get_int("training_mode", 0) != 0) init.fail("training_mode=1 is not supported");
  for (std::size_t i = 1; i < init.out.size(); ++i)
    if (init.out[i]) init.fail("the running statistics outputs are not supported");
  const Shape& xs = init.input(0).shape;
  if (xs.size() < 2) init.fail("input ", shape_str(xs), " has no channel axis");
  const int64_t n = xs[0], c = xs[1], inner = shape_numel(xs) / std::max<int64_t>(1, n * c);
  for (std::size_t i = 1; i < 5; ++i)
    if (shape_numel(init.input(i).shape) != c) init.fail("input ", i, " should hold ", c, " values");
  const float eps = init.node.get_float("epsilon", 1e-5f);
  return lambda_kernel([n, c, inner, eps](const KernelArgs& a) {
    const float* x = static_cast<const float*>(a.in[0]);
    const float* scale = static_cast<const float*>(a.in[1]);
    const float* bias = static_cast<const float*>(a.in[2]);
    const float* mean = static_cast<const float*>(a.in[3]);
    const float* var = static_cast<const float*>(a.in[4]);
    float* y = static_cast<float*>(a.out[0]);
    a.pool.parallel_for(n * c, [&](int64_t p, int) {
      const int64_t ch = p % c;
      const float mul = scale[ch] / std::sqrt(var[ch] + eps);
      const float add = bias[ch] - mean[ch] * mul;
      const float* xp = x + p * inner;
      float* yp = y + p * inner;
      for (int64_t i = 0; i < inner; ++i) yp[i] = xp[i] * mul + add;
    });
  });
}

// sluice.Normalize: y = (float(x) * scale - mean[c]) / std[c], channel = axis 1.
std::unique_ptr<Kernel> make_normalize(const KernelInit& init) {
  const ValueInfo& xi = init.input(0);
  if (xi.dtype != DType::U8 && xi.dtype != DType::F32) init.fail("input must be uint8 or float32, not ", dtype_name(xi.dtype));
  init.require_dtype(init.output(0), DType::F32);
  const Shape& xs = xi.shape;
  const int64_t c = xs.size() >= 2 ? xs[1] : 1;
  const int64_t outer = xs.empty() ? 1 : xs[0];
  const int64_t inner = shape_numel(xs) / std::max<int64_t>(1, outer * c);
  const float scale = init.node.get_float("scale", 1.f);
  std::vector<float> mean = init.node.get_floats("mean", {0.f});
  std::vector<float> stdv = init.node.get_floats("std", {1.f});
  if (mean.empty()) mean = {0.f};
  if (stdv.empty()) stdv = {1.f};
  if (mean.size() == 1) mean.assign(static_cast<std::size_t>(c), mean[0]);
  if (stdv.size() == 1) stdv.assign(static_cast<std::size_t>(c), stdv[0]);
  if (static_cast<int64_t>(mean.size()) != c || static_cast<int64_t>(stdv.size()) != c)
    init.fail("mean and std need 1 or ", c, " values");
  const bool u8 = xi.dtype == DType::U8;
  return lambda_kernel([=](const KernelArgs& a) {
    float* y = static_cast<float*>(a.out[0]);
    a.pool.parallel_for(outer * c, [&](int64_t p, int) {
      const int64_t ch = p % c;
      const float m = mean[ch], s = stdv[ch];
      float* yp = y + p * inner;
      if (u8) {
        const uint8_t* xp = static_cast<const uint8_t*>(a.in[0]) + p * inner;
        for (int64_t i = 0; i < inner; ++i) yp[i] = (static_cast<float>(xp[i]) * scale - m) / s;
      } else {
        const float* xp = static_cast<const float*>(a.in[0]) + p * inner;
        for (int64_t i = 0; i < inner; ++i) yp[i] = (xp[i] * scale - m) / s;
      }
    });
  });
}

}  // namespace

void add_elementwise_kernels(KernelTable& t) {
  t["Relu"] = [](const KernelInit& i) { return unary(i, [](float v) { return v > 0.f ? v : 0.f; }); };
  t["LeakyRelu"] = [](const KernelInit& i) {
    const float alpha = i.node.get_float("alpha", 0.01f);
    return unary(i, [alpha](float v) { return v >= 0.f ? v : v * alpha; });
  };
  t["Sigmoid"] = [](const KernelInit& i) { return unary(i, sigmoid); };
  t["HardSigmoid"] = [](const KernelInit& i) {
    const float alpha = i.node.get_float("alpha", 0.2f), beta = i.node.get_float("beta", 0.5f);
    return unary(i, [alpha, beta](float v) { return std::max(0.f, std::min(1.f, alpha * v + beta)); });
  };
  t["HardSwish"] = [](const KernelInit& i) {
    return unary(i, [](float v) { return v * std::max(0.f, std::min(1.f, v * (1.f / 6.f) + 0.5f)); });
  };
  t["Tanh"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::tanh(v); }); };
  t["Exp"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::exp(v); }); };
  t["Log"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::log(v); }); };
  t["Sqrt"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::sqrt(v); }); };
  t["Abs"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::fabs(v); }); };
  t["Neg"] = [](const KernelInit& i) { return unary(i, [](float v) { return -v; }); };
  t["Reciprocal"] = [](const KernelInit& i) { return unary(i, [](float v) { return 1.f / v; }); };
  t["Floor"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::floor(v); }); };
  t["Ceil"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::ceil(v); }); };
  t["Erf"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::erf(v); }); };
  t["Softplus"] = [](const KernelInit& i) {
    return unary(i, [](float v) { return v > 20.f ? v : std::log1p(std::exp(v)); });
  };
  t["Elu"] = [](const KernelInit& i) {
    const float alpha = i.node.get_float("alpha", 1.f);
    return unary(i, [alpha](float v) { return v >= 0.f ? v : alpha * (std::exp(v) - 1.f); });
  };
  t["Sign"] = [](const KernelInit& i) { return unary(i, [](float v) { return static_cast<float>((v > 0.f) - (v < 0.f)); }); };
  t["Cos"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::cos(v); }); };
  t["Sin"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::sin(v); }); };
  t["Round"] = [](const KernelInit& i) { return unary(i, [](float v) { return std::nearbyint(v); }); };
  t["Gelu"] = [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    const std::string approx = i.node.get_string("approximate", "none");
    if (approx == "tanh")
      return unary(i, [](float v) {
        const float c = 0.7978845608028654f;  // sqrt(2 / pi)
        return 0.5f * v * (1.f + std::tanh(c * (v + 0.044715f * v * v * v)));
      });
    if (approx != "none") i.fail("approximate must be 'none' or 'tanh', not '", approx, "'");
    return unary(i, [](float v) { return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f)); });
  };
  t["Clip"] = make_clip;
  t["BatchNormalization"] = make_batchnorm;
  t["sluice.Normalize"] = make_normalize;
}

}  // namespace sluice::cpu
