#pragma once
// The activations FusedConv applies in its epilogue (graph.h), also used by the plain ops.
#include <algorithm>
#include <cmath>
#include <string>

namespace sluice::cpu {

struct Activation {
  enum Kind { None, Relu, Clip, LeakyRelu, Gelu, GeluTanh } kind = None;
  float lo = 0.f, hi = 0.f;  // Clip
  float alpha = 0.01f;       // LeakyRelu

  float operator()(float v) const {
    switch (kind) {
      case Relu: return v > 0.f ? v : 0.f;
      case Clip: return std::min(std::max(v, lo), hi);
      case LeakyRelu: return v >= 0.f ? v : v * alpha;
      case Gelu: return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
      case GeluTanh: return 0.5f * v * (1.f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
      default: return v;
    }
  }
  // Applies the activation to n values in place.
  void apply(float* y, int64_t n) const {
    switch (kind) {
      case None: return;
      case Relu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.f ? y[i] : 0.f; return;
      default: for (int64_t i = 0; i < n; ++i) y[i] = (*this)(y[i]); return;
    }
  }
};

}  // namespace sluice::cpu
