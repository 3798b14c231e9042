#pragma once
// Small move-only owners for CUDA, cuDNN and cuBLAS handles.  Destructors never throw (errors at
// release time are ignored: the process is usually unwinding from a first failure already).
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"

namespace sluice::cuda {

// One owner type for every C handle: T is the handle, Release frees it.
template <typename T, void (*Release)(T)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T h) : h_(h) {}
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  T get() const { return h_; }
  operator T() const { return h_; }  // NOLINT: handles are passed straight to the C APIs
  explicit operator bool() const { return h_ != T{}; }
  void reset() {
    if (h_ != T{}) Release(h_);
    h_ = T{};
  }

 private:
  T h_{};
};

namespace detail {
inline void free_device(void* p) { (void)cudaFree(p); }
inline void free_host(void* p) { (void)cudaFreeHost(p); }
inline void destroy_stream(cudaStream_t s) { (void)cudaStreamDestroy(s); }
inline void destroy_event(cudaEvent_t e) { (void)cudaEventDestroy(e); }
inline void destroy_graph(cudaGraph_t g) { (void)cudaGraphDestroy(g); }
inline void destroy_graph_exec(cudaGraphExec_t g) { (void)cudaGraphExecDestroy(g); }
inline void destroy_cudnn(cudnnHandle_t h) { (void)cudnnDestroy(h); }
inline void destroy_cublas(cublasHandle_t h) { (void)cublasDestroy(h); }
inline void destroy_tensor_desc(cudnnTensorDescriptor_t d) { (void)cudnnDestroyTensorDescriptor(d); }
inline void destroy_filter_desc(cudnnFilterDescriptor_t d) { (void)cudnnDestroyFilterDescriptor(d); }
inline void destroy_conv_desc(cudnnConvolutionDescriptor_t d) { (void)cudnnDestroyConvolutionDescriptor(d); }
inline void destroy_act_desc(cudnnActivationDescriptor_t d) { (void)cudnnDestroyActivationDescriptor(d); }
}  // namespace detail

using Stream = Handle<cudaStream_t, detail::destroy_stream>;
using Event = Handle<cudaEvent_t, detail::destroy_event>;
using CudaGraph = Handle<cudaGraph_t, detail::destroy_graph>;
using CudaGraphExec = Handle<cudaGraphExec_t, detail::destroy_graph_exec>;
using CudnnHandle = Handle<cudnnHandle_t, detail::destroy_cudnn>;
using CublasHandle = Handle<cublasHandle_t, detail::destroy_cublas>;
using TensorDesc = Handle<cudnnTensorDescriptor_t, detail::destroy_tensor_desc>;
using FilterDesc = Handle<cudnnFilterDescriptor_t, detail::destroy_filter_desc>;
using ConvDesc = Handle<cudnnConvolutionDescriptor_t, detail::destroy_conv_desc>;
using ActivationDesc = Handle<cudnnActivationDescriptor_t, detail::destroy_act_desc>;

// A device allocation of `bytes` (nothing for 0 bytes).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, bytes));
      p_ = Handle<void*, detail::free_device>(p);
    }
  }
  void* get() const { return p_.get(); }
  template <typename T> T* as() const { return static_cast<T*>(p_.get()); }
  std::size_t bytes() const { return bytes_; }

 private:
  Handle<void*, detail::free_device> p_;
  std::size_t bytes_ = 0;
};

// Page-locked host memory: the only kind a cudaMemcpyAsync overlaps with compute.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
      void* p = nullptr;
      CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
      p_ = Handle<void*, detail::free_host>(p);
    }
  }
  void* get() const { return p_.get(); }
  std::size_t bytes() const { return bytes_; }

 private:
  Handle<void*, detail::free_host> p_;
  std::size_t bytes_ = 0;
};

inline Stream make_stream() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}
// A stream whose kernels the scheduler prefers over those of default-priority streams (it starts
// their blocks first when both wait): `greatest` is the device's highest priority.
inline Stream make_priority_stream() {
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  return Stream(s);
}
// Events used only for ordering skip timing: recording them is cheaper.
inline Event make_event(bool timing = false) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}
// The median of `reps` timings of f() on stream s (its work enqueued between two timing events), in
// ms, after `warmups` untimed calls.  Every candidate timing at set-up and every ceiling goes
// through it, so they are measured alike.
template <typename F>
float median_elapsed_ms(cudaStream_t s, int warmups, int reps, F&& f) {
  Event a = make_event(true), b = make_event(true);
  for (int i = 0; i < warmups; ++i) f();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
inline CudnnHandle make_cudnn() {
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  return CudnnHandle(h);
}
inline CublasHandle make_cublas() {
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  return CublasHandle(h);
}
inline TensorDesc make_tensor_desc() {
  cudnnTensorDescriptor_t d = nullptr;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  return TensorDesc(d);
}
inline FilterDesc make_filter_desc() {
  cudnnFilterDescriptor_t d = nullptr;
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
  return FilterDesc(d);
}
inline ConvDesc make_conv_desc() {
  cudnnConvolutionDescriptor_t d = nullptr;
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
  return ConvDesc(d);
}
inline ActivationDesc make_activation_desc() {
  cudnnActivationDescriptor_t d = nullptr;
  CUDNN_CHECK(cudnnCreateActivationDescriptor(&d));
  return ActivationDesc(d);
}

// Makes `device` current for the scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { (void)cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace sluice::cuda
