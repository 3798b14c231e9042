#pragma once
// The activations and binary operators of the elementwise kernels, shared with the kernels that
// apply them in an epilogue (depthwise convolution, the fused output tails).  Float math.
#include "engine/cuda/kernels.h"

namespace sluice::cuda {

__device__ __forceinline__ float apply_act(float x, const ActParams& p) {
  switch (p.act) {
    case Act::Identity: return x;
    case Act::Relu: return x > 0.f ? x : 0.f;
    case Act::LeakyRelu: return x >= 0.f ? x : p.a * x;
    case Act::Clip: return fminf(fmaxf(x, p.a), p.b);
    case Act::Sigmoid: return 1.f / (1.f + expf(-x));
    case Act::Tanh: return tanhf(x);
    case Act::HardSigmoid: return fmaxf(0.f, fminf(1.f, p.a * x + p.b));
    case Act::HardSwish: return x * fmaxf(0.f, fminf(1.f, x * (1.f / 6.f) + 0.5f));
    case Act::Exp: return expf(x);
    case Act::Log: return logf(x);
    case Act::Sqrt: return sqrtf(x);
    case Act::Neg: return -x;
    case Act::Abs: return fabsf(x);
    case Act::Erf: return erff(x);
    case Act::Reciprocal: return 1.f / x;
    case Act::Floor: return floorf(x);
    case Act::Ceil: return ceilf(x);
    case Act::Round: return rintf(x);   // ONNX Round: halves to even, like rint
    case Act::Elu: return x > 0.f ? x : p.a * (expf(x) - 1.f);
    case Act::Softplus: return x > 20.f ? x : log1pf(expf(x));
    case Act::Gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case Act::GeluTanh: {
      const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + tanhf(u));
    }
    case Act::Selu: return x > 0.f ? p.b * x : p.b * (p.a * expf(x) - p.a);
    case Act::Sin: return sinf(x);
    case Act::Cos: return cosf(x);
    case Act::Not: return x == 0.f ? 1.f : 0.f;
    case Act::Sign: return x > 0.f ? 1.f : (x < 0.f ? -1.f : x);   // 0 stays 0, NaN stays NaN
    case Act::Swish: return x / (1.f + expf(-p.a * x));   // exp overflowing to inf gives the limit, 0
  }
  return x;
}

__device__ __forceinline__ float apply_bin(BinOp op, float a, float b) {
  switch (op) {
    case BinOp::Add: return a + b;
    case BinOp::Sub: return a - b;
    case BinOp::Mul: return a * b;
    case BinOp::Div: return a / b;
    case BinOp::Pow: return powf(a, b);
    case BinOp::Max: return fmaxf(a, b);
    case BinOp::Min: return fminf(a, b);
    case BinOp::PRelu: return a >= 0.f ? a : a * b;
    case BinOp::Mod: return fmodf(a, b);
  }
  return a;
}

}  // namespace sluice::cuda
