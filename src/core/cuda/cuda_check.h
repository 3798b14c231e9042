#pragma once
// Check macros for the CUDA runtime, cuDNN and cuBLAS.  Each failing call becomes a sluice::Error
// whose message names the call, file:line, rank and device (core/error.h format_failure) and the
// library's own error name, so one line on stderr says what broke where.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/error.h"

namespace sluice {

inline std::string cuda_error_text(cudaError_t e) {
  return str(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
inline std::string cudnn_error_text(cudnnStatus_t s) { return cudnnGetErrorString(s); }
const char* cublas_status_name(cublasStatus_t s);

}  // namespace sluice

#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    const cudaError_t sluice_cuda_err_ = (call);                                                   \
    if (sluice_cuda_err_ != cudaSuccess)                                                           \
      throw ::sluice::Error(::sluice::format_failure(#call, __FILE__, __LINE__,                    \
                                                     ::sluice::cuda_error_text(sluice_cuda_err_))); \
  } while (0)

#define CUDNN_CHECK(call)                                                                            \
  do {                                                                                               \
    const cudnnStatus_t sluice_cudnn_st_ = (call);                                                   \
    if (sluice_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                    \
      throw ::sluice::Error(::sluice::format_failure(#call, __FILE__, __LINE__,                      \
                                                     ::sluice::cudnn_error_text(sluice_cudnn_st_))); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                 \
    const cublasStatus_t sluice_cublas_st_ = (call);                                                   \
    if (sluice_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      throw ::sluice::Error(::sluice::format_failure(#call, __FILE__, __LINE__,                        \
                                                     ::sluice::cublas_status_name(sluice_cublas_st_))); \
  } while (0)

// Kernel launches report configuration errors only through cudaGetLastError.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
