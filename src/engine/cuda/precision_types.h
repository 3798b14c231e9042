#pragma once
// What a precision and an element type are in the libraries' terms, written once: the element type
// the engine computes in, cuBLAS/cuBLASLt's data type for an element type, and the accumulation
// (fp32, TF32 tensor cores only at --precision tf32).  Used by the builder, the products (cuBLAS and
// cuBLASLt), attention's GEMM path and the ceilings' GEMM (peaks.cu).
#include <cublas_api.h>
#include <library_types.h>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/engine.h"

namespace sluice::cuda {

// The element type activations are stored in: fp16/bf16 at those precisions, else fp32.
inline DType compute_dtype(Precision p) {
  switch (p) {
    case Precision::FP16: return DType::F16;
    case Precision::BF16: return DType::BF16;
    default: return DType::F32;
  }
}

// cuBLAS's and cuBLASLt's name of an element type (F32, F16, BF16; others are refused).
inline cudaDataType_t blas_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: SLUICE_THROW("cuBLAS: element type ", dtype_name(t), " is not supported");
  }
}

// The products' accumulation: fp32, with TF32 tensor cores at --precision tf32.
inline cublasComputeType_t blas_compute(Precision p) {
  return p == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

}  // namespace sluice::cuda
