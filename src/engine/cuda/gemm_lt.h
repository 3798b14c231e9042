#pragma once
// Products with their epilogue on cuBLASLt: the bias add, and the GELU after it, done by the GEMM
// kernel on its accumulators before the one write of the output, which may be fp32 while A and B
// are fp16/bf16 (a branch tail of the fp32 residual stream, engine/residual_stream.h).  The builder
// makes these steps for a MatMul or Gemm whose only reader is a bias Add (and whose Add's only
// reader is a Gelu, or a residual Add, added as C with beta = 1), ops_gemm.cpp; every other
// product stays on cublasGemmEx.
#include <cublasLt.h>

#include <memory>
#include <string>

#include "core/cuda/cuda_raii.h"
#include "engine/cuda/engine_internal.h"

namespace sluice::cuda {

// BiasRelu: a 1x1 convolution's epilogue (ops_conv.cpp): ReLU after the bias and C.
enum class GemmEpilogue { None, Bias, BiasGelu, BiasRelu };

// One strided-batched row-major product Y[b] = alpha * op(A[b]) op(B[b]) (+ C[b]) (+ bias[n]) (then
// GELU or ReLU; ReLU also after C: a 1x1 convolution's residual, ops_conv.cpp), strides in elements (0: the operand is shared by the batch).  A and B are of type `ab`
// (the compute type), Y of type `y` (`ab`, or F32), the bias and C of type `y`; C (a residual) has
// Y's shape and strides and is never combined with the GELU (cuBLASLt applies it after adding C).
struct LtGemmSpec {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_y = 0;
  float alpha = 1.f;
  DType ab = DType::F32, y = DType::F32;
  Precision precision = Precision::FP32;
  GemmEpilogue epilogue = GemmEpilogue::None;
  // The GELU the graph asks for (Act::Gelu, the erf form, or Act::GeluTanh).  cuBLASLt's epilogue
  // computes the tanh form; the builder fuses the erf form only at fp16/bf16 (ops_gemm.cpp).  When
  // cuBLASLt offers no algorithm with the epilogue, the step runs the product alone and this
  // activation (and the bias) as separate kernels.
  Act gelu = Act::Gelu;
};

// The step for `spec` reading slots a, b, bias (-1 without one) and c (the residual added with
// beta = 1; -1 without one), writing y.
std::unique_ptr<Step> make_lt_gemm_step(std::string label, const LtGemmSpec& spec, int a, int b, int bias, int y, int c = -1);

// How many of cuBLASLt's heuristic candidates a product's set-up times at each level
// (autotune.h): none under off (the first, untimed), kQuickProducts under quick (1 warm-up, the
// median of 3), kFullProducts under full (2 warm-ups, the median of 5).
constexpr int kQuickProducts = 8;
constexpr int kFullProducts = 16;

namespace detail {
inline void destroy_cublaslt(cublasLtHandle_t h) { (void)cublasLtDestroy(h); }
}  // namespace detail
using CublasLtHandle = Handle<cublasLtHandle_t, detail::destroy_cublaslt>;
CublasLtHandle make_cublaslt();

}  // namespace sluice::cuda
