// How many CUDA devices this process can use (0 without a driver, a GPU or a CUDA build).
#include "pipeline/gpu_count.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sluice {

int gpu_count() {
#ifdef SLUICE_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error so later calls are not confused
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

bool cuda_built() {
#ifdef SLUICE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace sluice
