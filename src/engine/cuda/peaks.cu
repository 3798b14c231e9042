// The GPU's ceilings for the profile, measured in the same process as the steps they judge: a
// device-to-device copy kernel with 16-byte accesses (bytes read + bytes written over time) and a
// cuBLAS matrix product at the engine's precision on random data (zeros can run faster than real
// values).  Medians of several event-timed repetitions after a warm-up.
#include <cublas_v2.h>

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_raii.h"
#include "engine/cuda/kernels_common.cuh"
#include "engine/cuda/peaks.h"
#include "engine/cuda/precision_types.h"

namespace sluice::cuda {
namespace {

__global__ void copy16_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t n) {
  SLUICE_GRID_STRIDE(i, n) { y[i] = x[i]; }
}

template <typename T>
__global__ void random_fill_kernel(T* y, int64_t n, uint32_t seed) {
  SLUICE_GRID_STRIDE(i, n) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    y[i] = from_f<T>(static_cast<float>(h >> 8) * (2.f / 16777216.f) - 1.f);
  }
}

// A buffer of `bytes`, halving the request (down to `min_bytes`) while the device has no room.
DeviceBuffer allocate_up_to(std::size_t* bytes, std::size_t min_bytes) {
  for (;;) {
    try {
      return DeviceBuffer(*bytes);
    } catch (const Error&) {
      (void)cudaGetLastError();   // clear the allocation failure
      if (*bytes / 2 < min_bytes) throw;
      *bytes /= 2;
    }
  }
}

}  // namespace

DevicePeaks measure_device_peaks(cublasHandle_t blas, cudaStream_t s, Precision p) {
  DevicePeaks out;
  int sms = 0, dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

  {  // Copy: 1 GiB each way (far beyond the 50 MB L2), grid-stride over a few blocks per SM.
    std::size_t bytes = 1ull << 30;
    DeviceBuffer src = allocate_up_to(&bytes, 64u << 20);
    DeviceBuffer dst = allocate_up_to(&bytes, 64u << 20);
    const int64_t n = static_cast<int64_t>(bytes / 16);
    random_fill_kernel<float><<<grid_for(n * 4), kThreads, 0, s>>>(src.as<float>(), n * 4, 7u);
    CUDA_CHECK_LAUNCH();
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(grid_for(n), static_cast<int64_t>(sms) * 16));
    const float ms = median_elapsed_ms(s, 1, 10, [&] {
      copy16_kernel<<<blocks, kThreads, 0, s>>>(src.as<uint4>(), dst.as<uint4>(), n);
      CUDA_CHECK_LAUNCH();
    });
    out.bytes_per_s = 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
    out.bytes_how = str("copy kernel, 16-byte accesses, ", bytes >> 20, " MiB each way, read + write bytes, median of 10");
  }

  {  // Matrix product: square, in the engine's element type, accumulating in float.
    const int64_t n = p == Precision::FP32 ? 4096 : 8192;
    const DType t = compute_dtype(p);
    const cudaDataType_t dt = blas_type(t);
    const cublasComputeType_t ct = blas_compute(p);
    const std::size_t bytes = static_cast<std::size_t>(n * n) * dtype_size(t);
    DeviceBuffer a(bytes), b(bytes), c(bytes);
    dispatch_float(t, [&](auto tag) {
      using T = decltype(tag);
      random_fill_kernel<T><<<grid_for(n * n), kThreads, 0, s>>>(a.as<T>(), n * n, 11u);
      random_fill_kernel<T><<<grid_for(n * n), kThreads, 0, s>>>(b.as<T>(), n * n, 13u);
    });
    CUDA_CHECK_LAUNCH();
    const float alpha = 1.f, beta = 0.f;
    const int ni = static_cast<int>(n);
    const float ms = median_elapsed_ms(s, 1, 10, [&] {
      CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, a.get(), dt, ni, b.get(), dt, ni, &beta,
                                c.get(), dt, ni, ct, CUBLAS_GEMM_DEFAULT));
    });
    out.flops_per_s = 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3);
    out.flops_how = str("cuBLAS GEMM ", n, "^3, ", dtype_name(t), p == Precision::TF32 ? " (tf32)" : "",
                        " in, float accumulate, random data, median of 10");
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

}  // namespace sluice::cuda
