// Loading the CUDA libraries is a good part of a start whose algorithms come from the cache: the
// device's context, cuDNN's and cuBLAS's first handles.  None of it needs the model, so a rank does
// it on a thread of its own while rank 0 reads and prepares the model; the engine build then finds
// the context made and the libraries loaded.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "engine/engine.h"

namespace sluice {

void warm_up_cuda(int device) {
  // Failures are left to the engine build, which reports them with its own context.
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  cudnnHandle_t dnn = nullptr;
  if (cudnnCreate(&dnn) == CUDNN_STATUS_SUCCESS) cudnnDestroy(dnn);
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS) cublasDestroy(blas);
  (void)cudaGetLastError();
}

}  // namespace sluice
