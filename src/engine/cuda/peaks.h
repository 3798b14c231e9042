#pragma once
// The GPU's ceilings for the profile (engine/profile.h): copy bandwidth and matrix-product rate.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "engine/engine.h"
#include "engine/profile.h"

namespace sluice::cuda {

// Runs on stream `s` (the cuBLAS handle must be bound to it); allocates and frees its own buffers
// (about 2 GiB, less when the device is short of memory).  Synchronous.
DevicePeaks measure_device_peaks(cublasHandle_t blas, cudaStream_t s, Precision p);

}  // namespace sluice::cuda
